package kv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSimExpiry checks key expiry in virtual time: a value is read until
// its expiry and not found after it, with no owner involved; an expired
// key is absent for Add, CompareAndSwap, Incr and Replace; Touch moves
// the expiry; Append and Prepend keep expiry and flags.
func TestSimExpiry(t *testing.T) {
	simStore(t, 3, 3, testLayout(), func(t *testing.T, s *simKV) {
		c := s.client()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // the test sleeps past s.ctx's
		defer cancel()
		k := []byte("session")
		start := time.Now()
		v1, err := c.SetWith(ctx, k, []byte("alive"), SetOptions{TTL: 10 * time.Second, Flags: 42})
		if err != nil {
			t.Fatal(err)
		}
		set := time.Now()
		it, err := c.GetItem(ctx, k)
		if err != nil || string(it.Value) != "alive" || it.Version != v1 || it.Flags != 42 {
			t.Fatalf("get: %+v %v", it, err)
		}
		if d, e := it.Expires.Sub(start), it.Expires.Sub(set); d < 10*time.Second || e > 10*time.Second {
			t.Fatalf("expires %v after the set began and %v after it returned, want 10 s from when it was applied", d, e)
		}
		time.Sleep(11 * time.Second)
		if _, _, err := c.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after expiry: %v", err)
		}
		if _, err := c.CompareAndSwap(ctx, k, []byte("x"), v1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cas of an expired key: %v", err)
		}
		if _, err := c.Replace(ctx, k, []byte("x"), SetOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("replace of an expired key: %v", err)
		}
		if _, err := c.AddWith(ctx, k, []byte("again"), SetOptions{TTL: 5 * time.Second}); err != nil {
			t.Fatalf("add after expiry: %v", err)
		}
		if v, _, err := c.Get(ctx, k); err != nil || string(v) != "again" {
			t.Fatalf("get after add: %q %v", v, err)
		}
		// Touch: a longer life, then none.
		if _, err := c.Touch(ctx, k, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if v, _, err := c.Get(ctx, k); err != nil || string(v) != "again" {
			t.Fatalf("get after touch: %q %v", v, err)
		}
		if _, err := c.Touch(ctx, k, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if it, err := c.GetItem(ctx, k); err != nil || !it.Expires.IsZero() {
			t.Fatalf("get after touch 0: %+v %v", it, err)
		}
		// Append and Prepend keep expiry and flags.
		if _, err := c.SetWith(ctx, []byte("n"), []byte("5"), SetOptions{TTL: 3 * time.Second, Flags: 7}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(ctx, []byte("n"), []byte("0")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Prepend(ctx, []byte("n"), []byte("1")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Incr(ctx, []byte("n"), 1); err != nil || n != 151 {
			t.Fatalf("incr: %d %v", n, err)
		}
		if it, err := c.GetItem(ctx, []byte("n")); err != nil || string(it.Value) != "151" || it.Flags != 7 || it.Expires.IsZero() {
			t.Fatalf("after append, prepend, incr: %+v %v", it, err)
		}
		time.Sleep(4 * time.Second)
		if _, err := c.Incr(ctx, []byte("n"), 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("incr of an expired key: %v", err)
		}
		if _, err := c.Append(ctx, []byte("absent"), []byte("x")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("append to an absent key: %v", err)
		}
		if _, err := c.SetWith(ctx, k, nil, SetOptions{TTL: -time.Second}); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("negative ttl: %v", err)
		}
	})
}

// TestSimExpirySweep lets values expire that nobody touches again: the
// owners' sweep frees them, and a restarted owner does not bring them
// back.
func TestSimExpirySweep(t *testing.T) {
	simStore(t, 4, 3, testLayout(), func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.Ctx()
		for i := range 30 {
			ttl := 2 * time.Second
			if i%3 == 0 {
				ttl = 0 // these stay
			}
			if _, err := c.SetWith(ctx, fmt.Appendf(nil, "k%d", i), []byte("v"), SetOptions{TTL: ttl}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Second) // past the expiry and a sweep of every shard (64 buckets)
		var st OwnerStats
		for _, o := range s.owners {
			os := o.Stats()
			st.Expired += os.Expired
			st.Keys += os.Keys
			st.Heap.UsedSlots += os.Heap.UsedSlots
		}
		if st.Expired != 20 || st.Keys != 10 || st.Heap.UsedSlots != 10 {
			t.Fatalf("after the sweep: %d expired, %d keys, %d slots used; want 20, 10, 10", st.Expired, st.Keys, st.Heap.UsedSlots)
		}
		for r := range s.owners {
			s.crashOwner(r)
			s.startOwner(r)
		}
		for i := range 30 {
			_, _, err := c.Get(ctx, fmt.Appendf(nil, "k%d", i))
			if i%3 == 0 && err != nil || i%3 != 0 && !errors.Is(err, ErrNotFound) {
				t.Fatalf("after the restart: get k%d: %v", i, err)
			}
		}
	})
}
