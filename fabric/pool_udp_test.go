package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestPoolControlUDP drives the pool's control plane over loopback: three
// memory nodes lend memory, regions are created (spread over every node,
// replicated), opened, listed and freed; a wrong key, a freed region and a
// request beyond the free memory are refused with the status a client
// sees; a node that stops offering is marked dead.
func TestPoolControlUDP(t *testing.T) {
	token := []byte("pool-test")
	srv := startSwitch(t, fabric.Config{Token: token, HeartbeatTimeout: 200 * time.Millisecond})
	sw := srv.Addr().String()
	opts := endpoint.FabricOptions{Token: token, Heartbeat: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var lends []context.CancelFunc
	for i := range 3 {
		nd, nodeKey := memtest.Node(t, srv.Addr(), token, 1<<20)
		lctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		lends = append(lends, stop)
		if _, err := nd.Lend(lctx, netip.MustParseAddrPort(sw), nodeKey, 1<<20, opts); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	cli, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	if _, _, err := cli.PoolCreate(ctx, sw, ctrl.PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Replicas: 2, Perm: 0x0f}, opts); !errors.Is(err, wire.StatusBadOperand) {
		t.Errorf("replicated region with atomics: %v, want bad operand", err)
	}
	spec, key, err := cli.PoolCreate(ctx, sw, ctrl.PoolSpec{Size: 1 << 20, Stripe: 64 << 10, Replicas: 2, Perm: 0x03}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Region == 0 || key == 0 || spec.Columns != 3 || spec.Replicas != 2 || spec.Size != 1<<20 {
		t.Fatalf("created %+v key %#x", spec, key)
	}
	got, err := cli.PoolOpen(ctx, sw, spec.Region, key, opts)
	if err != nil || got != spec {
		t.Fatalf("open: %+v, %v; want %+v", got, err, spec)
	}
	if _, err := cli.PoolOpen(ctx, sw, spec.Region, key+1, opts); !errors.Is(err, wire.StatusBadKey) {
		t.Errorf("open with a wrong key: %v", err)
	}
	if _, _, err := cli.PoolCreate(ctx, sw, ctrl.PoolSpec{Size: 8 << 20, Stripe: 64 << 10, Replicas: 1, Perm: 1}, opts); !errors.Is(err, wire.StatusBusy) {
		t.Errorf("8 MiB on 3 x 1 MiB (2 MiB of it used): %v, want busy", err)
	}
	ps, err := cli.PoolStat(ctx, sw, opts)
	if err != nil {
		t.Fatal(err)
	}
	nodes, regions := ps.Nodes, ps.Regions
	if len(nodes) != 3 || len(regions) != 1 || regions[0] != spec {
		t.Fatalf("stat: nodes %+v, regions %+v", nodes, regions)
	}
	var used uint64
	for _, n := range nodes {
		used += n.Used
		if !n.Alive || n.Capacity != 1<<20 {
			t.Errorf("node %+v", n)
		}
	}
	if used < 2<<20 { // two copies of 1 MiB
		t.Errorf("nodes hold %d bytes for a 1 MiB region with 2 copies", used)
	}
	if err := cli.PoolFree(ctx, sw, spec.Region, key, opts); err != nil {
		t.Fatal(err)
	}
	if err := cli.PoolFree(ctx, sw, spec.Region, key, opts); !errors.Is(err, wire.StatusBadKey) {
		t.Errorf("second free: %v", err)
	}

	lends[2]() // node 2 stops offering: dead after the heartbeat timeout
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps, err := cli.PoolStat(ctx, sw, opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes := ps.Nodes
		if !nodes[2].Alive && nodes[0].Alive && nodes[1].Alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2 still alive (or another dead): %+v", nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	spec2, _, err := cli.PoolCreate(ctx, sw, ctrl.PoolSpec{Size: 4096, Stripe: 64, Replicas: 1, Perm: 1}, opts)
	if err != nil || spec2.Columns != 2 {
		t.Errorf("with a dead node: %+v, %v; want 2 columns", spec2, err)
	}
}

// TestPoolSwitchRestartUDP restarts a running switch (a new process on
// the same address, as an operator would) under a pool client over
// loopback: the memory nodes report their regions, the client's region
// reads back as written, with the same id and key, and takes writes.
func TestPoolSwitchRestartUDP(t *testing.T) {
	token := []byte("pool-restart")
	cfg := fabric.Config{Token: token, HeartbeatTimeout: 200 * time.Millisecond, PoolRecoverWindow: time.Second}
	srv := startSwitch(t, cfg)
	addr := srv.Addr()
	sw := addr.String()
	opts := endpoint.FabricOptions{Token: token, Heartbeat: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		nd, nodeKey := memtest.Node(t, addr, token, 1<<20)
		lctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		if _, err := nd.Lend(lctx, netip.MustParseAddrPort(sw), nodeKey, 1<<20, opts); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{OpTimeout: 20 * time.Second}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	cli, err := pool.New(ep, sw, pool.Options{Fabric: opts})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Alloc(ctx, 256<<10, pool.AllocOptions{Stripe: 16 << 10, Replicas: 2, Perm: wire.PermRead | wire.PermWrite})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, r.Size())
	for i := range want {
		want[i] = byte(i*7 + i>>9)
	}
	if _, err := r.WriteAtContext(ctx, want, 0); err != nil {
		t.Fatal(err)
	}

	// Stop the switch and start another on the same address.
	srv.Close()
	conn, err := netio.ListenUDP(sw, netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw2, err := fabric.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := fabric.NewServer(conn, sw2, nil)
	t.Cleanup(func() { srv2.Close() })

	got := make([]byte, len(want))
	if _, err := r.ReadAtContext(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the switch restart: %v, bytes equal %v", err, bytes.Equal(got, want))
	}
	copy(want[1000:], "written after the restart")
	if _, err := r.WriteAtContext(ctx, want[1000:1100], 1000); err != nil {
		t.Fatalf("write after the switch restart: %v", err)
	}
	if _, err := r.ReadAtContext(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back after the restart: %v, bytes equal %v", err, bytes.Equal(got, want))
	}
	ps, err := ep.PoolStat(ctx, sw, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Regions) != 1 || ps.Regions[0].Region != r.ID() || ps.Regions[0].Health != ctrl.HealthOK {
		t.Fatalf("regions after the restart: %+v, want region %d, ok", ps.Regions, r.ID())
	}
	if err := cli.Free(ctx, r); err != nil {
		t.Fatalf("free after the restart: %v", err)
	}
}
