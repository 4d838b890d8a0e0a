package node_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// lendingNode starts a memory node on listen that lends a region of
// size bytes to the switch sw until the returned function stops it
// (without telling the switch, as a crash would).
func lendingNode(t *testing.T, listen string, sw netip.AddrPort, opts ctrlclient.Options, size int) (*node.Node, uint64, func()) {
	t.Helper()
	n, key := memtest.NodeAt(t, listen, sw, opts.Token, size)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := n.Lend(ctx, sw, key, uint64(size), opts); err != nil {
		cancel()
		n.Close()
		t.Fatal(err)
	}
	stop := func() { cancel(); n.Close() }
	t.Cleanup(cancel)
	return n, key, stop
}

// TestRebuildAfterRestart: a memory node that restarts at the same
// address (a new incarnation, its memory empty) rebuilds its copy of a
// replicated region by reading the other copy through the switch, and
// once the other node is gone the region reads back whole from the
// rebuilt copy.
func TestRebuildAfterRestart(t *testing.T) {
	token := []byte("node-rebuild")
	opts := ctrlclient.Options{Token: token, Heartbeat: 50 * time.Millisecond}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fsrv := fabric.NewServer(conn, sw, nil)
	defer fsrv.Close()
	swAddr := fsrv.Addr()
	a, _, stopA := lendingNode(t, "127.0.0.1:0", swAddr, opts, 1<<20)
	b, bKey, stopB := lendingNode(t, "127.0.0.1:0", swAddr, opts, 1<<20)

	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	cli, err := pool.New(ep, swAddr.String(), pool.Options{Fabric: opts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Alloc(ctx, 256<<10, pool.AllocOptions{Stripe: 16 << 10, Replicas: 2, Perm: wire.PermRead | wire.PermWrite})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, r.Size())
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if _, err := r.WriteAtContext(ctx, want, 0); err != nil {
		t.Fatal(err)
	}

	addrA := a.LocalAddr()
	stopA()
	a2, _, _ := lendingNode(t, addrA.String(), swAddr, opts, 1<<20)
	for {
		st := a2.Stats().Server.Pool
		if st.RebuildsFailed != 0 {
			t.Fatalf("rebuild failed: %+v", st)
		}
		// Done once the switch took the node's report too: until then
		// the rebuilt copy is not read.
		if st.Rebuilt > 0 && fsrv.Stats().PoolRebuilt > 0 {
			if st.RebuildBytes != uint64(r.Size()) {
				t.Errorf("rebuilt %d bytes, want the region's %d", st.RebuildBytes, r.Size())
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no rebuild: node %+v, switch %+v", st, fsrv.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.Leave(ctx, swAddr, bKey, opts); err != nil {
		t.Fatal(err)
	}
	stopB()
	got := make([]byte, len(want))
	if _, err := r.ReadAtContext(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("region from the rebuilt copy alone: err %v, equal %v", err, bytes.Equal(got, want))
	}
}

// TestCallTimesOut: a control request nobody answers fails with
// ErrTimeout at its deadline, and Cancel ends one at once; both report
// through Done.
func TestCallTimesOut(t *testing.T) {
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := node.NewCore(node.Config{Store: st, OpTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(100, 0)
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	var done []*node.Call
	mark := func(call *node.Call) { done = append(done, call) }
	silent := &node.Call{Peer: sw, Msg: []byte("req"), Done: mark}
	canceled := &node.Call{Peer: sw, Msg: []byte("req"), Done: mark, Timeout: time.Hour}
	for _, call := range []*node.Call{silent, canceled} {
		if err := c.Post(now, call); err != nil {
			t.Fatal(err)
		}
	}
	if out, _ := c.Poll(now, nil); len(out) == 0 {
		t.Fatal("the requests were not sent")
	}
	c.Cancel(canceled)
	if len(done) != 1 || !errors.Is(canceled.Err, node.ErrCanceled) {
		t.Fatalf("after Cancel: %d done, err %v", len(done), canceled.Err)
	}
	c.Poll(now.Add(time.Second-time.Millisecond), nil)
	if len(done) != 1 {
		t.Fatalf("%d done before the deadline", len(done))
	}
	c.Poll(now.Add(time.Second), nil)
	if len(done) != 2 || !errors.Is(silent.Err, node.ErrTimeout) {
		t.Fatalf("at the deadline: %d done, err %v", len(done), silent.Err)
	}
	c.Cancel(silent) // completed already: nothing happens
	if len(done) != 2 {
		t.Fatal("Cancel of a completed call reported it again")
	}
}
