package frontend

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tool is the path of a client program, or skips the test saying which
// package brings it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian package %s)", name, pkg)
	}
	return p
}

// run runs a client program for at most a minute and returns its
// output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRealRedisClients drives the Redis front end with redis-cli and
// redis-benchmark: every answer as Redis gives it, no error replies.
func TestRealRedisClients(t *testing.T) {
	cli := tool(t, "redis-cli", "redis-tools")
	bench := tool(t, "redis-benchmark", "redis-tools")
	addr, s := serve(t, Redis, Config{Store: newMemStore(1 << 20)})
	host, port, _ := strings.Cut(addr, ":")
	rc := func(args ...string) string {
		return strings.TrimSpace(run(t, cli, append([]string{"-h", host, "-p", port}, args...)...))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k", "v", "EX", "100"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"TTL", "k"}, "100"},
		{[]string{"INCRBY", "n", "5"}, "5"},
		{[]string{"MSET", "a", "1", "b", "2"}, "OK"},
		{[]string{"MGET", "a", "b", "nope"}, "1\n2\n"},
		{[]string{"DEL", "a", "b"}, "2"},
		{[]string{"EXISTS", "a"}, "0"},
		{[]string{"-3", "GET", "k"}, "v"},
		{[]string{"LPUSH", "l", "x"}, "ERR unknown command 'LPUSH', with args beginning with: 'l' 'x'"},
	} {
		if got := rc(c.args...); got != strings.TrimSpace(c.want) {
			t.Errorf("redis-cli %v: %q, want %q", c.args, got, c.want)
		}
	}
	before := s.Stats().Errors
	// redis-benchmark has no MGET test (redis-cli's above is one).
	out := run(t, bench, "-h", host, "-p", port, "-t", "ping,get,set,incr,mset", "-n", "2000", "-c", "4", "-q")
	for _, test := range []string{"PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET"} {
		if !strings.Contains(out, test) {
			t.Errorf("redis-benchmark ran no %s test:\n%s", test, out)
		}
	}
	if st := s.Stats(); st.Errors != before || strings.Contains(strings.ToLower(out), "error") {
		t.Fatalf("redis-benchmark: %d error replies:\n%s", st.Errors-before, out)
	}
}

// TestRealMemcachedClients drives the memcached front end with
// libmemcached's tools: memcslap's set, get and mget runs, memcstat,
// memccp / memccat, memctouch, memcexist and memcrm.
func TestRealMemcachedClients(t *testing.T) {
	slap := tool(t, "memcslap", "libmemcached-tools")
	addr, s := serve(t, Memcached, Config{Store: newMemStore(1 << 20)})
	srv := "--servers=" + addr
	for _, test := range []string{"set", "get", "mget"} {
		run(t, slap, srv, "--test="+test, "--execute-number=500", "--concurrency=2")
	}
	// memaslap (memcaslap in Debian): 2000 gets and sets, values
	// checked (--verify).
	out := run(t, tool(t, "memcaslap", "libmemcached-tools"), "-s", addr, "-T", "1", "-c", "4", "-x", "2000", "-v", "1")
	if !strings.Contains(out, "Run time") || !strings.Contains(out, "verify_failed: 0\n") || !strings.Contains(out, "get_misses: 0\n") {
		t.Errorf("memaslap:\n%s", out)
	}
	if out := run(t, tool(t, "memcstat", "libmemcached-tools"), srv); !strings.Contains(out, "get_hits") {
		t.Errorf("memcstat:\n%s", out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "greeting"), []byte("hello, memcached"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, tool(t, "memccp", "libmemcached-tools"), srv, filepath.Join(dir, "greeting"))
	if got := run(t, tool(t, "memccat", "libmemcached-tools"), srv, "greeting"); got != "hello, memcached\n" { // memccat ends it with a newline
		t.Errorf("memccat: %q", got)
	}
	run(t, tool(t, "memctouch", "libmemcached-tools"), srv, "--expire=100", "greeting")
	run(t, tool(t, "memcexist", "libmemcached-tools"), srv, "greeting")
	run(t, tool(t, "memcrm", "libmemcached-tools"), srv, "greeting")
	if st := s.Stats(); st.Errors != 0 || st.Hits == 0 {
		t.Fatalf("front end stats after the tools: %+v", st)
	}
}
