package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/testbed"
)

// TestRunKVTestbed runs the key-value benchmark across a testbed of
// network namespaces: the servers (NDMA's owners on the testbed's switch
// and memory node, sealed under credentials the run issues; redis-server
// and memcached where installed) in the first host and clients in two
// more. Every row must complete operations with no error and no value of
// another key, carry the fidelity monitor's verdict and each server
// process's CPU, and NDMA's key space must be freed afterwards.
func TestRunKVTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs the store's processes on it")
	}
	prefix := fmt.Sprintf("ndmakv%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	bin := ndmaBinary(t)
	targets := []string{KVNative}
	for _, p := range []struct{ target, server string }{{KVRedis, "redis-server"}, {KVMemcached, "memcached"}} {
		if _, err := exec.LookPath(p.server); err == nil {
			targets = append(targets, p.target)
		} else {
			t.Logf("%s is not installed: the %s row is not run", p.server, p.target)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	st, err := testbed.Up(ctx, testbed.Config{Prefix: prefix, Hosts: 3, MemNodes: 1, Rate: "100mbit", MTU: 9000,
		StateDir: filepath.Join(t.TempDir(), "state"), Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := testbed.DownAt(context.Background(), filepath.Dir(st.Dir), prefix); err != nil {
			t.Error(err)
		}
	}()
	var rows []KVResult
	err = RunKV(ctx, KVConfig{Binary: bin, Testbed: st, Targets: targets, Records: 200, ValueSize: 100, Clients: 2,
		Duration: time.Second, ReadRatio: 0.5}, func(r KVResult) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(targets) {
		t.Fatalf("%d rows for %d targets", len(rows), len(targets))
	}
	for i, r := range rows {
		t.Logf("%+v", r)
		if r.Target != targets[i] || r.Ops == 0 || r.Errors != 0 || r.Wrong != 0 || r.GetP50 <= 0 || r.SetP50 <= 0 || r.ClientCPU <= 0 {
			t.Errorf("row %d: %+v", i, r)
		}
		if r.Hosts != 3 || r.ClientHosts != 2 || r.Clients != 4 || r.RateBits != 100e6 || r.Fidelity == nil || r.Fidelity.Window == nil {
			t.Errorf("row %d: testbed or verdict missing: %+v", i, r)
		}
		want := []string{"kvd0", "kvd1", "memd", "switch"}
		switch r.Target {
		case KVRedis:
			want = []string{"redis-server"}
		case KVMemcached:
			want = []string{"memcached"}
		}
		for _, p := range want {
			if _, ok := r.Processes[p]; !ok {
				t.Errorf("row %d: no CPU of %s: %v", i, p, r.Processes)
			}
		}
		if len(r.Processes) != len(want) {
			t.Errorf("row %d: CPU of %v, want %v", i, r.Processes, want)
		}
	}
	// The key space was dropped: the pool holds no region.
	out, err := exec.Command("ip", "netns", "exec", st.Hosts[0].NS, bin, "pool", "stat", "--switch", st.SwitchAddr,
		"--credential", st.ClientCredential, "--token-file", filepath.Join(st.Dir, "token"), "--json").Output()
	var ps struct{ Regions int }
	if err != nil || json.Unmarshal(out, &ps) != nil || ps.Regions != 0 {
		t.Errorf("pool stat after the run: %q %v (want 0 regions)", out, err)
	}
	for _, pat := range []string{"kv-agent", "kvd --space-file", "redis-server --port", "memcached -p"} {
		if out, _ := exec.Command("pgrep", "-af", pat).Output(); strings.Contains(string(out), st.Dir) || strings.Contains(string(out), "10.77.") {
			t.Errorf("left running: %s", out)
		}
	}
}

// TestRunKVTestbedRefusals: a testbed too small, without memory nodes
// for NDMA's store, and the front ends are refused before anything
// starts.
func TestRunKVTestbedRefusals(t *testing.T) {
	st := &testbed.State{Prefix: "x", Hosts: make([]testbed.Node, 3)}
	for _, c := range []struct {
		cfg  KVConfig
		want string
	}{
		{KVConfig{Binary: "ndma", Testbed: st, Targets: []string{KVRedis}, ClientHosts: 3}, "3 client hosts need 4 hosts"},
		{KVConfig{Binary: "ndma", Testbed: st, Targets: []string{KVNative}}, "memory nodes"},
		{KVConfig{Binary: "ndma", Testbed: st, Targets: []string{KVResp}}, "loopback only"},
		{KVConfig{Binary: "ndma", Testbed: st, Targets: []string{KVMemc}}, "loopback only"},
	} {
		err := RunKV(t.Context(), c.cfg, func(KVResult) error { t.Fatal("a row"); return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.Targets, err, c.want)
		}
	}
}

// TestKVAgentSpec: an agent refuses a missing or malformed spec, a
// target it does not know, a go line it cannot read.
func TestKVAgentSpec(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no spec"},
		{"{not json\n", "spec"},
		{`{"target":"etcd","config":{"Binary":"x"}}` + "\n", `target "etcd"`},
		{`{"target":"redis","config":{"Binary":"x","Records":-1}}` + "\n", "records"},
	} {
		err := RunKVAgent(t.Context(), strings.NewReader(c.in), &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}
