package kv

import (
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
)

// TestSimMemoryNodeRestart crashes a memory node of a two-copy key space
// (its memory is lost) and starts it again: every key reads back while
// it is down and after, and its copies are rebuilt from the others.
func TestSimMemoryNodeRestart(t *testing.T) {
	simStoreWith(t, 3, 3, testLayout(), pool.AllocOptions{Replicas: 2}, func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.ctx()
		for i := range 40 {
			if _, err := c.Set(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		check := func(when string) {
			t.Helper()
			for i := range 40 {
				v, _, err := c.Get(ctx, fmt.Appendf(nil, "k%d", i))
				if err != nil || string(v) != fmt.Sprint("v", i) {
					t.Fatalf("%s: get k%d: %q %v", when, i, v, err)
				}
			}
		}
		m := s.mems[0]
		s.crashMem(m)
		time.Sleep(3 * time.Second)
		check("memory node down")
		if err := s.startMem(m, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for m.ep.Stats().Pool.Rebuilt == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("not rebuilt after 30 s: %+v", m.ep.Stats().Pool)
			}
			time.Sleep(100 * time.Millisecond)
		}
		check("rebuilt")
		if _, err := c.Set(ctx, []byte("k1"), []byte("new")); err != nil {
			t.Fatal(err)
		}
	})
}
