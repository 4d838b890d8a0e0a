package kv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
)

// TestSimPausedOwnerFenced pauses the holder of a rank between its
// lease check and the write that publishes a bucket, and cuts it off:
// the standby takes the rank over, raises the fence, reads the shards
// and writes the same keys. Then the paused holder resumes and sends
// its write, long after its lease and the fence wait. The fence refuses
// it (the switch and the memory nodes hold the newer token), the holder
// counts it, and every key reads back its last acknowledged value:
// without the fence the stale bucket would land over the new holder's
// (a stale value read, an acknowledged write lost).
//
// It runs on a key space with two copies and on an erasure-coded one
// (4+2), whose writes are chains: every hop of the stale chain is held
// to the fence.
func TestSimPausedOwnerFenced(t *testing.T) {
	t.Run("copies", func(t *testing.T) {
		l := Layout{Shards: 2, Buckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}
		simPausedOwnerFenced(t, 31, 3, l, pool.AllocOptions{Replicas: 2})
	})
	t.Run("coded", func(t *testing.T) {
		l := Layout{Shards: 2, Buckets: 128, PageBytes: 4096, HeapBytes: 4 * 4 * 4096, Owners: 1,
			Code: Coding{K: 4, M: 2, Shard: 4096}}
		simPausedOwnerFenced(t, 32, 6, l, pool.AllocOptions{})
	})
}

func simPausedOwnerFenced(t *testing.T, seed int64, nodes int, l Layout, alloc pool.AllocOptions) {
	simStoreProcs(t, seed, nodes, l, alloc, 2, nil, func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		want := map[string]string{}
		set := func(k, v string) {
			t.Helper()
			if _, err := c.Set(ctx, []byte(k), []byte(v)); err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
			want[k] = v
		}
		checkAll := func(what string) {
			t.Helper()
			for k, v := range want {
				got, _, err := c.Get(ctx, []byte(k))
				if err != nil || string(got) != v {
					t.Fatalf("%s: %s = %q, %v; want %q", what, k, got, err, v)
				}
			}
		}
		// Values of one length: one size class, so the new holder's
		// first free slot is the one the paused holder wrote into.
		val := func(round, i int) string { return fmt.Sprintf("%-40.40s", fmt.Sprintf("round %d, key %d", round, i)) }
		for i := range 8 {
			set(fmt.Sprint("key", i), val(1, i))
		}
		h, sb := 0, 1
		if !s.owners[h].Stats().Serving {
			h, sb = 1, 0
		}
		old := s.owners[h]
		oldToken := old.Stats().FenceToken
		if oldToken == 0 {
			t.Fatalf("the holder writes without a fence: %+v", old.Stats())
		}

		paused, release := make(chan struct{}), make(chan struct{})
		armed := true
		setBeforeWrite(old, func(ctx context.Context, off uint64, n int) context.Context {
			if !armed || n != BucketBytes {
				return ctx
			}
			armed = false
			close(paused)
			<-release
			// The pause outlasts the write's deadline; the datagram
			// goes out all the same (as from inside the endpoint).
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.T.Cleanup(cancel)
			return ctx
		})
		sctx, cancel := context.WithCancel(ctx)
		staleDone := make(chan error, 1)
		go func() {
			_, err := s.client().Set(sctx, []byte("key3"), []byte(val(9, 3)))
			staleDone <- err
		}()
		<-paused
		cancel() // its client gives up: the write's outcome is unknown to it
		if err := <-staleDone; err == nil {
			t.Fatal("the paused write was acknowledged")
		}
		s.SetLoss(s.oeps[h].LocalAddr(), 1)
		for deadline := time.Now().Add(20 * time.Second); !s.owners[sb].Stats().Serving; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the standby did not take the rank over")
			}
		}
		for i := range 8 {
			set(fmt.Sprint("key", i), val(2, i))
		}
		checkAll("the standby took over")
		newToken := s.owners[sb].Stats().FenceToken
		if newToken <= oldToken {
			t.Fatalf("the new holder's token %#x is not above the old one's %#x", newToken, oldToken)
		}

		s.SetLoss(s.oeps[h].LocalAddr(), 0)
		close(release)
		for deadline := time.Now().Add(10 * time.Second); old.Stats().Fenced == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the paused holder's write was not refused for its fence: %+v", old.Stats())
			}
		}
		time.Sleep(time.Second)
		checkAll("the paused holder resumed")
		set("key3", val(3, 3))
		checkAll("the new holder wrote on")
		if st := old.Stats(); st.Serving || st.Fenced != 1 {
			t.Fatalf("the paused holder after it resumed: %+v", st)
		}
		if n := s.Srv.Stats().PoolFenced; n == 0 {
			t.Fatal("the switch refused no fenced write")
		}
	})
}
