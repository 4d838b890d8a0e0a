package main

import (
	"net"
	"strings"
	"testing"
)

// TestResolveUDP checks the address helper: names resolve, IP literals
// pass, a listening address may leave the host out, a peer's may not,
// and a name that does not resolve is an error naming it.
func TestResolveUDP(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		listen  bool
		want    string
		wantErr string
	}{
		{addr: "localhost:7471", want: "127.0.0.1:7471"},
		{addr: "localhost:0", listen: true, want: "127.0.0.1:0"},
		{addr: "127.0.0.1:7471", want: "127.0.0.1:7471"},
		{addr: "[::1]:7471", want: "[::1]:7471"},
		{addr: ":7471", listen: true, want: ":7471"},
		{addr: ":7471", wantErr: "no host"},
		{addr: "localhost", wantErr: "want host:port"},
		{addr: "no-such-host.invalid:7471", wantErr: `--switch "no-such-host.invalid:7471": host "no-such-host.invalid" does not resolve`},
	} {
		got, err := resolveUDP("--switch", tc.addr, tc.listen)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %q, %v; want an error containing %q", tc.addr, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
}

func init() {
	// No DNS query leaves a test: .invalid names fail as a resolver says
	// they do (RFC 6761), without asking one.
	real := resolveUDPAddr
	resolveUDPAddr = func(network, addr string) (*net.UDPAddr, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".invalid") {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		}
		return real(network, addr)
	}
}

// TestHostNames runs commands with host names where addresses go.
func TestHostNames(t *testing.T) {
	t.Setenv("NDMA_TOKEN", "")
	const token = "s3cret"
	addr := tokenSwitch(t, token)
	_, port, _ := net.SplitHostPort(addr)
	byName := net.JoinHostPort("localhost", port)
	if out, err := execute(t, "stat", "--switch", byName, "--insecure", "--token", token, "--interval", "0", "--json"); err != nil || !strings.Contains(out, `"nodes"`) {
		t.Errorf("stat --switch %s: %v, output %q", byName, err, out)
	}
	if _, err := execute(t, "pool", "ls", "--switch", "no-such-host.invalid:7471", "--insecure", "--token", token); err == nil || !strings.Contains(err.Error(), `host "no-such-host.invalid" does not resolve`) {
		t.Errorf("pool ls --switch no-such-host.invalid:7471: %v, want an error naming the host", err)
	}
	out, err := executeCanceled(t, "switch", "--listen", "localhost:0", "--insecure", "--token", token)
	if err != nil || !strings.Contains(out, "listen   127.0.0.1:") {
		t.Errorf("switch --listen localhost:0: %v, output %q", err, out)
	}
	out, err = executeCanceled(t, "memd", "--listen", "localhost:0", "--size", "64KiB", "--switch", byName, "--insecure", "--token", token)
	if err != nil || !strings.Contains(out, "listen   127.0.0.1:") {
		t.Errorf("memd --listen localhost:0 --switch %s: %v, output %q", byName, err, out)
	}
}
