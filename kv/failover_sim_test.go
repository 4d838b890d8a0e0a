package kv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
)

// TestSimOwnerFailover runs two owner processes per rank. The holder of
// rank 0 crashes: its standby takes the rank over and writes go on. The
// holder of rank 1 is cut off (alive, not crashed): its standby takes
// over; when the link heals the cut-off process must not write (its
// lease lapsed and another holds the rank) and stands by; then the new
// holder crashes and the first takes the rank back, reading the shards
// again. Every key is checked against its last acknowledged value at
// each step: an owner writing from a stale copy of its shards (reusing
// a slot another holder filled, or an old version) would show.
func TestSimOwnerFailover(t *testing.T) {
	l := Layout{Shards: 4, Buckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 2}
	simStoreProcs(t, 21, 3, l, pool.AllocOptions{}, 2, nil, func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		want := map[string]string{}
		round := 0
		// writeSome sets every step-th key: keys left alone keep values
		// another holder wrote, which a holder writing from a stale copy
		// of its shards would overwrite (reusing their slots).
		writeSome := func(what string, step int) {
			t.Helper()
			round++
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			for i := 0; i < 24; i += step {
				// Values of one length: one size class, so a stale
				// allocator's free slots are the live ones of another.
				k, v := fmt.Sprint("key", i), fmt.Sprintf("%-60.60s", fmt.Sprintf("round %d, key %d: %s", round, i, what))
				// A write sent while its owner was failing may end of
				// unknown outcome: setting the same value again settles it.
				_, err := c.Set(wctx, []byte(k), []byte(v))
				for try := 0; errors.Is(err, ErrUnknownOutcome) && try < 3; try++ {
					_, err = c.Set(wctx, []byte(k), []byte(v))
				}
				if err != nil {
					t.Fatalf("%s: set %s: %v", what, k, err)
				}
				want[k] = v
			}
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
		holder := func(rank int) int {
			t.Helper()
			h := -1
			for i, o := range s.owners {
				if o != nil && i%l.Owners == rank && o.Stats().Serving {
					if h >= 0 {
						t.Fatalf("rank %d: processes %d and %d both serve", rank, h, i)
					}
					h = i
				}
			}
			return h
		}
		writeSome("start", 1)
		checkAll("start")
		h0, h1 := holder(0), holder(1)
		if h0 < 0 || h1 < 0 {
			t.Fatalf("no holder: rank 0 by %d, rank 1 by %d", h0, h1)
		}

		s.crashOwner(h0)
		writeSome("rank 0's holder crashed", 1)
		checkAll("rank 0's holder crashed")
		if n := holder(0); n < 0 || n == h0 {
			t.Fatalf("rank 0: held by %d after %d crashed", n, h0)
		}

		cut := s.oeps[h1].LocalAddr()
		down := s.Link
		down.Loss = 1
		s.Net.Locked(func() { s.Net.SetLink(cut, down, down) })
		writeSome("rank 1's holder cut off", 1)
		n1 := holder(1)
		if n1 < 0 || n1 == h1 {
			t.Fatalf("rank 1: held by %d while %d is cut off", n1, h1)
		}
		s.Net.Locked(func() { s.Net.SetLink(cut, s.Link, s.Link) })
		time.Sleep(3 * time.Second) // the cut-off process learns it lost the rank
		if st := s.owners[h1].Stats(); st.Serving {
			t.Fatalf("rank 1: process %d serves again beside %d", h1, n1)
		}
		writeSome("rank 1's first holder back", 2)
		checkAll("rank 1's first holder back")

		s.crashOwner(n1)
		writeSome("rank 1's second holder crashed", 3)
		checkAll("rank 1's second holder crashed")
		if n := holder(1); n != h1 {
			t.Fatalf("rank 1: held by %d, want %d back", n, h1)
		}
		if st := s.owners[h1].Stats(); st.Registrations != 2 {
			t.Fatalf("rank 1's first holder registered %d times, want 2", st.Registrations)
		}
	})
}

// TestSimOwnerLease cuts only the holder's incoming link: the switch
// still hears its heartbeats (so no other process may take the rank)
// but the holder hears no answer, so after its lease it must stop
// counting itself a writer; once answers come again it serves on
// without registering again.
func TestSimOwnerLease(t *testing.T) {
	l := Layout{Shards: 2, Buckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}
	simStore(t, 22, 3, l, func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.Ctx()
		if _, err := c.Set(ctx, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		o := s.owners[0]
		if st := o.Stats(); !st.Serving || st.Registrations != 1 {
			t.Fatalf("before the cut: %+v", st)
		}
		deaf := s.Link
		deaf.Loss = 1
		addr := s.oeps[0].LocalAddr()
		s.Net.Locked(func() { s.Net.SetLink(addr, s.Link, deaf) })
		time.Sleep(DefaultLease + 500*time.Millisecond)
		if st := o.Stats(); st.Serving {
			t.Fatalf("%v after its last answer, the owner still counts itself a writer", DefaultLease+500*time.Millisecond)
		}
		s.Net.Locked(func() { s.Net.SetLink(addr, s.Link, s.Link) })
		time.Sleep(time.Second)
		if st := o.Stats(); !st.Serving || st.Registrations != 1 {
			t.Fatalf("after the cut healed: %+v (want serving, registered once)", st)
		}
		if _, err := c.Set(ctx, []byte("k"), []byte("w")); err != nil {
			t.Fatal(err)
		}
	})
}
