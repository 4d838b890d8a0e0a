package kv

import (
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
)

// TestSimMemoryNodeRestart crashes a memory node of a two-copy key space
// (its memory is lost) and starts it again: every key reads back while
// it is down and after, writes succeed while it is down, and its copies
// are rebuilt from the others.
func TestSimMemoryNodeRestart(t *testing.T) {
	simStoreWith(t, 3, 3, testLayout(), pool.AllocOptions{Replicas: 2}, func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.Ctx()
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
		// Node 0 twice, then node 1: each time every key reads back
		// while the node is down and once it is rebuilt.
		for round, i := range []int{0, 0, 1} {
			m := s.Mems[i]
			s.CrashMem(m)
			time.Sleep(3 * time.Second)
			check(fmt.Sprintf("round %d: memory node %d down", round, i))
			// A write while a copy is down reaches the other copy: it
			// succeeds (the pool says degraded, not failed).
			if _, err := c.Set(ctx, []byte("k0"), []byte("v0")); err != nil {
				t.Fatalf("round %d: set with memory node %d down: %v", round, i, err)
			}
			if err := s.StartMem(m, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for m.Node.Stats().Server.Pool.Rebuilt == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: memory node %d not rebuilt after 30 s: %+v", round, i, m.Node.Stats().Server.Pool)
				}
				time.Sleep(100 * time.Millisecond)
			}
			check(fmt.Sprintf("round %d: memory node %d rebuilt", round, i))
		}
		if _, err := c.Set(ctx, []byte("k1"), []byte("new")); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSimMemoryNodeRestartWhileSwitchDown: a memory node crashes, the
// switch crashes, the memory node comes back (empty) while the switch is
// down, then the switch: the switch rebuilds its pool map from the
// memory nodes' reports, and since every byte still has a copy on the
// other nodes, every key must read back.
func TestSimMemoryNodeRestartWhileSwitchDown(t *testing.T) {
	simStoreWith(t, 4, 3, testLayout(), pool.AllocOptions{Replicas: 2}, func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.Ctx()
		for i := range 40 {
			if _, err := c.Set(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		m := s.Mems[2]
		s.CrashMem(m)
		time.Sleep(2 * time.Second)
		s.Srv.Close()
		time.Sleep(time.Second)
		if err := s.StartMem(m, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		s.StartSwitch()
		time.Sleep(3 * time.Second)
		// The switch crashes again, while it may be rebuilding the
		// node's copy.
		st, err := s.Endpoint().PoolStat(ctx, s.Switch.String(), s.Fab)
		t.Logf("pool after the first switch restart: %+v %v", st.Regions, err)
		s.Srv.Close()
		time.Sleep(5 * time.Second)
		s.StartSwitch()
		time.Sleep(5 * time.Second)
		st, err = s.Endpoint().PoolStat(ctx, s.Switch.String(), s.Fab)
		t.Logf("pool after both restarts: %+v %v", st.Regions, err)
		// A process that opens the region now (an owner starting).
		pc := s.PoolClient(s.Endpoint())
		reg, err := pc.Open(ctx, s.reg.ID(), s.reg.Key())
		if err != nil {
			t.Fatalf("open after both restarts: %v", err)
		}
		if _, _, err := openStore(ctx, reg); err != nil {
			t.Fatalf("the header after both restarts: %v", err)
		}
		for i := range 40 {
			v, _, err := c.Get(ctx, fmt.Appendf(nil, "k%d", i))
			if err != nil || string(v) != fmt.Sprint("v", i) {
				t.Fatalf("get k%d: %q %v", i, v, err)
			}
		}
	})
}
