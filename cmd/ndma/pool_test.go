package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
)

// TestPoolCommands runs ndma pool create, ls, stat and rm against an
// in-process switch with two memory nodes lending 1 MiB each.
func TestPoolCommands(t *testing.T) {
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	defer srv.Close()
	addr := srv.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		if _, err := ep.PoolLend(ctx, addr, uint64(10+i), 1<<20, endpoint.FabricOptions{}); err != nil {
			t.Fatal(err)
		}
	}
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
	if created.Region == 0 || !strings.HasPrefix(created.Key, "0x") || created.Size != 256<<10 || created.Nodes != 2 || created.Replicas != 2 || created.Perm != "rwav" {
		t.Fatalf("created %+v", created)
	}
	out, err = execute(t, "pool", "ls", "--switch", addr)
	if err != nil || !strings.Contains(out, "256K ") || strings.Contains(out, created.Key) {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	out, err = execute(t, "pool", "stat", "--switch", addr)
	if err != nil || !strings.Contains(out, "2 nodes, 1 regions") || !strings.Contains(out, "25.0%") {
		t.Fatalf("stat: %v\n%s", err, out)
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
