package kv

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestSimLocationCache follows a reader's cache of a key's location
// through another client's updates, delete and new insert: a cached GET
// reads bucket and value at once (two READs in one round trip), a GET
// after an update reads the new value with one more READ, and a GET
// after a delete walks the probe path again; every answer is the
// writer's latest value.
func TestSimLocationCache(t *testing.T) {
	simStore(t, 11, 3, testLayout(), func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		r, w := s.client(), s.client()
		key := []byte("cached")
		last := r.Stats()
		expect := func(what string, want string, reads, hits, stale, misses uint64) {
			t.Helper()
			v, _, err := r.Get(ctx, key)
			switch {
			case want == "" && !errors.Is(err, ErrNotFound):
				t.Fatalf("%s: got %q, %v; want not found", what, v, err)
			case want != "" && (err != nil || string(v) != want):
				t.Fatalf("%s: got %q, %v; want %q", what, v, err, want)
			}
			st := r.Stats()
			got := [4]uint64{st.Reads - last.Reads, st.CacheHits - last.CacheHits, st.CacheStale - last.CacheStale, st.CacheMisses - last.CacheMisses}
			if got != [4]uint64{reads, hits, stale, misses} {
				t.Fatalf("%s: reads, hits, stale, misses = %v, want %v", what, got, [4]uint64{reads, hits, stale, misses})
			}
			last = st
		}
		set := func(v string) {
			t.Helper()
			if _, err := w.Set(ctx, key, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		set("one")
		expect("first read", "one", 2, 0, 0, 1)
		expect("cached read", "one", 2, 1, 0, 0)
		set("two")
		expect("read after an update", "two", 3, 0, 1, 0)
		expect("cached read of the update", "two", 2, 1, 0, 0)
		if err := w.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		expect("read after a delete", "", 3, 0, 0, 1)
		if st := r.Stats(); st.Cached != 0 {
			t.Fatalf("a deleted key stays cached (%d entries)", st.Cached)
		}
		set("three")
		expect("read of the new insert", "three", 2, 0, 0, 1)
		expect("cached read of the new insert", "three", 2, 1, 0, 0)
	})
}

// TestSimLocationCacheBound checks the cache keeps at most its bound of
// entries, and that a client without a cache caches nothing, both
// reading every value right.
func TestSimLocationCacheBound(t *testing.T) {
	simStore(t, 12, 3, testLayout(), func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		w := s.client()
		for _, tc := range []struct{ cache, want int }{{3, 3}, {-1, 0}} {
			r := s.clientWith(func(cfg *ClientConfig) { cfg.CacheEntries = tc.cache })
			for round := range 2 {
				for i := range 10 {
					k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d.%d", i, round)
					if round == 0 || i%2 == 0 { // the second round updates half the keys
						if _, err := w.Set(ctx, []byte(k), []byte(v)); err != nil {
							t.Fatal(err)
						}
					}
					got, _, err := r.Get(ctx, []byte(k))
					if err != nil {
						t.Fatalf("cache %d: get %s: %v", tc.cache, k, err)
					}
					cur, _, _ := w.Get(ctx, []byte(k))
					if !bytes.Equal(got, cur) {
						t.Fatalf("cache %d: get %s = %q, the writer reads %q", tc.cache, k, got, cur)
					}
				}
			}
			st := r.Stats()
			if st.Cached != tc.want {
				t.Fatalf("cache %d: %d entries cached, want %d", tc.cache, st.Cached, tc.want)
			}
			if tc.cache < 0 && st.CacheHits+st.CacheStale != 0 {
				t.Fatalf("no cache, yet %d hits and %d stale", st.CacheHits, st.CacheStale)
			}
		}
	})
}

// TestSimMulti stores and reads a batch of keys, one of them absent.
func TestSimMulti(t *testing.T) {
	simStore(t, 13, 3, testLayout(), func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		var keys, vals [][]byte
		for i := range 70 {
			keys = append(keys, fmt.Appendf(nil, "m%d", i))
			vals = append(vals, fmt.Appendf(nil, "value %d", i))
		}
		vers, errs, err := c.SetMulti(ctx, keys, vals, SetOptions{Flags: 7})
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if errs[i] != nil || vers[i] == 0 {
				t.Fatalf("set %s: version %d, %v", keys[i], vers[i], errs[i])
			}
		}
		items, gerrs := c.GetMulti(ctx, append(keys, []byte("absent")))
		for i := range keys {
			if gerrs[i] != nil || !bytes.Equal(items[i].Value, vals[i]) || items[i].Version != vers[i] || items[i].Flags != 7 {
				t.Fatalf("get %s: %+v, %v; want %q version %d flags 7", keys[i], items[i], gerrs[i], vals[i], vers[i])
			}
		}
		if !errors.Is(gerrs[len(keys)], ErrNotFound) {
			t.Fatalf("get of an absent key in a batch: %v", gerrs[len(keys)])
		}
		if _, _, err := c.SetMulti(ctx, keys, vals[:3], SetOptions{}); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("keys and values of different counts: %v", err)
		}
		// The 70 keys went as one request per shard.
		var st OwnerStats
		for _, o := range s.owners {
			ost := o.Stats()
			st.Batches, st.Writes = st.Batches+ost.Batches, st.Writes+ost.Writes
		}
		if st.Batches != uint64(testLayout().Shards) || st.Writes != 70 {
			t.Fatalf("%d batch requests and %d writes, want %d and 70", st.Batches, st.Writes, testLayout().Shards)
		}
		// A key too long fails alone.
		bad := [][]byte{[]byte("good"), make([]byte, MaxKey+1)}
		_, errs, err = c.SetMulti(ctx, bad, [][]byte{[]byte("v"), []byte("v")}, SetOptions{})
		if err != nil || errs[0] != nil || !errors.Is(errs[1], ErrTooLarge) {
			t.Fatalf("a batch with a key too long: %v, %v", errs, err)
		}
	})
}

// TestSimMultiSplit stores more of one shard than one request holds: the
// keys go in several requests, each applied, every value readable.
func TestSimMultiSplit(t *testing.T) {
	l := Layout{Shards: 2, Buckets: 64, PageBytes: 4096, HeapBytes: 32 * 4096, Owners: 1}
	simStore(t, 14, 3, l, func(t *testing.T, s *simKV) {
		ctx := s.Ctx()
		c := s.client()
		var keys, vals [][]byte
		for i := range 40 {
			keys = append(keys, fmt.Appendf(nil, "big%d", i))
			vals = append(vals, bytes.Repeat([]byte{byte('a' + i%26)}, 3500))
		}
		_, errs, err := c.SetMulti(ctx, keys, vals, SetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("set %s: %v", keys[i], e)
			}
		}
		if b := s.owners[0].Stats().Batches; b <= uint64(l.Shards) {
			t.Fatalf("%d requests for 140 KB of values in %d shards: not split at 60 KiB", b, l.Shards)
		}
		items, gerrs := c.GetMulti(ctx, keys)
		for i := range keys {
			if gerrs[i] != nil || !bytes.Equal(items[i].Value, vals[i]) {
				t.Fatalf("get %s: %v", keys[i], gerrs[i])
			}
		}
	})
}
