package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// startSwitch starts a switch with cfg on the UDP address addr over
// loopback, stopped when the test ends.
func startSwitch(t *testing.T, addr string, cfg fabric.Config) *fabric.Server {
	t.Helper()
	conn, err := netio.ListenUDP(addr, netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestSwitchRestartFromEtcd kills a switch that keeps its pool map in
// etcd (no clean stop: its store is not closed) and starts another on
// the same address with a new store on the same etcd: the new switch
// loads the region, with its key, from etcd; the memory nodes' reports
// settle its copies; a client with the old key reads its data back and
// writes, a forged key is refused, and freeing the region deletes its
// record.
func TestSwitchRestartFromEtcd(t *testing.T) {
	te := startEtcd(t)
	token := []byte("etcd-restart")
	st := open(t, te, Config{Name: "switch"})
	cfg := fabric.Config{Token: token, HeartbeatTimeout: 200 * time.Millisecond, PoolRecoverWindow: time.Second, Store: st}
	srv := startSwitch(t, "127.0.0.1:0", cfg)
	addr := srv.Addr()
	opts := endpoint.FabricOptions{Token: token, Heartbeat: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		nd, nodeKey := memtest.Node(t, addr, token, 1<<20)
		lctx, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		if _, err := nd.Lend(lctx, addr, nodeKey, 1<<20, opts); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{OpTimeout: 20 * time.Second}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	cli, err := pool.New(ep, addr.String(), pool.Options{Fabric: opts})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Alloc(ctx, 256<<10, pool.AllocOptions{Stripe: 16 << 10, Replicas: 2, Perm: wire.PermRead | wire.PermWrite})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, r.Size())
	for i := range want {
		want[i] = byte(i*13 + i>>8)
	}
	if _, err := r.WriteAtContext(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the region's record", func() bool { s := st.Stats(); return s.Written >= 1 && s.Backlog == 0 })

	srv.Close()
	st.crash()
	st2 := open(t, te, Config{Name: "switch"})
	defer st2.Close()
	if recs := st2.Regions(); len(recs) != 1 || recs[0].Region != r.ID() || recs[0].Key != r.Key() {
		t.Fatalf("regions in etcd: %+v; want region %d with its key", recs, r.ID())
	}
	cfg.Store = st2
	srv2 := startSwitch(t, addr.String(), cfg)

	got := make([]byte, len(want))
	if _, err := r.ReadAtContext(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the restart: %v, bytes equal %v", err, bytes.Equal(got, want))
	}
	if s := srv2.Stats(); s.PoolRegionsLoaded != 1 || s.PoolRegionsRecovered != 0 {
		t.Errorf("restarted switch: %d regions loaded, %d rebuilt from reports alone; want 1, 0", s.PoolRegionsLoaded, s.PoolRegionsRecovered)
	}
	if _, err := ep.PoolOpen(ctx, addr.String(), r.ID(), r.Key()^1<<40, opts); !errors.Is(err, wire.StatusBadKey) {
		t.Errorf("open with a forged key after the restart: %v, want %v", err, wire.StatusBadKey)
	}
	if _, err := r.WriteAtContext(ctx, want[:4096], 8192); err != nil {
		t.Fatalf("write after the restart: %v", err)
	}
	if err := cli.Free(ctx, r); err != nil {
		t.Fatal(err)
	}
	cl := client(t, te)
	waitFor(t, 5*time.Second, "the freed region's record to go", func() bool { return get(t, cl, st2.regionKey(r.ID())) == "" })
}
