package kv

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/jepsen"
	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
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
// while a nemesis crashes and restarts the owners and the switch,
// makes the owners' and the clients' links lossy or cuts them, and
// pauses owners past a takeover (kvPause), several faults at once; the history is checked key by key with porcupine as
// linearizable registers (a delete writes "absent", a read of a missing
// key reads it). More seeds: KV_JEPSEN_SEEDS=FIRST-LAST. The key space
// keeps two copies, and the nemesis crashes memory nodes too (one at a
// time, each while every copy is in place; its memory is lost and
// rebuilt from the other copy), cuts their links (a node cut off keeps
// its memory) or makes them lossy. At the end, the owners stopped, both
// copies must hold the same bytes wherever readers read
// (checkCopiesAgree).
func TestSimJepsenKV(t *testing.T) {
	seeds, err := jepsen.SeedsFromEnv("KV_JEPSEN_SEEDS", 501)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenKV(t, seed, nil, copiedRun) })
	}
}

// kvRun is the key space of a Jepsen run.
type kvRun struct {
	layout Layout
	alloc  pool.AllocOptions
	nodes  int // memory nodes
}

// The runs' shards start with tables of 8 buckets that grow past a
// quarter full (growAt), so some shards of most seeds grow while the
// faults go on, their bigger tables written a few buckets at a time
// (jepsenGrowChunk) between writes.
const (
	growAt          = 0.25
	jepsenGrowChunk = 4
)

// copiedRun keeps two copies of every byte: a memory node may crash
// (its memory lost) and be rebuilt from the other copy.
var copiedRun = kvRun{layout: Layout{Shards: 8, Buckets: 8, MaxBuckets: 64, PageBytes: 4096, HeapBytes: 16 * 4096, Owners: 2},
	alloc: pool.AllocOptions{Replicas: 2}, nodes: 3}

// codedRun codes the key space 4+2 over six memory nodes: the nemesis
// crashes up to two of them at a time, so owners write around them and
// readers reconstruct, and at each crash's end restarts the node empty
// and rebuilds its shard while the owners write (kvRebuild).
var codedRun = kvRun{layout: Layout{Shards: 8, Buckets: 8, MaxBuckets: 64, PageBytes: 4096, HeapBytes: 16 * 4096, Owners: 2,
	Code: Coding{K: 4, M: 2, Shard: 4096}}, nodes: 6}

// TestSimJepsenKVCoded is TestSimJepsenKV on an erasure-coded key space
// (codedRun). More seeds: KV_JEPSEN_CODED_SEEDS=FIRST-LAST.
func TestSimJepsenKVCoded(t *testing.T) {
	seeds, err := jepsen.SeedsFromEnv("KV_JEPSEN_CODED_SEEDS", 581)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenKV(t, seed, nil, codedRun) })
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
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenKV(t, seed, auth, copiedRun) })
	}
}

// TestSimJepsenKVRepeats: a seed run twice gives the same history totals
// and the same traffic, datagram for datagram: the simulation replays
// from its seed, processes' timers, heartbeats and handlers' replies
// included, and an owner's handlers woken at one instant (their writes
// cut short by one lease end, say) go on in the order of their shards
// (endpoint.Gate). Seeds 502 and 509 drifted before that order: their
// owners' handlers raised the fence and read their shards again at one
// instant.
func TestSimJepsenKVRepeats(t *testing.T) {
	auth, err := secure.NewAuthority([]byte("kv sealed run 543"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		seed int64
		auth *secure.Authority
	}{{502, nil}, {509, nil}, {543, auth}} {
		var runs [2]string
		for i := range runs {
			t.Run(fmt.Sprintf("seed%d/run%d", c.seed, i), func(t *testing.T) { runs[i] = jepsenKV(t, c.seed, c.auth, copiedRun) })
		}
		if runs[0] == "" || runs[0] != runs[1] {
			t.Errorf("seed %d gave\n%s\nthen\n%s", c.seed, runs[0], runs[1])
		}
	}
}

// jepsenKV runs one seed of run and returns the checker's report and a
// digest of the network's traffic from the clients' start on (each
// datagram's time, kind, ends and length; and its header, unless sealed:
// a sealed datagram's ciphertext differs from run to run).
func jepsenKV(t *testing.T, seed int64, auth *secure.Authority, run kvRun) (report string) {
	var (
		h       *jepsen.History
		traffic = sha256.New()
	)
	defer func() {
		// Porcupine times its search with real timers: check outside the
		// bubble.
		if h == nil {
			return
		}
		r := jepsen.Check(h, jepsen.CheckOptions{Timeout: time.Minute})
		report = fmt.Sprintf("%v\ntraffic %x", r, traffic.Sum(nil))
		t.Logf("seed %d:\n%v", seed, r)
		if !r.OK() {
			t.Errorf("seed %d: the history is not linearizable", seed)
		}
		if r.Reads.OK == 0 || r.Writes.OK == 0 {
			t.Errorf("seed %d: nothing was read or written: %v", seed, r)
		}
	}()
	savedAt, savedChunk := simGrowAt, growChunk
	simGrowAt, growChunk = growAt, jepsenGrowChunk
	defer func() { simGrowAt, growChunk = savedAt, savedChunk }()
	// Two owner processes per rank: when the holder of a rank crashes
	// or is cut off, the other takes the rank over.
	simStoreProcs(t, seed, run.nodes, run.layout, run.alloc, 2, auth, func(t *testing.T, s *simKV) {
		s.Net.Locked(func() {
			trace := s.Net.Trace // NDMA_SIM_TRACE's, if set
			s.Net.Trace = func(ev simnet.TraceEvent) {
				if trace != nil {
					trace(ev)
				}
				if ev.Kind == simnet.TracePoll {
					return
				}
				var h wire.Header
				if _, _, err := wire.Parse(ev.Buf, &h); auth != nil || err != nil {
					fmt.Fprintln(traffic, ev)
				} else {
					fmt.Fprintln(traffic, ev, h.Op, h.Mode, h.Flags, h.MsgID, h.PSN, h.Group, h.Addr, h.Operand1, h.Operand2, h.Status)
				}
			}
		})
		h = jepsen.NewHistory(nil)
		var clients []*kvClient
		for range kvClients {
			c := &kvClient{s: s}
			c.start()
			clients = append(clients, c)
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
			cs = addClientStats(cs, c.stats())
		}
		t.Logf("seed %d: cached reads %d, stale locations %d, probe walks %d", seed, cs.CacheHits, cs.CacheStale, cs.CacheMisses)
		t.Logf("seed %d: values written one-sidedly %d", seed, cs.OneSided)
		if cs.Corrupt != 0 {
			// Every value is written whole before its entry points at
			// it (and a coded row's shards agree once its write is
			// done), so no GET of these clients finds one corrupt.
			t.Errorf("seed %d: %d GETs found the value their entry points at corrupt", seed, cs.Corrupt)
		}
		if run.layout.Code.K == 0 && cs.OneSided == 0 {
			t.Errorf("seed %d: no value was written one-sidedly", seed)
		}
		t.Logf("seed %d: fenced pool writes refused by the switch since it last started: %d", seed, s.Srv.Stats().PoolFenced)
		t.Logf("seed %d: shards' table generations at the end: %v", seed, s.tableGens(t))
		if cs.CacheHits == 0 || cs.CacheStale == 0 {
			t.Errorf("seed %d: the location cache was not exercised (%d hits, %d stale)", seed, cs.CacheHits, cs.CacheStale)
		}
		for k := range kvKeys {
			c, ctx := clients[0].current()
			kvOp(ctx, c, h, kvClients, fmt.Sprint("k", k), 0, nil)
		}
		for _, c := range clients {
			c.crash() // their endpoints closed before the network
		}
		if !run.layout.Code.coded() && run.alloc.Replicas > 1 {
			checkCopiesAgree(t, s)
		}
	})
	return report // set by the deferred check
}

// jepsenOneSidedFrom is the clients' ClientConfig.OneSidedFrom in the
// Jepsen runs: half the values they set are longer, and go one-sidedly
// (in a key space that is not erasure-coded).
const jepsenOneSidedFrom = 256

// kvWork is one client's loop: reads half the time, sets with values
// no other write uses (every other one long enough to be written
// one-sidedly), and deletes.
func kvWork(seed int64, id int, kc *kvClient, h *jepsen.History, stop <-chan struct{}) {
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
		x := rng.IntN(20)
		c, ctx := kc.current()
		if c == nil {
			continue // crashed: waiting for its restart
		}
		switch {
		case x < 10:
			kvOp(ctx, c, h, id, key, 0, nil)
		case x < 17:
			val := fmt.Appendf(nil, "client %d write %d", id, n)
			if n%2 == 1 {
				// Past the clients' OneSidedFrom: written one-sidedly
				// into space the owner reserves.
				val = append(val, bytes.Repeat([]byte{'.'}, jepsenOneSidedFrom+44-len(val))...)
			}
			kvOp(ctx, c, h, id, key, 1, val)
		default:
			kvOp(ctx, c, h, id, key, 2, nil)
		}
	}
}

// kvOp does one operation (0 read, 1 set, 2 delete) and records it: a
// value is its Digest, absence 0.
func kvOp(ctx context.Context, c *Client, h *jepsen.History, id int, key string, op int, val []byte) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
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

// kvClient is a client process of the Jepsen run: crash closes its
// endpoint and ends its calls (a write in flight then ends of unknown
// outcome, or failed if it never left), start opens a new one.
type kvClient struct {
	s      *simKV
	mu     sync.Mutex
	c      *Client // nil while crashed
	ep     *endpoint.Endpoint
	ctx    context.Context
	cancel context.CancelFunc
	past   ClientStats // of the crashed incarnations
}

// start opens a new incarnation, trying every second for up to a
// minute while no owner or no switch answers (a fault still active).
func (k *kvClient) start() {
	var (
		ep  *endpoint.Endpoint
		c   *Client
		err error
	)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		ep = k.s.NewEndpoint(endpoint.Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err = Open(ctx, ep, k.s.PoolClient(ep), ClientConfig{Switch: k.s.Switch.String(), Fabric: k.s.Fab, Space: simSpace,
			OneSidedFrom: jepsenOneSidedFrom})
		cancel()
		if err == nil {
			break
		}
		ep.Close()
		if time.Now().After(deadline) {
			k.s.t.Errorf("seed %d: a client could not start again: %v", k.s.seed, err)
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.crash() // an incarnation that started while it was crashed again
	k.mu.Lock()
	k.c, k.ep, k.ctx, k.cancel = c, ep, ctx, cancel
	k.mu.Unlock()
}

func (k *kvClient) crash() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c == nil {
		return
	}
	k.cancel()
	k.ep.Close()
	k.past = addClientStats(k.past, k.c.Stats())
	k.c, k.ep = nil, nil
}

// current is the client and the context its calls run under (nil while
// crashed).
func (k *kvClient) current() (*Client, context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c, k.ctx
}

func (k *kvClient) addr() (netip.AddrPort, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ep == nil {
		return netip.AddrPort{}, false
	}
	return k.ep.LocalAddr(), true
}

// stats sums the cache counters of every incarnation.
func (k *kvClient) stats() ClientStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.past
	if k.c != nil {
		st = addClientStats(st, k.c.Stats())
	}
	return st
}

// addClientStats adds the counters of b to a.
func addClientStats(a, b ClientStats) ClientStats {
	a.CacheHits, a.CacheStale, a.CacheMisses = a.CacheHits+b.CacheHits, a.CacheStale+b.CacheStale, a.CacheMisses+b.CacheMisses
	a.OneSided += b.OneSided
	a.Corrupt += b.Corrupt
	return a
}

// kvFaultsOf are the faults the nemesis draws from.
func kvFaultsOf(s *simKV, mu jepsen.ChanLock, restarts *sync.WaitGroup, clients []*kvClient) []jepsen.Fault {
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
			lossy("cut "+target, "cut link", target, addr, 1),
			kvPause(s, mu, r, target))
	}
	for i, c := range clients {
		target := fmt.Sprint("client ", i)
		crashed := false
		fs = append(fs, lossy("loss "+target, "lossy link", target, c.addr, kvLossy),
			jepsen.Fault{Name: "crash " + target, Kind: "crash client", Target: target,
				Start: func() error {
					c.crash()
					crashed = true
					return nil
				},
				Stop: func() error {
					if crashed {
						crashed = false
						restarts.Go(func() {
							// At an instant of its own (see kvRestart).
							time.Sleep(time.Duration(100+i) * time.Microsecond)
							c.start()
						})
					}
					return nil
				}})
	}
	fs = append(fs, memFaults(s, mu, restarts)...)
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

// memFaults are the memory nodes' faults: with two copies, one node at
// a time (a shared target) crashed (restarted empty and rebuilt by the
// switch from the other copy), cut off (back with its memory) or lossy;
// in an erasure-coded key space, up to M nodes crashed, each restarted
// empty at the fault's end and its shard rebuilt (kv.RebuildShards)
// while the owners write and the other faults go on (kvRebuild).
func memFaults(s *simKV, mu jepsen.ChanLock, restarts *sync.WaitGroup) []jepsen.Fault {
	var fs []jepsen.Fault
	stat := s.Endpoint()
	down := 0                  // coded: nodes down or not yet rebuilt (under mu)
	var crashed []*simpool.Mem // coded: crashed, not yet restarted
	for i, m := range s.Mems {
		if s.layout.Code.coded() {
			fs = append(fs, jepsen.Fault{Name: fmt.Sprint("crash memory node ", i), Kind: "crash memory node", Target: fmt.Sprint("memory node ", i),
				Start: func() error {
					mu.Lock()
					defer mu.Unlock()
					if down == s.layout.Code.M || m.Node == nil {
						return fmt.Errorf("%w: %d memory nodes down already", jepsen.ErrSkip, down)
					}
					s.CrashMem(m)
					down++
					crashed = append(crashed, m)
					return nil
				},
				Stop: func() error {
					if j := slices.Index(crashed, m); j >= 0 {
						crashed = slices.Delete(crashed, j, j+1)
						restarts.Go(func() {
							if kvRebuild(s, mu, m, i) {
								mu.Lock()
								down--
								mu.Unlock()
							}
						})
					}
					return nil
				}})
			continue
		}
		// One memory node down, cut off or lossy at a time (a shared
		// target): the region keeps two copies, so one copy is always
		// there. A node cut off keeps its memory: counted dead, its
		// copies are read again when it is back, if no write went
		// around it meanwhile (a copy that disagrees with the other
		// would then show).
		whole := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ps, err := stat.PoolStat(ctx, s.Switch.String(), s.Fab)
			cancel()
			if err != nil || len(ps.Regions) != 1 || ps.Regions[0].Health != ctrl.HealthOK {
				return fmt.Errorf("%w: the key space is not whole (%+v, %v)", jepsen.ErrSkip, ps.Regions, err)
			}
			return nil
		}
		addr := func() (netip.AddrPort, bool) { return m.Addr, m.Node != nil }
		for _, lf := range []jepsen.Fault{
			jepsen.LinkFault(fmt.Sprint("cut memory node ", i), "cut link", "memory nodes", mu, addr, 1, s.SetLoss),
			jepsen.LinkFault(fmt.Sprint("loss memory node ", i), "lossy link", "memory nodes", mu, addr, kvLossy, s.SetLoss),
		} {
			start := lf.Start
			lf.Start = func() error {
				mu.Lock()
				err := whole()
				mu.Unlock()
				if err != nil {
					return err
				}
				return start()
			}
			fs = append(fs, lf)
		}
		crashed := false
		fs = append(fs, jepsen.Fault{Name: fmt.Sprint("crash memory node ", i), Kind: "crash memory node", Target: "memory nodes",
			Start: func() error {
				mu.Lock()
				defer mu.Unlock()
				// Two copies: a second node lost before the first is
				// rebuilt would lose data for good. Crash one only
				// while the switch says every copy is in place.
				if err := whole(); err != nil {
					return err
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
	return fs
}

// kvRebuild restarts memory node m (crashed, its memory lost) and
// rebuilds the key space's shards it held with RebuildShards while the
// owners write, again while the rebuild fails (an owner rank with no
// process serving it, a column's rebuild cut short), for up to a minute.
// It reports whether the node's shards were rebuilt. i is the node's
// index: restarts ending at one instant go on at instants of their own,
// in the nodes' order.
func kvRebuild(s *simKV, mu jepsen.ChanLock, m *simpool.Mem, i int) bool {
	time.Sleep(time.Duration(50+i) * time.Microsecond)
	mu.Lock()
	err := s.StartMem(m, time.Second)
	mu.Unlock()
	if err != nil {
		s.t.Logf("seed %d: memory node %v not restarted: %v", s.seed, m.Addr, err)
		return false
	}
	ep := s.Endpoint()
	defer ep.Close()
	cfg := ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rebuilt, unreachable, err := RebuildShards(ctx, ep, s.reg, cfg)
		cancel()
		s.t.Logf("seed %d: rebuild after memory node %v restarted: %v rebuilt, %v unreachable, %v", s.seed, m.Addr, rebuilt, unreachable, err)
		if err == nil && len(unreachable) == 0 {
			return true
		}
	}
	return false
}

// kvPause pauses owner process r: every pool write it is about to send
// waits (its lease already checked) and its link is cut, so that the
// switch counts it dead and the other process of its rank takes over;
// at the end the link heals and the waiting writes go out, past any
// deadline (as from a process stopped inside its endpoint). The fence
// must refuse them once the new holder raised it.
func kvPause(s *simKV, mu jepsen.ChanLock, r int, target string) jepsen.Fault {
	type waiter struct {
		off  uint64
		done chan struct{}
	}
	var (
		paused  *Owner
		addr    netip.AddrPort
		wmu     sync.Mutex
		waiters []waiter
	)
	return jepsen.Fault{Name: "pause " + target, Kind: "pause owner", Target: target,
		Start: func() error {
			mu.Lock()
			defer mu.Unlock()
			if s.owners[r] == nil {
				return fmt.Errorf("%w: %s is down", jepsen.ErrSkip, target)
			}
			paused, addr = s.owners[r], s.oeps[r].LocalAddr()
			setBeforeWrite(paused, func(ctx context.Context, off uint64, _ int) context.Context {
				w := waiter{off, make(chan struct{})}
				wmu.Lock()
				waiters = append(waiters, w)
				wmu.Unlock()
				<-w.done
				return context.WithoutCancel(ctx)
			})
			s.SetLoss(addr, 1)
			return nil
		},
		Stop: func() error {
			if paused == nil { // not when Start skipped it
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			s.SetLoss(addr, 0)
			setBeforeWrite(paused, nil)
			// The waiting writes go out one instant apart, by offset,
			// so that a run replays from its seed.
			wmu.Lock()
			slices.SortFunc(waiters, func(a, b waiter) int { return cmp.Compare(a.off, b.off) })
			for i, w := range waiters {
				time.AfterFunc(time.Duration(i+1)*time.Microsecond, func() { close(w.done) })
			}
			waiters = nil
			wmu.Unlock()
			paused = nil
			return nil
		}}
}

// kvRestart starts owner r again, every second while it cannot (the
// switch is down, or still counts the old one alive), for up to a
// minute. Nothing else starts owner r meanwhile (its crash fault is
// healed only once).
func kvRestart(s *simKV, mu jepsen.ChanLock, r int) {
	deadline := time.Now().Add(time.Minute)
	// Restarts that begin at one instant try at instants of their own,
	// so that the order they take addresses in is the seed's.
	time.Sleep(time.Duration(r+1) * time.Microsecond)
	for {
		mu.Lock()
		up := s.oeps[r] != nil
		mu.Unlock()
		if up {
			return
		}
		// Outside the nemesis's lock: a start may wait seconds for the
		// switch, and the nemesis's faults go on meanwhile.
		o, ep, err := s.newOwner(r)
		if err == nil {
			mu.Lock()
			s.owners[r], s.oeps[r] = o, ep
			mu.Unlock()
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("seed %d: owner %d could not be started again: %v", s.seed, r, err)
			return
		}
		time.Sleep(time.Second)
	}
}
