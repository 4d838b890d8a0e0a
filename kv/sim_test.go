package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

var testToken = []byte("kv test token")

// quietLog is the owners' log in tests: warnings and errors only.
var quietLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// simKV is a switch, memory nodes lending to its pool, a key space and
// its owners on a simulated network inside a synctest bubble.
type simKV struct {
	t    *testing.T
	seed int64
	net  *simnet.Network
	link simnet.LinkConfig
	swA  netip.AddrPort
	srv  *fabric.Server
	fab  endpoint.FabricOptions
	port int
	eps  []*endpoint.Endpoint // closed at the end
	reg  *pool.Region         // the key space, as its creator opened it
	mems []*simMem
	wg   sync.WaitGroup // the memory nodes' offers
	// switches counts the switch's restarts: each runs with its own
	// transport seed, as a real process draws its own.
	switches int
	// owners and oeps are the owner processes: process i serves rank
	// i mod the layout's Owners; with several per rank (perRank), all
	// start as standbys and the first to register holds the rank.
	perRank int
	// memStarts counts memory node starts (each its own transport seed).
	memStarts int
	layout    Layout
	owners    []*Owner
	oeps      []*endpoint.Endpoint
	cancel    []context.CancelFunc
}

const simSpace = "test"

// simStore runs f with a switch, nodes memory nodes of 4 MiB and a key
// space of layout l with its owners up.
func simStore(t *testing.T, seed int64, nodes int, l Layout, f func(t *testing.T, s *simKV)) {
	t.Helper()
	simStoreWith(t, seed, nodes, l, pool.AllocOptions{}, f)
}

// simStoreWith is simStore with the key space's region shaped by alloc.
func simStoreWith(t *testing.T, seed int64, nodes int, l Layout, alloc pool.AllocOptions, f func(t *testing.T, s *simKV)) {
	t.Helper()
	simStoreProcs(t, seed, nodes, l, alloc, 1, f)
}

// simStoreProcs is simStoreWith with perRank owner processes per rank.
func simStoreProcs(t *testing.T, seed int64, nodes int, l Layout, alloc pool.AllocOptions, perRank int, f func(t *testing.T, s *simKV)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		s := &simKV{t: t, seed: seed, net: simnet.New(seed), perRank: perRank, layout: l,
			link: simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond},
			swA:  netip.MustParseAddrPort("10.0.0.1:7471"), fab: endpoint.FabricOptions{Token: testToken}, port: 9000}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.net.Serve(ctx) }()
		sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(seed)}})
		if err != nil {
			t.Fatal(err)
		}
		s.srv = fabric.NewServer(s.net.ListenConn(s.swA, simnet.LinkConfig{}, simnet.LinkConfig{}), sw, nil)
		for range nodes {
			s.memoryNode(4 << 20)
		}
		pc := s.poolClient(s.endpoint())
		if s.reg, err = Create(s.ctx(), pc, l, alloc); err != nil {
			t.Fatal(err)
		}
		s.owners = make([]*Owner, perRank*l.Owners)
		s.oeps = make([]*endpoint.Endpoint, perRank*l.Owners)
		for i := range s.owners {
			s.startOwner(i)
		}
		defer func() {
			for r := range s.owners {
				s.crashOwner(r)
			}
			for _, c := range s.cancel {
				c()
			}
			for _, m := range s.mems {
				s.crashMem(m)
			}
			s.wg.Wait()
			for _, ep := range s.eps {
				ep.Close()
			}
			s.srv.Close()
			cancel()
			if err := <-served; !errors.Is(err, context.Canceled) {
				t.Errorf("seed %d: simnet: %v", seed, err)
			}
		}()
		f(t, s)
	})
}

func (s *simKV) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

func (s *simKV) addr() netip.AddrPort {
	s.port++
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, 1}), uint16(s.port))
}

func (s *simKV) endpoint() *endpoint.Endpoint {
	ep := s.newEndpoint(endpoint.Config{})
	s.eps = append(s.eps, ep)
	return ep
}

func (s *simKV) newEndpoint(cfg endpoint.Config) *endpoint.Endpoint {
	cfg.Transport = transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + uint64(s.port)}
	ep, err := endpoint.New(s.net.ListenConn(s.addr(), s.link, s.link), cfg, endpoint.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	return ep
}

// simMem is a memory node of the harness.
type simMem struct {
	addr   netip.AddrPort
	size   int
	node   *node.Node // nil while down
	cancel context.CancelFunc
}

// memoryNode starts a memory node lending size bytes.
func (s *simKV) memoryNode(size int) {
	m := &simMem{addr: s.addr(), size: size}
	s.mems = append(s.mems, m)
	if err := s.startMem(m, 10*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// startMem starts memory node m (again) at its address with empty
// memory, lending it to the switch; it waits at most wait for the
// switch to take the offer, and goes on offering it in the background.
func (s *simKV) startMem(m *simMem, wait time.Duration) error {
	// Each start draws its own transport seed, as a real process does: a
	// node restarted with its previous incarnation's sequence numbers
	// would be taken for that one's duplicates until the switch forgot it.
	s.memStarts++
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return err
	}
	key, err := st.Alloc(m.size, wire.PermAll, 0)
	if err != nil {
		return err
	}
	cfg := node.Config{Store: st, Pool: &server.PoolServe{Switch: s.swA, Key: key, Token: testToken},
		Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + 100000 + uint64(s.memStarts)}}
	nd, err := node.New(s.net.ListenConn(m.addr, s.link, s.link), cfg, node.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.node, m.cancel = nd, cancel
	// Offer the region until the switch takes it (a switch that still
	// holds the node's previous incarnation may take a few tries); from
	// then on Lend repeats the offer as the node's heartbeat, under
	// ctx.
	lent := make(chan error, 1)
	s.wg.Go(func() {
		var err error
		for ctx.Err() == nil {
			if _, err = nd.Lend(ctx, s.swA, key, uint64(m.size), s.fab); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		lent <- err
	})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-lent:
		return err
	case <-t.C:
		return nil // still offering it
	}
}

// crashMem stops memory node m at once; its memory is lost.
func (s *simKV) crashMem(m *simMem) {
	if m.node == nil {
		return
	}
	m.cancel()
	m.node.Close()
	m.node = nil
}

// restartSwitch starts a new switch at the switch's address (after
// s.srv.Close).
func (s *simKV) restartSwitch() {
	s.switches++
	sw, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: uint64(s.seed)*1000 + uint64(s.switches)}})
	if err != nil {
		s.t.Fatal(err)
	}
	s.srv = fabric.NewServer(s.net.ListenConn(s.swA, simnet.LinkConfig{}, simnet.LinkConfig{}), sw, nil)
}

func (s *simKV) poolClient(ep *endpoint.Endpoint) *pool.Client {
	pc, err := pool.New(ep, s.swA.String(), pool.Options{Fabric: s.fab})
	if err != nil {
		s.t.Fatal(err)
	}
	return pc
}

// startOwner starts owner process i on a fresh endpoint.
func (s *simKV) startOwner(i int) {
	if err := s.tryStartOwner(i); err != nil {
		s.t.Fatalf("seed %d: %v", s.seed, err)
	}
}

// tryStartOwner starts owner process i on a fresh endpoint; on failure
// it leaves it down.
func (s *simKV) tryStartOwner(i int) error {
	r := i % s.layout.Owners
	ep := s.newEndpoint(endpoint.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pool.New(ep, s.swA.String(), pool.Options{Fabric: s.fab})
	var reg *pool.Region
	if err == nil {
		reg, err = pc.Open(ctx, s.reg.ID(), s.reg.Key())
	}
	var o *Owner
	if err == nil {
		o, err = StartOwner(ctx, ep, reg, OwnerConfig{Switch: s.swA.String(), Fabric: s.fab, Space: simSpace, Rank: r,
			Standby: s.perRank > 1, Logger: quietLog})
	}
	if err != nil {
		ep.Close()
		return fmt.Errorf("owner %d (rank %d): %w", i, r, err)
	}
	s.owners[i], s.oeps[i] = o, ep
	return nil
}

func mustAddr(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// crashOwner cuts owner r off at once, as when its process dies.
func (s *simKV) crashOwner(r int) {
	if s.oeps[r] == nil {
		return
	}
	s.oeps[r].Close()
	s.owners[r].Close()
	s.owners[r], s.oeps[r] = nil, nil
}

func (s *simKV) client() *Client {
	ep := s.endpoint()
	c, err := Open(s.ctx(), ep, s.poolClient(ep), ClientConfig{Switch: s.swA.String(), Fabric: s.fab, Space: simSpace})
	if err != nil {
		s.t.Fatalf("seed %d: open: %v", s.seed, err)
	}
	return c
}

// TestSimOperations runs every operation against a key space of two
// owners and checks each answer, the versions, and the owners' use of
// their heaps.
func TestSimOperations(t *testing.T) {
	simStore(t, 1, 3, testLayout(), func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.ctx()
		if _, _, err := c.Get(ctx, []byte("a")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get of a missing key: %v", err)
		}
		v1, err := c.Set(ctx, []byte("a"), []byte("one"))
		if err != nil {
			t.Fatal(err)
		}
		val, ver, err := c.Get(ctx, []byte("a"))
		if err != nil || string(val) != "one" || ver != v1 {
			t.Fatalf("get: %q %d %v, want one %d", val, ver, err, v1)
		}
		if _, err := c.Add(ctx, []byte("a"), []byte("x")); !errors.Is(err, ErrExists) {
			t.Fatalf("add of a present key: %v", err)
		}
		if _, err := c.CompareAndSwap(ctx, []byte("a"), []byte("x"), v1+100); !errors.Is(err, ErrExists) {
			t.Fatalf("cas of another version: %v", err)
		}
		v2, err := c.CompareAndSwap(ctx, []byte("a"), []byte("two"), v1)
		if err != nil || v2 <= v1 {
			t.Fatalf("cas: %d %v", v2, err)
		}
		if val, _, _ := c.Get(ctx, []byte("a")); string(val) != "two" {
			t.Fatalf("after cas: %q", val)
		}
		if _, err := c.Set(ctx, []byte("n"), []byte("40")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Incr(ctx, []byte("n"), 2); err != nil || n != 42 {
			t.Fatalf("incr: %d %v", n, err)
		}
		if _, err := c.Incr(ctx, []byte("a"), 1); !errors.Is(err, ErrNotInteger) {
			t.Fatalf("incr of text: %v", err)
		}
		if err := c.Delete(ctx, []byte("a")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Get(ctx, []byte("a")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if err := c.Delete(ctx, []byte("a")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		big := make([]byte, c.Layout().MaxValue(1)+1)
		if _, err := c.Set(ctx, []byte("b"), big); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversize value: %v", err)
		}
		// Many keys, across shards and owners, with collisions in the
		// probe paths: each reads back.
		for i := range 150 {
			k := fmt.Appendf(nil, "key-%d", i)
			if _, err := c.Set(ctx, k, fmt.Appendf(nil, "value-%d", i)); err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
		}
		for i := range 150 {
			k := fmt.Appendf(nil, "key-%d", i)
			val, _, err := c.Get(ctx, k)
			if err != nil || string(val) != fmt.Sprintf("value-%d", i) {
				t.Fatalf("get %s: %q %v", k, val, err)
			}
		}
		var keys int
		for _, o := range s.owners {
			st := o.Stats()
			keys += st.Keys
			if st.Heap.UsedSlots != st.Keys {
				t.Errorf("owner: %d keys, %d slots used", st.Keys, st.Heap.UsedSlots)
			}
		}
		if keys != 151 {
			t.Errorf("owners hold %d keys, want 151", keys)
		}
	})
}

// TestSimOwnersDownReadsGoOn stops both owners: reads still succeed
// (they never touch an owner) while writes fail; restarted owners
// rebuild their index and heap from the region, keep every key, and
// reuse the space of values overwritten meanwhile.
func TestSimOwnersDownReadsGoOn(t *testing.T) {
	simStore(t, 2, 3, testLayout(), func(t *testing.T, s *simKV) {
		c := s.client()
		ctx := s.ctx()
		for i := range 40 {
			if _, err := c.Set(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Delete(ctx, []byte("k0")); err != nil {
			t.Fatal(err)
		}
		var before OwnerStats
		for r := range s.owners {
			st := s.owners[r].Stats()
			before.Keys += st.Keys
			before.Heap.UsedBytes += st.Heap.UsedBytes
			s.crashOwner(r)
		}
		for i := 1; i < 40; i++ {
			v, _, err := c.Get(ctx, fmt.Appendf(nil, "k%d", i))
			if err != nil || string(v) != fmt.Sprint("v", i) {
				t.Fatalf("owners down: get k%d: %q %v", i, v, err)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Set(wctx, []byte("k1"), []byte("x"))
		cancel()
		if err == nil {
			t.Fatal("a write succeeded with every owner down")
		}
		for r := range s.owners {
			s.startOwner(r)
		}
		var after OwnerStats
		for _, o := range s.owners {
			st := o.Stats()
			after.Keys += st.Keys
			after.Heap.UsedBytes += st.Heap.UsedBytes
		}
		if after.Keys != before.Keys || after.Heap.UsedBytes != before.Heap.UsedBytes || after.Keys != 39 {
			t.Fatalf("before the restart %d keys, %d bytes used; after %d keys, %d bytes", before.Keys, before.Heap.UsedBytes, after.Keys, after.Heap.UsedBytes)
		}
		// Overwrite every key many times: the heap (8 pages of 4 KiB
		// per shard) holds the live values only if freed slots are
		// reused.
		for round := range 30 {
			for i := 1; i < 40; i++ {
				if _, err := c.Set(ctx, fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "round %d value %d %0200d", round, i, 0)); err != nil {
					t.Fatalf("round %d: set k%d: %v", round, i, err)
				}
			}
		}
		v, _, err := c.Get(ctx, []byte("k7"))
		if err != nil || !strings.HasPrefix(string(v), "round 29 value 7 ") {
			t.Fatalf("get k7: %q %v", v, err)
		}
		if _, _, err := c.Get(ctx, []byte("k0")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted k0 after the restart: %v", err)
		}
	})
}
