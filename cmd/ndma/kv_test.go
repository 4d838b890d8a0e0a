package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/secure"
)

// TestKvCommands runs a key space as deployed on a sealed fabric: kv
// create writes the space file, ndma kvd (a process, with a member
// credential) owns it, kv set/get/del work on it from the command line,
// and kv serve answers memcached and Redis clients; a kvd without a
// credential refuses to start.
func TestKvCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	addr, _, _, a := startPoolAuthority(t, 1, 4<<20)
	dir := t.TempDir()
	space := filepath.Join(dir, "cache.space")
	out, err := execute(t, "kv", "create", "--switch", addr, "--space", "cache", "--shards", "2", "--buckets", "8", "--max-buckets", "64",
		"--page", "4KiB", "--heap", "64KiB", "--stripe", "4KiB", "--out", space, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Region   uint32 `json:"region"`
		MaxValue int    `json:"max_value"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.Region == 0 || created.MaxValue != 4096-32-1 {
		t.Fatalf("create: %v %q", err, out)
	}
	if strings.Contains(out, "0x") {
		t.Fatalf("create printed the region key: %q", out)
	}
	if _, err := execute(t, "kv", "create", "--switch", addr, "--space", "cache", "--out", space); err == nil {
		t.Fatal("create overwrote a space file")
	}
	// $NDMA_CREDENTIAL is the commands' client credential: not an owner's.
	if _, err := execute(t, "kvd", "--switch", addr, "--space-file", space); err == nil || !strings.Contains(err.Error(), "needs one of role member") {
		t.Fatalf("kvd with a client credential: %v", err)
	}
	cred := os.Getenv(credentialEnv)
	os.Unsetenv(credentialEnv)
	_, err = execute(t, "kvd", "--switch", addr, "--space-file", space)
	os.Setenv(credentialEnv, cred)
	if !errors.Is(err, errNoCredential) {
		t.Fatalf("kvd without a credential: %v", err)
	}
	member := filepath.Join(dir, "kv-0.cred")
	b, err := issueIdentity(t, a, secure.RoleMember, "kv-cache/0").Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(member, b, 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, "kvd", "--listen", "127.0.0.1:0", "--switch", addr, "--space-file", space, "--rank", "0", "--credential", member, "--clients", "client-0")
	kvc := func(args ...string) (string, error) {
		return execute(t, append([]string{"kv", args[0], "--switch", addr, "--space", "cache"}, args[1:]...)...)
	}
	if out, err := kvc("set", "greeting", "hello", "--ttl", "1h", "--flags", "7"); err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("set: %q %v", out, err)
	}
	if out, err := kvc("get", "greeting"); err != nil || out != "hello" {
		t.Fatalf("get: %q %v", out, err)
	}
	// A credential of a scope kvd was not given is refused.
	intruder := filepath.Join(dir, "intruder.cred")
	if b, err = issueIdentity(t, a, secure.RoleClient, "intruder").Encode(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(intruder, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kvc("get", "greeting", "--credential", intruder); !errors.Is(err, kv.ErrDenied) {
		t.Fatalf("get with a credential of another scope: %q %v, want kv.ErrDenied", out, err)
	}
	out, err = kvc("get", "greeting", "--json")
	var got struct {
		Value   string `json:"value"`
		Flags   uint32 `json:"flags"`
		Expires string `json:"expires"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Value != "hello" || got.Flags != 7 || got.Expires == "" {
		t.Fatalf("get --json: %q %v", out, err)
	}
	if _, err := kvc("set", "greeting", "again", "--nx"); !errors.Is(err, kv.ErrExists) {
		t.Fatalf("set --nx of a present key: %v", err)
	}
	if _, err := kvc("del", "greeting"); err != nil {
		t.Fatal(err)
	}
	if _, err := kvc("get", "greeting"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("get after del: %v", err)
	}
	// Past the first tables' 16 buckets: they grow.
	for i := range 20 {
		if _, err := kvc("set", fmt.Sprint("key", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	out, err = kvc("stats", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var keys, growths int
	for line := range strings.Lines(out) {
		var tab struct{ Buckets, Keys, Growths int }
		if err := json.Unmarshal([]byte(line), &tab); err != nil || tab.Buckets < 8 {
			t.Fatalf("stats --json: %q: %v", line, err)
		}
		keys, growths = keys+tab.Keys, growths+tab.Growths
	}
	if keys != 20 || growths == 0 {
		t.Fatalf("stats --json: %d keys, %d growths:\n%s", keys, growths, out)
	}
	if out, err := kvc("stats"); err != nil || !strings.Contains(out, "load") || !strings.Contains(out, "all") {
		t.Fatalf("stats: %q %v", out, err)
	}
	mc := startDaemon(t, "kv", "serve", "--switch", addr, "--space", "cache", "--memcached", "127.0.0.1:0")
	rd := startDaemon(t, "kv", "serve", "--switch", addr, "--space", "cache", "--redis", "127.0.0.1:0")
	exchange(t, mc.addr, "set k 0 0 5\r\nvalue\r\n", "STORED\r\n")
	exchange(t, rd.addr, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "$5\r\nvalue\r\n")
	exchange(t, rd.addr, fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n", 5000, strings.Repeat("v", 5000)), "-ERR string exceeds maximum allowed size\r\n")
	// drop refuses while an owner serves the space; --force frees its
	// region, after which the space is gone.
	drop := func(args ...string) (string, error) {
		return execute(t, append([]string{"kv", "drop", "--switch", addr, "--space-file", space}, args...)...)
	}
	regions := func() int {
		out, err := execute(t, "pool", "stat", "--switch", addr, "--json")
		var st struct{ Regions int }
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("pool stat: %q %v", out, err)
		}
		return st.Regions
	}
	before := regions()
	if _, err := drop(); err == nil || !strings.Contains(err.Error(), "1 owner ranks serve it") {
		t.Fatalf("drop while kvd serves: %v", err)
	}
	if out, err := drop("--force", "--json"); err != nil || !strings.Contains(out, fmt.Sprintf(`"region":%d`, created.Region)) {
		t.Fatalf("drop --force: %q %v", out, err)
	}
	if _, err := drop("--force"); err == nil {
		t.Fatal("dropped a freed key space again")
	}
	if after := regions(); after != before-1 {
		t.Fatalf("%d regions after the drop, %d before", after, before)
	}
}

// exchange sends req to a TCP server at addr and expects want.
func exchange(t *testing.T, addr, req, want string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if n, err := io.ReadFull(bufio.NewReader(c), got); err != nil || string(got) != want {
		t.Fatalf("%s: %q: read %q (%v), want %q", addr, req, got[:n], err, want)
	}
}

// TestKvServeLoopbackOnly: the front end, whose clients carry no
// credential, serves on loopback unless --expose says otherwise; the
// refusal comes before anything is opened.
func TestKvServeLoopbackOnly(t *testing.T) {
	for _, c := range []struct {
		flag, addr string
		expose     bool
		ok         bool
	}{
		{"--memcached", "127.0.0.1:11211", false, true},
		{"--redis", "[::1]:6379", false, true},
		{"--redis", "localhost:6379", false, true},
		{"--memcached", "0.0.0.0:11211", false, false},
		{"--redis", ":6379", false, false},
		{"--redis", "10.1.2.3:6379", false, false},
		{"--redis", "10.1.2.3:6379", true, true},
	} {
		err := frontAddrAllowed(c.flag, c.addr, c.expose)
		if c.ok != (err == nil) {
			t.Errorf("%s %s expose %v: %v", c.flag, c.addr, c.expose, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--expose") {
			t.Errorf("%s %s: %v, want it to name --expose", c.flag, c.addr, err)
		}
	}
	if _, err := execute(t, "kv", "serve", "--switch", "127.0.0.1:1", "--space", "cache", "--redis", "0.0.0.0:6379"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("kv serve on 0.0.0.0: %v", err)
	}
}
