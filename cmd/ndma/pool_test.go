package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// TestPoolCommands runs ndma pool create, ls, stat, put, get and rm
// against an in-process switch with two memory nodes (memd) lending 1 MiB
// each.
func TestPoolCommands(t *testing.T) {
	addr, _, nodes := startPool(t, 2, 1<<20)
	out, err := execute(t, "pool", "create", "--switch", addr, "--size", "256KiB", "--stripe", "4KiB", "--replicas", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Region   uint32 `json:"region"`
		Key      string `json:"key"`
		Size     uint64 `json:"size"`
		Nodes    int    `json:"nodes"`
		Replicas int    `json:"replicas"`
		Perm     string `json:"perm"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if created.Region == 0 || !strings.HasPrefix(created.Key, "0x") || created.Size != 256<<10 || created.Nodes != 2 || created.Replicas != 2 || created.Perm != "rw--" {
		t.Fatalf("created %+v", created)
	}
	out, err = execute(t, "pool", "ls", "--switch", addr)
	if err != nil || !strings.Contains(out, "256K ") || strings.Contains(out, created.Key) {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	out, err = execute(t, "pool", "stat", "--switch", addr)
	if err != nil || !strings.Contains(out, "live  2 of 2 nodes, 1 regions") || !strings.Contains(out, "25.0%") {
		t.Fatalf("stat: %v\n%s", err, out)
	}
	// put and get: into the replicated region at an offset, and into a
	// new region sized to the file.
	dir := t.TempDir()
	data := make([]byte, 150<<10+3)
	for i := range data {
		data[i] = byte(i * 7)
	}
	in := filepath.Join(dir, "in.bin")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := execute(t, "pool", "put", in, "--switch", addr, "--region", "1", "--key", created.Key, "--offset", "100"); err != nil || !strings.Contains(out, "Mbit/s") {
		t.Fatalf("put: %v %q", err, out)
	}
	back := filepath.Join(dir, "back.bin")
	if _, err := execute(t, "pool", "get", "1", "--switch", addr, "--key", created.Key, "--offset", "100", "--length", strconv.Itoa(len(data)), "-o", back); err != nil {
		t.Fatalf("get: %v", err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get returned other bytes (%v)", err)
	}
	if out, err := execute(t, "pool", "get", "1", "--switch", addr, "--key", created.Key, "--offset", "100", "--length", "5"); err != nil || out != string(data[:5]) {
		t.Fatalf("get to stdout: %v %q", err, out)
	}
	// Wrong input is named with what would do.
	if _, err := execute(t, "pool", "get", "1", "--switch", addr, "--key", "zz"); err == nil || !strings.Contains(err.Error(), `--key "zz": want the region's key, a non-zero hexadecimal number`) {
		t.Errorf("get --key zz: %v", err)
	}
	if _, err := execute(t, "pool", "get", "1", "--switch", addr, "--key", created.Key, "--offset", "256KiB", "--length", "10"); err == nil || !strings.Contains(err.Error(), "--length 10: region 1 holds 262144 bytes, 0 of them from --offset 262144") {
		t.Errorf("get --offset at the end --length 10: %v", err)
	}
	out, err = execute(t, "pool", "put", in, "--switch", addr, "--json")
	var put struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
		Bytes  int    `json:"bytes"`
	}
	// With --json, put prints the new region's line (as create does)
	// before it moves data, then the transfer's.
	var announced struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
		Size   uint64 `json:"size"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &announced) != nil || json.Unmarshal([]byte(lines[1]), &put) != nil ||
		put.Region == 0 || put.Key == "" || put.Bytes != len(data) || announced.Region != put.Region || announced.Key != put.Key || announced.Size != uint64(len(data)) {
		t.Fatalf("put into a new region: %v %q", err, out)
	}
	if _, err := execute(t, "pool", "get", strconv.Itoa(int(put.Region)), "--switch", addr, "--key", put.Key, "-o", back); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("new region read back other bytes")
	}
	if _, err := execute(t, "pool", "put", in, "--switch", addr, "--region", "1", "--key", created.Key, "--offset", "200KiB"); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Fatalf("put past the end: %v", err)
	}
	if _, err := execute(t, "pool", "get", "1", "--switch", addr, "--key", "0x1234"); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("get with a wrong key: %v", err)
	}
	if _, err := execute(t, "pool", "put", filepath.Join(dir, "missing"), "--switch", addr); err == nil {
		t.Fatal("put of a missing file: no error")
	}
	// ndma stat: two nodes, the regions' memory spread evenly, the
	// requests put and get made, and the refused get with a wrong key.
	out, err = execute(t, "stat", "--switch", addr, "--interval", "50ms", "--json")
	var st struct {
		Nodes []struct {
			Alive    bool   `json:"alive"`
			Used     uint64 `json:"used"`
			Requests uint64 `json:"requests_total"`
		} `json:"nodes"`
		Alive   int     `json:"alive"`
		Regions int     `json:"regions"`
		Balance float64 `json:"balance"`
		Refused uint64  `json:"refused_total"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("stat: %v %q", err, out)
	}
	if len(st.Nodes) != 2 || st.Alive != 2 || st.Regions != 2 || st.Balance < 1 || st.Balance > 1.1 {
		t.Fatalf("stat: %+v", st)
	}
	for _, n := range st.Nodes {
		if !n.Alive || n.Used == 0 || n.Requests == 0 {
			t.Errorf("stat node %+v: want alive, used and requested", n)
		}
	}
	if out, err := execute(t, "stat", "--switch", addr, "--interval", "0"); err != nil || !strings.Contains(out, "2 memory nodes (2 alive), 2 regions") || !strings.Contains(out, "REQUESTS") {
		t.Fatalf("stat table: %v\n%s", err, out)
	}
	if _, err := execute(t, "stat", "--switch", addr, "--interval", "-1s"); err == nil {
		t.Fatal("stat --interval -1s: no error")
	}
	// A memory node stops: a put into the replicated region still
	// succeeds (degraded, with a warning on stderr).
	nodes[1].Close()
	waitAlive(t, addr, 1)
	if out, err := execute(t, "pool", "put", in, "--switch", addr, "--region", "1", "--key", created.Key); err != nil || !strings.Contains(out, "Mbit/s") {
		t.Fatalf("degraded put: %v %q", err, out)
	}
	if out, err := execute(t, "pool", "ls", "--switch", addr); err != nil || !strings.Contains(out, "degraded") {
		t.Fatalf("ls after a degraded write: %v\n%s", err, out)
	}
	if _, err := execute(t, "pool", "rm", "1", "--switch", addr, "--key", "0x1"); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("rm with a wrong key: %v", err)
	}
	if out, err := execute(t, "pool", "rm", "1", "--switch", addr, "--key", created.Key); err != nil || !strings.Contains(out, "freed") {
		t.Fatalf("rm: %v %q", err, out)
	}
	for _, bad := range [][]string{
		{"pool", "create", "--switch", addr},                                      // no --size
		{"pool", "create", "--switch", addr, "--size", "1MiB", "--stripe", "100"}, // not a multiple of 8
		{"pool", "create", "--switch", addr, "--size", "1MiB", "--replicas", "3"}, // 3 copies
		{"pool", "create", "--switch", addr, "--size", "64MiB"},                   // no room
		{"pool", "ls", "--switch", ""},                                            // no switch
		{"pool", "rm", "x", "--switch", addr, "--key", "1"},                       // bad id
		{"pool", "ls", "--switch", "127.0.0.1:1", "--timeout", "200ms"},           // nobody there
	} {
		start := time.Now()
		if _, err := execute(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		} else if time.Since(start) > 3*time.Second {
			t.Errorf("%v: took %v", bad, time.Since(start))
		}
	}
}

// startPool starts an in-process sealed fabric, a switch and n memory
// nodes (memd) lending size bytes each, each with its credential, waits
// until the nodes have joined the pool, and returns the switch's address,
// its server and the nodes; the test's end closes them. The commands the
// test runs get a client credential of the same fabric in
// $NDMA_CREDENTIAL.
func startPool(t *testing.T, n int, size int64) (string, *fabric.Server, []*memd.Server) {
	t.Helper()
	addr, srv, nodes, _ := startPoolAuthority(t, n, size)
	return addr, srv, nodes
}

// startPoolAuthority is startPool that also returns the fabric's
// authority, for the test to issue more credentials.
func startPoolAuthority(t *testing.T, n int, size int64) (string, *fabric.Server, []*memd.Server, *secure.Authority) {
	t.Helper()
	a, cred := testAuthority(t, secure.RoleClient)
	t.Setenv(credentialEnv, cred)
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: transport.DefaultMTU - wire.TagLen}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: issueIdentity(t, a, secure.RoleSwitch, "switch"), SecurityOptions: sealOptions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	addr := srv.Addr().String()
	var nodes []*memd.Server
	for i := range n {
		node, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: size, Perm: wire.PermAll, Switch: addr, Token: testToken,
			Security: issueIdentity(t, a, secure.RoleMemoryNode, "memory-"+strconv.Itoa(i)), SecurityOptions: sealOptions})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		nodes = append(nodes, node)
	}
	waitAlive(t, addr, n)
	return addr, srv, nodes, a
}

// startPlainPool starts an in-process fabric that does not seal, a
// switch under testToken and one memory node lending 1 MiB, and returns
// the switch's address once the node has joined.
func startPlainPool(t *testing.T) (string, *fabric.Server, *memd.Server) {
	t.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	t.Cleanup(func() { srv.Close() })
	addr := srv.Addr().String()
	node, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: 1 << 20, Perm: wire.PermAll, Switch: addr, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	waitAlive(t, addr, 1, "--insecure", "--token", string(testToken))
	return addr, srv, node
}

// testAuthority returns a new fabric authority and the file (mode 0600)
// of a credential of role it issued, for the commands a test runs.
func testAuthority(t *testing.T, role secure.Role) (*secure.Authority, string) {
	t.Helper()
	a, err := secure.NewAuthority(secure.NewToken())
	if err != nil {
		t.Fatal(err)
	}
	id := issueIdentity(t, a, role, "client-0")
	b, err := id.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "client.cred")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return a, path
}

// issueIdentity issues a credential of role and name under a.
func issueIdentity(t *testing.T, a *secure.Authority, role secure.Role, name string) *secure.Identity {
	t.Helper()
	id, err := a.Issue(role, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitAlive waits until the pool at addr counts n memory nodes alive.
func waitAlive(t *testing.T, addr string, n int, args ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if out, err := execute(t, append([]string{"pool", "stat", "--switch", addr, "--json"}, args...)...); err == nil && strings.Count(out, `"Alive":true`) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not come to %d memory nodes alive", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNDMAMTUEnv: the vol and pool commands take their datagram size from
// NDMA_MTU (as ndma testbed run sets it) unless --mtu is given: one the
// switch cannot send back is refused as such, one that is not a number is
// named, and --mtu wins over it.
func TestNDMAMTUEnv(t *testing.T) {
	addr, _, _ := startPool(t, 1, 1<<20)
	t.Setenv("NDMA_MTU", "abc")
	for _, cmd := range [][]string{{"vol", "ls"}, {"pool", "ls"}, {"pool", "stat"}} {
		if _, err := execute(t, append(cmd, "--switch", addr)...); err == nil || !strings.Contains(err.Error(), `NDMA_MTU="abc"`) {
			t.Fatalf("%v with NDMA_MTU=abc: %v", cmd, err)
		}
	}
	t.Setenv("NDMA_MTU", "65000")
	if _, err := execute(t, "vol", "ls", "--switch", addr); err == nil || !strings.Contains(err.Error(), "MTU") {
		t.Fatalf("vol ls with NDMA_MTU=65000 (above the switch's): %v", err)
	}
	// Past the MTU: the switch answers, with no storage node.
	const noNodes = "no storage node is registered"
	if _, err := execute(t, "vol", "ls", "--switch", addr, "--mtu", "1500"); err == nil || !strings.Contains(err.Error(), noNodes) {
		t.Fatalf("vol ls --mtu 1500 with NDMA_MTU=65000: %v, want %q", err, noNodes)
	}
	t.Setenv("NDMA_MTU", "1500")
	if _, err := execute(t, "vol", "ls", "--switch", addr); err == nil || !strings.Contains(err.Error(), noNodes) {
		t.Fatalf("vol ls with NDMA_MTU=1500: %v, want %q", err, noNodes)
	}
}
