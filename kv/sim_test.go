package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/simpool"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
)

var testToken = []byte("kv test token")

// quietLog is the owners' log in tests: warnings and errors only.
var quietLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// simKV is a switch, memory nodes lending to its pool, a key space and
// its owners on a simulated network inside a synctest bubble.
type simKV struct {
	*simpool.Fabric
	t    *testing.T
	seed int64
	reg  *pool.Region // the key space, as its creator opened it
	// owners and oeps are the owner processes: process i serves rank
	// i mod the layout's Owners; with several per rank (perRank), all
	// start as standbys and the first to register holds the rank.
	perRank int
	layout  Layout
	owners  []*Owner
	oeps    []*endpoint.Endpoint
	cancel  []context.CancelFunc
	incs    atomic.Uint64 // owner processes started
}

// simGrowAt is the owners' OwnerConfig.GrowAt in the simulated stores
// (0: the default); a test that sets it restores it.
var simGrowAt float64

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
	simStoreProcs(t, seed, nodes, l, alloc, 1, nil, f)
}

// simStoreProcs is simStoreWith with perRank owner processes per rank,
// on a fabric sealed under auth (nil: unsealed).
func simStoreProcs(t *testing.T, seed int64, nodes int, l Layout, alloc pool.AllocOptions, perRank int, auth *secure.Authority, f func(t *testing.T, s *simKV)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Logf("seed %d", seed)
		s := &simKV{Fabric: simpool.Start(t, simpool.Config{Seed: seed, Token: testToken, Nodes: nodes, Authority: auth}),
			t: t, seed: seed, perRank: perRank, layout: l}
		var err error
		pc := s.PoolClient(s.Endpoint())
		if s.reg, err = Create(s.Ctx(), pc, l, alloc); err != nil {
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
			s.Close()
		}()
		f(t, s)
	})
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
	o, ep, err := s.newOwner(i)
	if err != nil {
		return err
	}
	s.owners[i], s.oeps[i] = o, ep
	return nil
}

// newOwner starts owner process i on a fresh endpoint without making it
// the test's owner i.
func (s *simKV) newOwner(i int) (*Owner, *endpoint.Endpoint, error) {
	r := i % s.layout.Owners
	// On a sealed fabric the credential kv-SPACE/RANK may serve the space.
	ep := s.NewEndpointAs(endpoint.Config{}, secure.RoleMember, fmt.Sprintf("kv-%s/%d", simSpace, r))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pool.New(ep, s.Switch.String(), pool.Options{Fabric: s.Fab})
	var reg *pool.Region
	if err == nil {
		reg, err = pc.Open(ctx, s.reg.ID(), s.reg.Key())
	}
	var o *Owner
	if err == nil {
		o, err = StartOwner(ctx, ep, reg, OwnerConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace, Rank: r,
			Standby: s.perRank > 1, Logger: quietLog, Incarnation: s.nextIncarnation(), GrowAt: simGrowAt,
			Clients: []string{simClientScope}})
	}
	if err != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("owner %d (rank %d): %w", i, r, err)
	}
	return o, ep, nil
}

// nextIncarnation is a new owner process's incarnation, drawn from the
// seed so that a run replays.
func (s *simKV) nextIncarnation() uint64 {
	return uint64(s.seed)<<32 | s.incs.Add(1)
}

// crashOwner cuts owner r off at once, as when its process dies.
func (s *simKV) crashOwner(r int) {
	if s.oeps[r] == nil {
		return
	}
	s.oeps[r].Close()
	s.owners[r].Close()
	s.owners[r], s.oeps[r] = nil, nil
}

// simClientScope is the scope of the simulated fabric's clients
// (simpool's Endpoint: the client credential "client"), which the owners
// serve.
const simClientScope = "client"

func (s *simKV) client() *Client {
	ep := s.Endpoint()
	c, err := Open(s.Ctx(), ep, s.PoolClient(ep), ClientConfig{Switch: s.Switch.String(), Fabric: s.Fab, Space: simSpace})
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
		ctx := s.Ctx()
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
		ctx := s.Ctx()
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
