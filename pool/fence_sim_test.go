package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// TestSimFence takes a fence through two holders on a two-copy region
// over three memory nodes: a fenced write before any raise is refused;
// after the newer holder's raise the older one's writes and raise are
// refused at every stripe and change nothing; then a memory node
// restarts empty (its copies are rebuilt with the switch's fences) and
// the switch restarts (it learns the fences back from the nodes'
// reports), and the older holder stays fenced out while the newer one
// writes on.
func TestSimFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := simpool.Start(t, simpool.Config{Seed: 7, Token: []byte("fence test"), Nodes: 3})
		defer f.Close()
		ctx := f.Ctx()
		c := f.PoolClient(f.Endpoint())
		r, err := c.Alloc(ctx, 6*4096, pool.AllocOptions{Stripe: 4096, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		old := r.Fenced(pool.Fence{ID: 2, Token: 5})
		cur := r.Fenced(pool.Fence{ID: 2, Token: 9})
		fill := func(b byte) []byte { return bytes.Repeat([]byte{b}, int(r.Size())) }
		if _, err := old.WriteAtContext(ctx, fill(1), 0); !errors.Is(err, pool.ErrFenced) {
			t.Fatalf("fenced write before any raise: %v", err)
		}
		if got, err := old.RaiseFence(ctx, pool.Fence{ID: 2, Token: 5}); err != nil || got != 5 {
			t.Fatalf("first raise: %d, %v", got, err)
		}
		if _, err := old.WriteAtContext(ctx, fill(1), 0); err != nil {
			t.Fatalf("older holder's write while it holds the fence: %v", err)
		}
		if got, err := cur.RaiseFence(ctx, pool.Fence{ID: 2, Token: 9}); err != nil || got != 9 {
			t.Fatalf("newer holder's raise: %d, %v", got, err)
		}
		check := func(when string) {
			t.Helper()
			for s := int64(0); s < r.Size(); s += 4096 {
				if _, err := old.WriteAtContext(ctx, []byte{0xee}, s+7); !errors.Is(err, pool.ErrFenced) {
					t.Fatalf("%s: older holder's write at %d: %v", when, s, err)
				}
			}
			if got, err := old.RaiseFence(ctx, pool.Fence{ID: 2, Token: 5}); !errors.Is(err, pool.ErrFenced) || got != 9 {
				t.Fatalf("%s: older holder's raise: %d, %v", when, got, err)
			}
			want := fill(byte(len(when)))
			if _, err := cur.WriteAtContext(ctx, want, 0); err != nil {
				t.Fatalf("%s: newer holder's write: %v", when, err)
			}
			got := make([]byte, r.Size())
			if _, err := r.ReadAtContext(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: read back %v (differs: %v)", when, err, !bytes.Equal(got, want))
			}
		}
		check("after the raise")

		m := f.Mems[1]
		f.CrashMem(m)
		time.Sleep(3 * time.Second)
		if err := f.StartMem(m, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); m.Node.Stats().Server.Pool.Rebuilt == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("memory node not rebuilt after 30 s")
			}
		}
		check("a memory node rebuilt")

		f.Srv.Close()
		f.StartSwitch()
		for deadline := time.Now().Add(30 * time.Second); f.Whole(f.Endpoint()) != nil; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(fmt.Sprint("the restarted switch's map is not whole after 30 s: ", f.Whole(f.Endpoint())))
			}
		}
		check("the switch restarted")
	})
}

// TestSimFenceHeldDatagram holds the older holder's write on the links
// from the switch to the memory nodes (forwarded before the raise, it
// passed the switch's check) and releases it after the newer holder
// raised the fence and wrote: the memory nodes refuse it, and the newer
// holder's data stays.
func TestSimFenceHeldDatagram(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := simpool.Start(t, simpool.Config{Seed: 8, Token: []byte("fence test"), Nodes: 3})
		defer f.Close()
		ctx := f.Ctx()
		r, err := f.PoolClient(f.Endpoint()).Alloc(ctx, 3*4096, pool.AllocOptions{Stripe: 4096, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		oldEP := f.Endpoint()
		oldReg, err := f.PoolClient(oldEP).Open(ctx, r.ID(), r.Key())
		if err != nil {
			t.Fatal(err)
		}
		old := oldReg.Fenced(pool.Fence{ID: 1, Token: 5})
		if _, err := old.RaiseFence(ctx, pool.Fence{ID: 1, Token: 5}); err != nil {
			t.Fatal(err)
		}
		slow := f.Link
		slow.Latency = 3 * time.Second
		f.Net.Locked(func() {
			for _, m := range f.Mems {
				f.Net.SetLink(m.Addr, f.Link, slow)
			}
		})
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		stale := make(chan error, 1)
		go func() {
			_, err := old.WriteAtContext(wctx, bytes.Repeat([]byte{0xee}, int(r.Size())), 0)
			stale <- err
		}()
		time.Sleep(time.Millisecond)    // forwarded, now on the slow links
		f.SetLoss(oldEP.LocalAddr(), 1) // its resends go nowhere
		f.Net.Locked(func() {
			for _, m := range f.Mems {
				f.Net.SetLink(m.Addr, f.Link, f.Link)
			}
		})
		cur := r.Fenced(pool.Fence{ID: 1, Token: 9})
		if _, err := cur.RaiseFence(ctx, pool.Fence{ID: 1, Token: 9}); err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{2}, int(r.Size()))
		if _, err := cur.WriteAtContext(ctx, want, 0); err != nil {
			t.Fatal(err)
		}
		if err := <-stale; err == nil {
			t.Fatal("the held write was acknowledged")
		}
		time.Sleep(2 * time.Second) // the held datagrams reach the nodes
		got := make([]byte, r.Size())
		if _, err := r.ReadAtContext(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(got, 0xee); i >= 0 {
			t.Fatalf("the held write landed at %d after the raise", i)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("the newer holder's data changed")
		}
		var refused uint64
		for _, m := range f.Mems {
			refused += m.Node.Stats().Server.Pool.Refused
		}
		if refused == 0 {
			t.Fatal("no memory node refused the held write")
		}
	})
}

// TestSimFenceBounds checks what a key holder can do to a region's
// fences at the switch: a raise to the top of the token space is
// refused (no holder could follow it), and the region's table of fences
// is bounded.
func TestSimFenceBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := simpool.Start(t, simpool.Config{Seed: 9, Token: []byte("fence test"), Nodes: 1})
		defer f.Close()
		ctx := f.Ctx()
		r, err := f.PoolClient(f.Endpoint()).Alloc(ctx, 4096, pool.AllocOptions{Stripe: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RaiseFence(ctx, pool.Fence{ID: 0, Token: ^uint64(0)}); !errors.Is(err, wire.StatusBadOperand) {
			t.Fatalf("raise to the top of the token space: %v", err)
		}
		if _, err := r.RaiseFence(ctx, pool.Fence{ID: 0, Token: wire.MaxFenceStep}); err != nil {
			t.Fatalf("raise by MaxFenceStep: %v", err)
		}
		if _, err := r.RaiseFence(ctx, pool.Fence{ID: 0, Token: 2*wire.MaxFenceStep + 1}); !errors.Is(err, wire.StatusBadOperand) {
			t.Fatalf("raise by more than MaxFenceStep: %v", err)
		}
		for id := uint32(1); id < wire.MaxFences; id++ {
			if _, err := r.RaiseFence(ctx, pool.Fence{ID: id, Token: 1}); err != nil {
				t.Fatalf("fence %d: %v", id, err)
			}
		}
		if _, err := r.RaiseFence(ctx, pool.Fence{ID: wire.MaxFences, Token: 1}); !errors.Is(err, wire.StatusBusy) {
			t.Fatalf("one fence past the region's bound: %v", err)
		}
		if _, err := r.Fenced(pool.Fence{ID: 7, Token: 1}).WriteAtContext(ctx, []byte("x"), 0); err != nil {
			t.Fatalf("a write fenced by a raised fence, the table full: %v", err)
		}
	})
}

// TestSimFenceResent loses the older holder's write on the way to the
// memory nodes, raises the fence, and lets the older holder's client
// resend it: the resent copy is refused (the raise came between), and
// the write fails with ErrFenced, not a timeout.
func TestSimFenceResent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := simpool.Start(t, simpool.Config{Seed: 10, Token: []byte("fence test"), Nodes: 2})
		defer f.Close()
		ctx := f.Ctx()
		r, err := f.PoolClient(f.Endpoint()).Alloc(ctx, 2*4096, pool.AllocOptions{Stripe: 4096, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		oldEP := f.Endpoint()
		oldReg, err := f.PoolClient(oldEP).Open(ctx, r.ID(), r.Key())
		if err != nil {
			t.Fatal(err)
		}
		old := oldReg.Fenced(pool.Fence{ID: 1, Token: 5})
		if _, err := old.RaiseFence(ctx, pool.Fence{ID: 1, Token: 5}); err != nil {
			t.Fatal(err)
		}
		for _, m := range f.Mems {
			f.SetLoss(m.Addr, 1)
		}
		stale := make(chan error, 1)
		go func() {
			_, err := old.WriteAtContext(ctx, []byte("stale"), 0)
			stale <- err
		}()
		time.Sleep(time.Millisecond) // sent once, lost on the way to the nodes
		f.SetLoss(oldEP.LocalAddr(), 1)
		for _, m := range f.Mems {
			f.SetLoss(m.Addr, 0)
		}
		cur := r.Fenced(pool.Fence{ID: 1, Token: 9})
		if _, err := cur.RaiseFence(ctx, pool.Fence{ID: 1, Token: 9}); err != nil {
			t.Fatal(err)
		}
		if _, err := cur.WriteAtContext(ctx, []byte("fresh"), 0); err != nil {
			t.Fatal(err)
		}
		f.SetLoss(oldEP.LocalAddr(), 0)
		if err := <-stale; !errors.Is(err, pool.ErrFenced) {
			t.Fatalf("the resent write: %v, want ErrFenced", err)
		}
		got := make([]byte, 5)
		if _, err := r.ReadAtContext(ctx, got, 0); err != nil || string(got) != "fresh" {
			t.Fatalf("read back %q, %v", got, err)
		}
	})
}
