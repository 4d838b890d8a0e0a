package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/jepsen"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// The Jepsen run's shape: clients, keys, how long the nemesis acts.
const (
	kvClients = 4
	kvKeys    = 16
	kvFaults  = 40 * time.Second
	kvLossy   = 0.2
)

// TestSimJepsenKV runs clients that set, delete and read a few keys
// while a nemesis crashes and restarts the owners and the switch and
// makes the owners' and the clients' links lossy or cuts them, several
// faults at once; the history is checked key by key with porcupine as
// linearizable registers (a delete writes "absent", a read of a missing
// key reads it). More seeds: KV_JEPSEN_SEEDS=FIRST-LAST. The key space
// keeps two copies, and the nemesis crashes memory nodes too (one at a
// time, each while every copy is in place; its memory is lost and
// rebuilt from the other copy).
func TestSimJepsenKV(t *testing.T) {
	seeds, err := jepsen.SeedsFromEnv("KV_JEPSEN_SEEDS", 501)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenKV(t, seed, nil) })
	}
}

// TestSimJepsenKVSealed is TestSimJepsenKV on a sealed fabric, as
// deployed by default: every process holds a credential and every
// datagram is sealed and encrypted, so restarts of owners, memory nodes
// and the switch go through new handshakes. More seeds:
// KV_JEPSEN_SEALED_SEEDS=FIRST-LAST.
func TestSimJepsenKVSealed(t *testing.T) {
	seeds, err := jepsen.SeedsFromEnv("KV_JEPSEN_SEALED_SEEDS", 541)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		auth, err := secure.NewAuthority(fmt.Appendf(nil, "kv sealed run %d", seed))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenKV(t, seed, auth) })
	}
}

func jepsenKV(t *testing.T, seed int64, auth *secure.Authority) {
	var h *jepsen.History
	defer func() {
		// Porcupine times its search with real timers: check outside the
		// bubble.
		if h == nil {
			return
		}
		r := jepsen.Check(h, jepsen.CheckOptions{Timeout: time.Minute})
		t.Logf("seed %d:\n%v", seed, r)
		if !r.OK() {
			t.Errorf("seed %d: the history is not linearizable", seed)
		}
		if r.Reads.OK == 0 || r.Writes.OK == 0 {
			t.Errorf("seed %d: nothing was read or written: %v", seed, r)
		}
	}()
	l := Layout{Shards: 8, Buckets: 64, PageBytes: 4096, HeapBytes: 16 * 4096, Owners: 2}
	// Two copies of every byte: a memory node may crash (its memory
	// lost) and be rebuilt from the other copy.
	// Two owner processes per rank: when the holder of a rank crashes
	// or is cut off, the other takes the rank over.
	simStoreProcs(t, seed, 3, l, pool.AllocOptions{Replicas: 2}, 2, auth, func(t *testing.T, s *simKV) {
		h = jepsen.NewHistory(nil)
		var clients []*Client
		for range kvClients {
			clients = append(clients, s.client())
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() { kvWork(seed, i, c, h, stop) })
		}
		mu := jepsen.NewChanLock() // owners and the switch, between faults
		var restarts sync.WaitGroup
		faults := kvFaultsOf(s, mu, &restarts, clients)
		nem, err := jepsen.NewNemesis(rand.New(rand.NewPCG(uint64(seed), 0xfa)), jepsen.NemesisConfig{
			Faults: faults, Total: kvFaults, MinGap: 500 * time.Millisecond, MaxGap: 3 * time.Second,
			MinDuration: time.Second, MaxDuration: 6 * time.Second, MaxActive: 3}, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: nemesis plan %v", seed, nem.Plan())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if err := nem.Run(ctx); err != nil {
			t.Errorf("seed %d: nemesis: %v", seed, err)
		}
		restarts.Wait()
		// Healed: the clients go on a while, then every key is read once
		// more, so a lost write shows.
		time.Sleep(5 * time.Second)
		close(stop)
		wg.Wait()
		// The readers' location caches were in play: a read answered
		// from a stale location would show as a stale read.
		var cs ClientStats
		for _, c := range clients {
			st := c.Stats()
			cs.CacheHits, cs.CacheStale, cs.CacheMisses = cs.CacheHits+st.CacheHits, cs.CacheStale+st.CacheStale, cs.CacheMisses+st.CacheMisses
		}
		t.Logf("seed %d: cached reads %d, stale locations %d, probe walks %d", seed, cs.CacheHits, cs.CacheStale, cs.CacheMisses)
		if cs.CacheHits == 0 || cs.CacheStale == 0 {
			t.Errorf("seed %d: the location cache was not exercised (%d hits, %d stale)", seed, cs.CacheHits, cs.CacheStale)
		}
		for k := range kvKeys {
			kvOp(clients[0], h, kvClients, fmt.Sprint("k", k), 0, nil)
		}
	})
}

// kvWork is one client's loop: reads half the time, sets with values
// no other write uses, and deletes.
func kvWork(seed int64, id int, c *Client, h *jepsen.History, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(id)))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		// Think time: a few hundred operations a second in all, which
		// the history checker decides in seconds.
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		key := fmt.Sprint("k", rng.IntN(kvKeys))
		switch x := rng.IntN(20); {
		case x < 10:
			kvOp(c, h, id, key, 0, nil)
		case x < 17:
			kvOp(c, h, id, key, 1, fmt.Appendf(nil, "client %d write %d", id, n))
		default:
			kvOp(c, h, id, key, 2, nil)
		}
	}
}

// kvOp does one operation (0 read, 1 set, 2 delete) and records it: a
// value is its Digest, absence 0.
func kvOp(c *Client, h *jepsen.History, id int, key string, op int, val []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if op == 0 {
		call := h.Invoke(id, jepsen.Read, key, 0)
		v, _, err := c.Get(ctx, []byte(key))
		switch {
		case err == nil:
			call.OK(jepsen.Digest(v))
		case errors.Is(err, ErrNotFound):
			call.OK(0)
		default:
			call.Fail(err)
			time.Sleep(50 * time.Millisecond)
		}
		return
	}
	var err error
	var call *jepsen.Call
	if op == 1 {
		call = h.Invoke(id, jepsen.Write, key, jepsen.Digest(val))
		_, err = c.Set(ctx, []byte(key), val)
	} else {
		call = h.Invoke(id, jepsen.Write, key, 0)
		err = c.Delete(ctx, []byte(key))
	}
	switch {
	case err == nil || op == 2 && errors.Is(err, ErrNotFound):
		call.OK(0)
	case errors.Is(err, ErrUnknownOutcome):
		call.Unknown(err)
	default:
		call.Fail(err)
	}
	if err != nil {
		// A failed write leaves its client idle a moment, as a real
		// client backs off.
		time.Sleep(50 * time.Millisecond)
	}
}

// kvFaultsOf are the faults the nemesis draws from.
func kvFaultsOf(s *simKV, mu jepsen.ChanLock, restarts *sync.WaitGroup, clients []*Client) []jepsen.Fault {
	var fs []jepsen.Fault
	lossy := func(name, kind, target string, addr func() (netip.AddrPort, bool), loss float64) jepsen.Fault {
		return jepsen.LinkFault(name, kind, target, mu, addr, loss, s.SetLoss)
	}
	for r := range s.owners { // r: an owner process
		target := fmt.Sprint("owner ", r)
		addr := func() (netip.AddrPort, bool) {
			if s.oeps[r] == nil {
				return netip.AddrPort{}, false
			}
			return s.oeps[r].LocalAddr(), true
		}
		crashed := false
		fs = append(fs, jepsen.Fault{Name: "crash " + target, Kind: "crash owner", Target: target,
			Start: func() error {
				mu.Lock()
				defer mu.Unlock()
				if s.oeps[r] == nil {
					return fmt.Errorf("%w: %s is down", jepsen.ErrSkip, target)
				}
				s.crashOwner(r)
				crashed = true
				return nil
			},
			Stop: func() error {
				if crashed { // not when Start skipped it
					crashed = false
					restarts.Go(func() { kvRestart(s, mu, r) })
				}
				return nil
			}},
			lossy("loss "+target, "lossy link", target, addr, kvLossy),
			lossy("cut "+target, "cut link", target, addr, 1))
	}
	for i, c := range clients {
		target := fmt.Sprint("client ", i)
		addr := func() (netip.AddrPort, bool) { return c.ep.LocalAddr(), true }
		fs = append(fs, lossy("loss "+target, "lossy link", target, addr, kvLossy))
	}
	stat := s.Endpoint()
	for i, m := range s.Mems {
		// One memory node down at a time (a shared target): the region
		// keeps two copies, so one copy is always there.
		crashed := false
		fs = append(fs, jepsen.Fault{Name: fmt.Sprint("crash memory node ", i), Kind: "crash memory node", Target: "memory nodes",
			Start: func() error {
				mu.Lock()
				defer mu.Unlock()
				// Two copies: a second node lost before the first is
				// rebuilt would lose data for good. Crash one only
				// while the switch says every copy is in place.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ps, err := stat.PoolStat(ctx, s.Switch.String(), s.Fab)
				cancel()
				if err != nil || len(ps.Regions) != 1 || ps.Regions[0].Health != ctrl.HealthOK {
					return fmt.Errorf("%w: the key space is not whole (%+v, %v)", jepsen.ErrSkip, ps.Regions, err)
				}
				s.CrashMem(m)
				crashed = true
				return nil
			},
			Stop: func() error {
				if !crashed {
					return nil
				}
				crashed = false
				mu.Lock()
				defer mu.Unlock()
				return s.StartMem(m, time.Second)
			}})
	}
	fs = append(fs, jepsen.Fault{Name: "crash switch", Kind: "crash switch", Target: "switch",
		Start: func() error {
			mu.Lock()
			defer mu.Unlock()
			s.Srv.Close()
			return nil
		},
		Stop: func() error {
			mu.Lock()
			defer mu.Unlock()
			s.StartSwitch()
			return nil
		}})
	return fs
}

// kvRestart starts owner r again, every second while it cannot (the
// switch is down, or still counts the old one alive), for up to a
// minute.
func kvRestart(s *simKV, mu jepsen.ChanLock, r int) {
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		var err error
		if s.oeps[r] == nil {
			err = s.tryStartOwner(r)
		}
		mu.Unlock()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("seed %d: owner %d could not be started again: %v", s.seed, r, err)
			return
		}
		time.Sleep(time.Second)
	}
}
