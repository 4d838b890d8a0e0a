package simpool_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// randomBytes is n bytes drawn from seed.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// restart crashes memory node m and starts it again after down.
func restart(t *testing.T, f *simpool.Fabric, m *simpool.Mem, down time.Duration) {
	t.Helper()
	f.CrashMem(m)
	time.Sleep(down)
	if err := f.StartMem(m, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// waitWhole waits up to 30 s (virtual) for every copy of every region
// to be in place.
func waitWhole(t *testing.T, f *simpool.Fabric, what string) {
	t.Helper()
	ep := f.Endpoint()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := f.Whole(ep)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not whole after 30 s: %v", what, err)
		}
	}
}

// readBack reads all of r and compares it with want.
func readBack(t *testing.T, f *simpool.Fabric, r *pool.Region, want []byte, what string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := r.ReadAtContext(f.Ctx(), got, 0); err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: byte %d reads %#x, want %#x", what, i, got[i], want[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestSimDurableOneCopy writes a region with one copy on a durable
// memory node, restarts the node while the switch runs, and reads every
// byte back: the region is whole, where a node that restarts empty
// loses it.
func TestSimDurableOneCopy(t *testing.T) {
	for _, durable := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			f := simpool.Start(t, simpool.Config{Seed: 41, Token: []byte("durable test"), Nodes: 1, Durable: durable})
			defer f.Close()
			ctx := f.Ctx()
			r, err := f.PoolClient(f.Endpoint()).Alloc(ctx, 256<<10, pool.AllocOptions{Stripe: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			want := randomBytes(1, int(r.Size()))
			if _, err := r.WriteAtContext(ctx, want, 0); err != nil {
				t.Fatal(err)
			}
			restart(t, f, f.Mems[0], time.Second)
			if !durable {
				// As before durable nodes: the only copy is gone.
				got := make([]byte, 1)
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					_, err := r.ReadAtContext(ctx, got, 0)
					if errors.Is(err, wire.StatusLost) {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("empty restart: read %v, want StatusLost", err)
					}
				}
			}
			waitWhole(t, f, "durable restart")
			readBack(t, f, r, want, "durable restart")
			// It serves writes again, and they land.
			copy(want[100:], "after the restart")
			if _, err := r.WriteAtContext(ctx, want[100:117], 100); err != nil {
				t.Fatal(err)
			}
			readBack(t, f, r, want, "written after the restart")
			if st := f.Mems[0].Node.Stats().Server.Pool; st.Rebuilt != 0 {
				t.Fatalf("%d rebuilds on a region with one copy", st.Rebuilt)
			}
		})
	}
}

// TestSimDurableStaleCopy restarts a durable memory node of a region
// with two copies twice: once with no write in between (its copy serves
// again, no rebuild), once after writes it missed went to the other copy
// (its copy is stale: rebuilt, never read as is). Every read returns the
// latest data, from either node.
func TestSimDurableStaleCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := simpool.Start(t, simpool.Config{Seed: 42, Token: []byte("durable test"), Nodes: 2, Durable: true})
		defer f.Close()
		ctx := f.Ctx()
		r, err := f.PoolClient(f.Endpoint()).Alloc(ctx, 128<<10, pool.AllocOptions{Stripe: 16 << 10, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		want := randomBytes(2, int(r.Size()))
		if _, err := r.WriteAtContext(ctx, want, 0); err != nil {
			t.Fatal(err)
		}
		m := f.Mems[0]

		restart(t, f, m, 3*time.Second)
		waitWhole(t, f, "restart with no write missed")
		if st := m.Node.Stats().Server.Pool; st.Rebuilt != 0 || st.Grants != 0 {
			t.Fatalf("a current copy was granted again (%d) or rebuilt (%d)", st.Grants, st.Rebuilt)
		}
		readFrom(t, f, r, m, want, "current copy kept")

		f.CrashMem(m)
		time.Sleep(3 * time.Second)
		want = randomBytes(3, int(r.Size()))
		if _, err := r.WriteAtContext(ctx, want, 0); !errors.Is(err, pool.ErrDegraded) {
			t.Fatalf("a write with node %v down: %v, want ErrDegraded", m.Addr, err)
		}
		if err := f.StartMem(m, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		waitWhole(t, f, "restart after missed writes")
		if st := m.Node.Stats().Server.Pool; st.Rebuilt == 0 {
			t.Fatal("the stale copy was not rebuilt")
		}
		readFrom(t, f, r, m, want, "stale copy rebuilt")
	})
}

// readFrom checks that every stripe reads want, each with the copy on
// node m serving (the other node's link cut), so a stale copy on m
// would be seen.
func readFrom(t *testing.T, f *simpool.Fabric, r *pool.Region, m *simpool.Mem, want []byte, what string) {
	t.Helper()
	for _, o := range f.Mems {
		if o != m {
			f.SetLoss(o.Addr, 1)
		}
	}
	defer func() {
		for _, o := range f.Mems {
			f.SetLoss(o.Addr, 0)
		}
	}()
	readBack(t, f, r, want, what)
}

// TestSimDurablePowerLoss stops the switch and every memory node at
// once (a power loss) and starts them again: the restarted switch
// rebuilds its map from the durable nodes' reports, and regions with one
// copy and with two read back whole.
func TestSimDurablePowerLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := simpool.Start(t, simpool.Config{Seed: 43, Token: []byte("durable test"), Nodes: 2, Durable: true})
		defer f.Close()
		ctx := f.Ctx()
		pc := f.PoolClient(f.Endpoint())
		one, err := pc.Alloc(ctx, 64<<10, pool.AllocOptions{Stripe: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		two, err := pc.Alloc(ctx, 64<<10, pool.AllocOptions{Stripe: 8 << 10, Replicas: 2})
		if err != nil {
			t.Fatal(err)
		}
		w1, w2 := randomBytes(4, int(one.Size())), randomBytes(5, int(two.Size()))
		if _, err := one.WriteAtContext(ctx, w1, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := two.WriteAtContext(ctx, w2, 0); err != nil {
			t.Fatal(err)
		}
		for _, m := range f.Mems {
			f.CrashMem(m)
		}
		f.Srv.Close()
		time.Sleep(2 * time.Second)
		f.StartSwitch()
		for _, m := range f.Mems {
			if err := f.StartMem(m, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		waitWhole(t, f, "after the power loss")
		readBack(t, f, one, w1, "one copy")
		readBack(t, f, two, w2, "two copies")
	})
}
