package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/secure"
)

// freeUDPAddr returns a loopback UDP address that was free a moment ago.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// commandArgs returns the arguments of a command fabric init printed,
// without "ndma" and the environment assignments in front of it; ok is
// false for a command that is not ndma's.
func commandArgs(line string) (args []string, ok bool) {
	if rest, found := strings.CutPrefix(line, "ndma "); found {
		return strings.Fields(rest), true
	}
	if i := strings.Index(line, " ndma "); i >= 0 {
		return strings.Fields(line[i+len(" ndma "):]), true
	}
	return nil, false
}

// TestFabricInit: fabric init writes a new directory of mode 0700 with the
// authority secret, the token (a different value) and one credential per
// process, each file 0600, of the roles and names asked for, all under
// the secret's authority; a job's ranks find their own in it
// (NDMA_CREDENTIAL=DIR); the printed commands parse as ndma command
// lines; an existing directory is kept unless --force.
func TestFabricInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fab")
	out, err := execute(t, "fabric", "init", dir, "--memory-nodes", "2", "--storage-nodes", "1", "--clients", "2",
		"--job", "train", "--ranks", "3", "--switch-addr", "10.0.0.1:7471", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res initResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json: %v: %q", err, out)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	secret, err := os.ReadFile(res.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readToken(res.Secret); err == nil {
		t.Error("the authority secret reads as a token")
	}
	token, err := readToken(res.Token)
	if err != nil || bytes.Equal(secret, token) {
		t.Fatalf("token %v: the token must be its own value, not the secret", err)
	}
	a, err := secure.ParseAuthoritySecret(secret)
	if err != nil {
		t.Fatalf("the authority secret file: %v", err)
	}
	want := map[string]string{"switch": "switch", "memory-0": "memory-node", "memory-1": "memory-node", "stor/storage-0": "member",
		"client-0": "member", "client-1": "member", "train/0": "member", "train/1": "member", "train/2": "member"}
	if len(res.Credentials) != len(want) {
		t.Fatalf("%d credentials, want %d: %+v", len(res.Credentials), len(want), res.Credentials)
	}
	for _, c := range append(res.Credentials, initCredential{File: res.Secret}, initCredential{File: res.Token}) {
		if fi, err := os.Stat(c.File); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", c.File, fi.Mode(), err)
		}
		if c.Name == "" {
			continue
		}
		id, err := readCredential(c.File)
		if err != nil || secure.RoleName(id.Cert.Role) != want[c.Name] || id.Cert.Name != c.Name || c.Role != want[c.Name] || !a.Public().Equal(id.Authority) {
			t.Errorf("%s: %+v, %v; want role %s named %q under the fabric's authority", c.File, c, err, want[c.Name], c.Name)
		}
		if err == nil && (id.Cert.NotAfter.Sub(id.Cert.NotBefore) > defaultValidity || id.Cert.ValidAt(time.Now()) != nil) {
			t.Errorf("%s: valid %v to %v, want %v from now", c.File, id.Cert.NotBefore, id.Cert.NotAfter, defaultValidity)
		}
	}
	// Each rank of the job finds its own credential in the directory.
	for r := range 3 {
		l := coll.Launch{Rank: r, Size: 3, Job: "train", Credential: dir}
		opts, err := l.EndpointOptions()
		if err != nil || opts.Security == nil || opts.Security.Cert.Name != fmt.Sprintf("train/%d", r) {
			t.Errorf("rank %d with NDMA_CREDENTIAL=%s: %v, %v", r, dir, opts.Security, err)
		}
	}
	// Every printed command parses, names the switch and seals.
	procs := map[string]bool{}
	for _, c := range res.Commands {
		procs[c.Process] = true
		args, ok := commandArgs(c.Command)
		if !ok {
			t.Errorf("%s: %q is not an ndma command", c.Process, c.Command)
			continue
		}
		cmd, rest, err := rootCmd.Find(args)
		if err != nil {
			t.Errorf("%q: %v", c.Command, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%q: %v", c.Command, err)
		}
		if !strings.Contains(c.Command, "10.0.0.1:7471") || !(strings.Contains(c.Command, "--credential") || strings.Contains(c.Command, "NDMA_CREDENTIAL=")) {
			t.Errorf("%q: no switch address or no credential", c.Command)
		}
	}
	for _, p := range []string{"switch", "memory-0", "memory-1", "storage-0", "client-0", "client-1", "ranks"} {
		if !procs[p] {
			t.Errorf("no command for %s: %+v", p, res.Commands)
		}
	}
	if _, err := execute(t, "fabric", "init", dir); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("fabric init over an existing directory: %v", err)
	}
	if b, _ := os.ReadFile(res.Secret); !bytes.Equal(b, secret) {
		t.Error("fabric init without --force changed the secret")
	}
	if _, err := execute(t, "fabric", "init", dir, "--force"); err != nil {
		t.Errorf("fabric init --force: %v", err)
	}
	if b, _ := os.ReadFile(res.Secret); bytes.Equal(b, secret) {
		t.Error("fabric init --force kept the old secret")
	}
	for _, bad := range [][]string{
		{"--ranks", "2"},
		{"--job", "a/b", "--ranks", "2"},
		{"--job", "j"},
		{"--memory-nodes", "-1"},
		{"--switch-addr", "nowhere"},
	} {
		if _, err := execute(t, append([]string{"fabric", "init", filepath.Join(t.TempDir(), "x")}, bad...)...); err == nil {
			t.Errorf("fabric init %q: no error", bad)
		}
	}
}

// TestSealedQuickStart runs the README's quick start as fabric init
// prints it: the switch and a memory node as processes of their own, with
// the printed command lines, then pool create, put and get with the
// client's, every datagram sealed. A client without a credential is
// refused before it sends anything.
func TestSealedQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv(tokenEnv, "")
	t.Setenv(credentialEnv, "")
	sw := freeUDPAddr(t)
	res := initFabric(t, filepath.Join(t.TempDir(), "fab"), sw)
	command := func(process string) []string { return res.args(t, process) }
	swd := startDaemon(t, command("switch")...)
	mem := startDaemon(t, command("memory-0")...)
	client := command("client-0") // ndma pool create --size 1MiB --switch ... --token-file ... --credential ...
	flags := client[4:]           // --switch ADDR --token-file FILE --credential FILE
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := execute(t, append([]string{"pool", "stat", "--json", "--timeout", "2s"}, flags...)...)
		if err == nil && strings.Count(out, `"Alive":true`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the memory node did not join: %v %q\nswitch:\n%s\nmemd:\n%s", err, out, swd.logs(), mem.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The memory node is shown with its credential's name.
	for _, args := range [][]string{{"pool", "stat"}, {"stat", "--interval", "0"}} {
		if out, err := execute(t, append(args, flags...)...); err != nil || !strings.Contains(out, "NAME") || !strings.Contains(out, " memory-0 ") {
			t.Errorf("%v: the memory node's credential name is not shown: %v\n%s", args, err, out)
		}
	}
	stdout, stderr, err := executeBoth(t, append(client, "--json")...)
	if err != nil {
		t.Fatalf("%q: %v %s", client, err, stderr)
	}
	var region struct {
		Region uint32 `json:"region"`
		Key    string `json:"key"`
	}
	if err := json.Unmarshal([]byte(stdout), &region); err != nil || region.Key == "" {
		t.Fatalf("pool create: %v: %q", err, stdout)
	}
	data := bytes.Repeat([]byte("sealed quick start "), 1000)
	in, back := filepath.Join(t.TempDir(), "in"), filepath.Join(t.TempDir(), "back")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(region.Region)
	if _, err := execute(t, append([]string{"pool", "put", in, "--region", id, "--key", region.Key}, flags...)...); err != nil {
		t.Fatalf("pool put: %v", err)
	}
	if _, err := execute(t, append([]string{"pool", "get", id, "--key", region.Key, "--length", fmt.Sprint(len(data)), "-o", back}, flags...)...); err != nil {
		t.Fatalf("pool get: %v", err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("pool get returned other bytes (%v)", err)
	}
	for _, d := range []*daemon{swd, mem} {
		if !strings.Contains(d.logs(), "sealing every datagram") || strings.Contains(d.logs(), "insecure") {
			t.Errorf("a daemon of the quick start does not say it seals:\n%s", d.logs())
		}
	}
	// The same client without its credential is refused at once.
	if _, err := execute(t, "pool", "ls", "--switch", sw, "--token-file", res.Token); err == nil || !strings.Contains(err.Error(), "no credential") {
		t.Errorf("pool ls without a credential: %v", err)
	}
}

// TestSealedStorageQuickStart: a fabric init with a storage node, started
// as the printed commands say (the storage node before the switch: it
// waits for it), serves a volume the client creates and lists, and the
// storage node says it seals.
func TestSealedStorageQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv(tokenEnv, "")
	t.Setenv(credentialEnv, "")
	sw := freeUDPAddr(t)
	res := initFabric(t, filepath.Join(t.TempDir(), "fab"), sw, "--memory-nodes", "0", "--storage-nodes", "1")
	node, _ := startProcess(t, res.args(t, "storage-0")...)
	time.Sleep(1500 * time.Millisecond) // the node waits for the switch
	swd := startDaemon(t, res.args(t, "switch")...)
	client := res.args(t, "client-0") // ndma vol create vol0 ... --switch ADDR --token-file FILE --credential FILE
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := execute(t, client...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: %v\nswitch:\n%s\nstord:\n%s", client, err, swd.logs(), node.logs())
		}
	}
	out, err := execute(t, append([]string{"vol", "ls"}, client[len(client)-6:]...)...)
	if err != nil || !strings.Contains(out, "vol0") {
		t.Fatalf("vol ls: %v %q", err, out)
	}
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 2 || f[1] != "client-0" {
		t.Errorf("vol ls: %q, want vol0 owned by the client's scope client-0", out)
	}
	if logs := node.logs(); !strings.Contains(logs, `stord: sealing every datagram (role member, name \"stor/storage-0\")`) {
		t.Errorf("the storage node does not say it seals:\n%s", logs)
	}
}

// sniffRelay relays UDP datagrams between one client and target,
// recording every byte both ways, as a sniffer on the path sees them. It
// returns the address clients use instead of target, and what it saw so
// far.
func sniffRelay(t *testing.T, target string) (addr string, seen func() []byte) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := net.ResolveUDPAddr("udp4", target)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var all []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		var client *net.UDPAddr
		buf := make([]byte, 1<<16)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, buf[:n]...)
			mu.Unlock()
			switch {
			case from.String() == dst.String() && client != nil:
				conn.WriteToUDP(buf[:n], client)
			case from.String() != dst.String():
				client = from
				conn.WriteToUDP(buf[:n], dst)
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return conn.LocalAddr().String(), func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(all)
	}
}

// keyBytes returns the forms a region key printed as 0x... takes on the
// wire: its 8 bytes in either order.
func keyBytes(t *testing.T, key string) [][]byte {
	t.Helper()
	k, err := strconv.ParseUint(strings.TrimPrefix(key, "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{binary.BigEndian.AppendUint64(nil, k), binary.LittleEndian.AppendUint64(nil, k)}
}

// TestSnifferSeesNoKey: in the default configuration (credentials from
// fabric init) a sniffer between a client and the switch sees no region
// key in pool create's exchange; the same exchange with --insecure shows
// it (so the sniffer would see one).
func TestSnifferSeesNoKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv(tokenEnv, "")
	t.Setenv(credentialEnv, "")
	dir := filepath.Join(t.TempDir(), "fab")
	res := initFabric(t, dir, freeUDPAddr(t))
	swd := startDaemon(t, res.args(t, "switch")...)
	startDaemon(t, res.args(t, "memory-0")...)
	flags := res.args(t, "client-0")[4:] // --switch ADDR --token-file FILE --credential FILE
	waitAlive(t, swd.addr, 1, flags[2:]...)
	relay, seen := sniffRelay(t, swd.addr)
	out, err := execute(t, append([]string{"pool", "create", "--size", "64KiB", "--json", "--switch", relay}, flags[2:]...)...)
	if err != nil {
		t.Fatalf("pool create through the relay: %v", err)
	}
	sealedKey := regionKey(t, out)
	for _, k := range keyBytes(t, sealedKey) {
		if bytes.Contains(seen(), k) {
			t.Fatalf("the sniffer saw the region key %s in %d bytes of sealed traffic", sealedKey, len(seen()))
		}
	}
	if len(seen()) == 0 {
		t.Fatal("the sniffer saw nothing")
	}

	// Unsealed, the same exchange shows the key.
	addr, _, _ := startPlainPool(t)
	relay, seen = sniffRelay(t, addr)
	out, err = execute(t, "pool", "create", "--size", "64KiB", "--json", "--switch", relay, "--insecure", "--token", string(testToken))
	if err != nil {
		t.Fatalf("pool create --insecure through the relay: %v", err)
	}
	plainKey := regionKey(t, out)
	found := false
	for _, k := range keyBytes(t, plainKey) {
		found = found || bytes.Contains(seen(), k)
	}
	if !found {
		t.Fatalf("the sniffer did not see the key %s of an unsealed exchange: it cannot tell", plainKey)
	}
}

// regionKey returns the key in pool create --json's output.
func regionKey(t *testing.T, out string) string {
	t.Helper()
	var region struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(out), &region); err != nil || region.Key == "" {
		t.Fatalf("pool create: %v: %q", err, out)
	}
	return region.Key
}

// initFabric runs fabric init DIR with the switch at addr and returns
// what it wrote.
func initFabric(t *testing.T, dir, addr string, more ...string) *initResult {
	t.Helper()
	out, err := execute(t, append([]string{"fabric", "init", dir, "--switch-addr", addr, "--json"}, more...)...)
	if err != nil {
		t.Fatal(err)
	}
	var res initResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// args returns the arguments (without "ndma") of the command fabric init
// printed for process.
func (res *initResult) args(t *testing.T, process string) []string {
	t.Helper()
	for _, c := range res.Commands {
		if c.Process == process {
			args, ok := commandArgs(c.Command)
			if !ok {
				t.Fatalf("%q", c.Command)
			}
			return args
		}
	}
	t.Fatalf("no command for %s", process)
	return nil
}
