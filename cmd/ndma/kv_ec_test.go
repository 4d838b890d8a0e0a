package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/secure"
)

// TestKvCodedCommands runs an erasure-coded key space from the command
// line: kv create --ec 4+2 over six memory nodes stores 1.5 times the
// key space, kvd owns it, a value set reads back, and reads back again
// with a memory node stopped; kv rebuild, with the owner running and
// once it is stopped, lists the stopped node's shard as unreachable.
func TestKvCodedCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	addr, _, nodes, a := startPoolAuthority(t, 6, 4<<20)
	dir := t.TempDir()
	space := filepath.Join(dir, "objects.space")
	for _, bad := range [][]string{{"--ec", "4"}, {"--ec", "4+2", "--replicas", "2"}, {"--ec", "4+2", "--stripe", "4KiB"}, {"--ec-shard", "4KiB"}, {"--ec", "4+2", "--heap", "20KiB"}} {
		args := append([]string{"kv", "create", "--switch", addr, "--space", "objects", "--out", space}, bad...)
		if _, err := execute(t, args...); err == nil {
			t.Fatalf("kv create %q succeeded", bad)
		}
	}
	out, err := execute(t, "kv", "create", "--switch", addr, "--space", "objects", "--shards", "2", "--buckets", "64",
		"--page", "16KiB", "--heap", "64KiB", "--ec", "4+2", "--ec-shard", "4KiB", "--out", space, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Size   uint64 `json:"size"`
		Stored uint64 `json:"stored"`
		EC     struct {
			K, M  int
			Shard uint64
		} `json:"ec"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.EC.K != 4 || created.EC.M != 2 || created.EC.Shard != 4096 ||
		created.Stored*4 != (created.Size+16383)/16384*16384*6 {
		t.Fatalf("create: %v %q", err, out)
	}
	member := filepath.Join(dir, "kv-0.cred")
	b, err := issueIdentity(t, a, secure.RoleMember, "kv-objects/0").Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(member, b, 0o600); err != nil {
		t.Fatal(err)
	}
	kvd := startDaemon(t, "kvd", "--listen", "127.0.0.1:0", "--switch", addr, "--space-file", space, "--rank", "0", "--credential", member, "--clients", "client-0")
	kvc := func(args ...string) (string, error) {
		return execute(t, append([]string{"kv", args[0], "--switch", addr, "--space", "objects"}, args[1:]...)...)
	}
	val := strings.Repeat("erasure-coded ", 900) // across shards
	if _, err := kvc("set", "obj", val); err != nil {
		t.Fatal(err)
	}
	if out, err := kvc("get", "obj"); err != nil || out != val {
		t.Fatalf("get: %d bytes, %v", len(out), err)
	}
	nodes[2].Close()
	waitAlive(t, addr, 5)
	if out, err := kvc("get", "obj"); err != nil || out != val {
		t.Fatalf("get with a memory node stopped: %d bytes, %v", len(out), err)
	}
	rebuild := func() (string, error) {
		return execute(t, "kv", "rebuild", "--switch", addr, "--space-file", space, "--json", "--timeout", "20s")
	}
	var res struct{ Rebuilt, Unreachable []int }
	check := func(what string, out string, err error) {
		t.Helper()
		res.Rebuilt, res.Unreachable = nil, nil
		if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Rebuilt) != 0 || len(res.Unreachable) != 1 {
			t.Fatalf("rebuild with a node stopped, %s: %q %v, want one shard unreachable", what, out, err)
		}
	}
	out, err = rebuild()
	check("the owner running", out, err)
	_ = kvd.cmd.Process.Signal(os.Interrupt)
	_ = kvd.cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err = rebuild()
		if !errors.Is(err, kv.ErrOwnersServing) || time.Now().After(deadline) {
			break
		}
	}
	check("the owner stopped", out, err)
}
