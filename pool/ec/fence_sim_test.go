package ec_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/pool/ec"
)

// TestSimFencedVolume takes a coded volume's fence through three holders.
// The older holder's chained writes are refused at the switch after the
// newer one's raise, at every row, and change neither data nor parity;
// a chain the switch forwarded before the raise and the links held past
// it is refused by the memory nodes. A raise with a parity shard's node
// dead succeeds, reporting the shard lost; the shard, rebuilt, starts
// with the switch's fences: the holder's fenced writes reach it, the
// earlier holder's do not.
func TestSimFencedVolume(t *testing.T) {
	const seed, shard, rows = 91, 4096, 4
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		f := ecFabric(t, seed)
		defer f.Close()
		ctx := f.Ctx()
		v, err := ec.Create(ctx, f.PoolClient(f.Endpoint()), k, m, shard, rows*k*shard)
		if err != nil {
			t.Fatal(err)
		}
		model := make([]byte, v.Size())
		fill := func(b byte) []byte { return bytes.Repeat([]byte{b}, int(v.Size())) }
		raise := func(w *ec.Volume, token uint64) {
			t.Helper()
			if got, err := w.RaiseFence(ctx, pool.Fence{ID: 3, Token: token}); err != nil || got != token {
				t.Fatalf("raise to %d: %d, %v", token, got, err)
			}
		}
		first := v.Fenced(pool.Fence{ID: 3, Token: 5})
		if err := first.WriteAt(ctx, fill(1), 0); !errors.Is(err, pool.ErrFenced) {
			t.Fatalf("fenced write before any raise: %v", err)
		}
		raise(first, 5)
		if err := first.WriteAt(ctx, fill(1), 0); err != nil {
			t.Fatalf("write while holding the fence: %v", err)
		}
		copy(model, fill(1))

		// The link from the switch to the first parity shard's node
		// holds the first holder's next chain, forwarded there before
		// the second holder's raise, past it: only that memory node can
		// refuse it.
		heldEP := f.Endpoint()
		heldVol, err := ec.Open(openRegion(t, f, heldEP, v), k, m)
		if err != nil {
			t.Fatal(err)
		}
		held := heldVol.Fenced(pool.Fence{ID: 3, Token: 5})
		parity := columnNode(t, f, v, k)
		slow := f.Link
		slow.Latency = 3 * time.Second
		f.Net.Locked(func() { f.Net.SetLink(parity.Addr, f.Link, slow) })
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		stale := make(chan error, 1)
		go func() { stale <- held.WriteAt(wctx, fill(0xee), 0) }()
		time.Sleep(10 * time.Millisecond) // its first hop done, the second on the slow link
		f.SetLoss(heldEP.LocalAddr(), 1)  // its resends go nowhere
		f.Net.Locked(func() { f.Net.SetLink(parity.Addr, f.Link, f.Link) })
		refusedBefore := parity.Node.Stats().Server.Pool.Refused
		second := v.Fenced(pool.Fence{ID: 3, Token: 9})
		raise(second, 9)
		if err := second.WriteAt(ctx, fill(2), 0); err != nil {
			t.Fatalf("newer holder's write: %v", err)
		}
		copy(model, fill(2))
		if err := <-stale; err == nil {
			t.Fatal("the held write was acknowledged")
		}
		time.Sleep(3 * time.Second) // the held hop reaches its node
		if parity.Node.Stats().Server.Pool.Refused == refusedBefore {
			t.Fatal("the parity shard's node refused nothing")
		}
		checkParity(t, v, shard, model)
		fencedBefore := f.Srv.Stats().PoolFenced
		for r := range rows {
			if err := first.WriteAt(ctx, []byte("late"), int64(r*k*shard+shard+9)); !errors.Is(err, pool.ErrFenced) {
				t.Fatalf("older holder's write in row %d: %v", r, err)
			}
		}
		if n := f.Srv.Stats().PoolFenced - fencedBefore; n < rows {
			t.Fatalf("the switch refused %d of the older holder's %d chains", n, rows)
		}
		if got, err := first.RaiseFence(ctx, pool.Fence{ID: 3, Token: 5}); !errors.Is(err, pool.ErrFenced) || got != 9 {
			t.Fatalf("older holder's raise: %d, %v", got, err)
		}
		checkParity(t, v, shard, model)

		// A parity shard's node dies: the next raise reports it lost and
		// holds; writes go around it; rebuilt, it takes the fences.
		node := columnNode(t, f, v, k+1)
		f.CrashMem(node)
		time.Sleep(10 * time.Second) // the switch declares it dead
		third := v.Fenced(pool.Fence{ID: 3, Token: 13})
		raise(third, 13)
		if l, _, err := v.Lost(ctx); err != nil || len(l) != 1 || l[0] != k+1 {
			t.Fatalf("after the raise: lost %v, %v; want shard %d", l, err, k+1)
		}
		if err := third.WriteAt(ctx, fill(3), 0); !errors.Is(err, pool.ErrDegraded) {
			t.Fatalf("write around the dead shard: %v", err)
		}
		copy(model, fill(3))
		if err := f.StartMem(node, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := v.Rebuild(ctx, k+1); err != nil {
			t.Fatalf("rebuild: %v", err)
		}
		if err := third.WriteAt(ctx, fill(4), 0); err != nil {
			t.Fatalf("write after the rebuild: %v", err)
		}
		copy(model, fill(4))
		if err := second.WriteAt(ctx, []byte("late"), int64(shard*(k+1)/2)); !errors.Is(err, pool.ErrFenced) {
			t.Fatalf("earlier holder's write after the rebuild: %v", err)
		}
		checkParity(t, v, shard, model)
	})
}

// openRegion opens v's region from endpoint ep's own pool client.
func openRegion(t *testing.T, f *simpool.Fabric, ep *endpoint.Endpoint, v *ec.Volume) *pool.Region {
	t.Helper()
	r, err := f.PoolClient(ep).Open(f.Ctx(), v.Region().ID(), v.Region().Key())
	if err != nil {
		t.Fatal(err)
	}
	return r
}
