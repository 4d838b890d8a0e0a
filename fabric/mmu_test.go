package fabric

import (
	"bytes"
	"cmp"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

func testKeys(seed uint64) func() uint64 {
	r := rand.New(rand.NewPCG(seed, 2))
	return r.Uint64
}

func nodeAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}), 4791)
}

// checkNodes verifies that the regions' extents on every node are disjoint,
// inside the node's capacity, and add up to its Used.
func checkNodes(t *testing.T, m *MMU) {
	t.Helper()
	type ext struct{ off, end uint64 }
	per := map[*PoolNode][]ext{}
	for _, r := range m.Regions() {
		for c, h := range r.Homes {
			n := roundPool(r.Layout.ColumnBytes(c))
			per[h.Node] = append(per[h.Node], ext{h.Base, h.Base + n})
		}
	}
	for _, node := range m.Nodes() {
		es := per[node]
		slices.SortFunc(es, func(a, b ext) int { return cmp.Compare(a.off, b.off) })
		var sum uint64
		for i, e := range es {
			if e.end > node.Capacity || (i > 0 && es[i-1].end > e.off) {
				t.Fatalf("node %d: extents overlap or overflow: %v (capacity %d)", node.ID, es, node.Capacity)
			}
			sum += e.end - e.off
		}
		if sum != node.Used() {
			t.Fatalf("node %d: regions hold %d bytes, Used says %d", node.ID, sum, node.Used())
		}
	}
}

// TestMMUCreateFree creates and frees regions at random and checks the
// nodes' bookkeeping after each step; at the end all memory is free and
// in one piece again.
func TestMMUCreateFree(t *testing.T) {
	const seed = 3
	r := rand.New(rand.NewPCG(seed, 3))
	m := NewMMU(testKeys(seed))
	for i := range 4 {
		if _, err := m.AddNode(nodeAddr(i), uint64(100+i), 8<<20, 1); err != nil {
			t.Fatal(err)
		}
	}
	var live []*PoolRegion
	for step := range 2000 {
		if len(live) > 0 && r.IntN(3) == 0 {
			k := r.IntN(len(live))
			if err := m.Free(live[k].ID, live[k].Key); err != nil {
				t.Fatalf("step %d: free: %v", step, err)
			}
			live = slices.Delete(live, k, k+1)
		} else {
			reps := 1 + r.IntN(2)
			reg, err := m.Create(1+r.Uint64N(1<<20), uint64(poolmap.MinStripe+8*r.IntN(1024)), r.IntN(5), reps, wire.PermAll)
			if errors.Is(err, ctrl.ErrNoSpace) || errors.Is(err, ctrl.ErrNoNodes) || errors.Is(err, poolmap.ErrLayout) {
				continue // refused: full, or two copies asked of one node
			}
			if err != nil {
				t.Fatalf("step %d: create: %v", step, err)
			}
			live = append(live, reg)
		}
		checkNodes(t, m)
	}
	for _, reg := range live {
		if err := m.Free(reg.ID, reg.Key); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range m.Nodes() {
		if n.Used() != 0 || len(n.free) != 1 || n.free[0] != (span{0, n.Capacity}) {
			t.Errorf("node %d after freeing everything: used %d, free %v", n.ID, n.Used(), n.free)
		}
	}
}

// TestMMUThroughStores writes and reads pool regions through real memory
// node stores, at random offsets and lengths, splitting accesses
// differently for writes and reads, on both copies of replicated regions.
func TestMMUThroughStores(t *testing.T) {
	const seed = 5
	r := rand.New(rand.NewPCG(seed, 5))
	m := NewMMU(testKeys(seed))
	stores := map[*PoolNode]*memnode.Store{}
	for i := range 3 {
		st, err := memnode.NewStore(memnode.Config{})
		if err != nil {
			t.Fatal(err)
		}
		key, err := st.Alloc(4<<20, wire.PermAll, 0)
		if err != nil {
			t.Fatal(err)
		}
		n, err := m.AddNode(nodeAddr(i), key, 4<<20, 1)
		if err != nil {
			t.Fatal(err)
		}
		stores[n] = st
	}
	exec := func(tg Target, op wire.Opcode, data []byte) []byte {
		h := wire.Header{Op: op, Key: tg.Key, Addr: tg.Addr, Operand1: tg.Len}
		res := stores[tg.Node].Exec(&h, data)
		if res.Status != wire.StatusOK {
			t.Fatalf("%v on node %d at %d: %v", op, tg.Node.ID, tg.Addr, res.Status)
		}
		return res.Data
	}
	for trial := range 40 {
		size := 1 + r.Uint64N(1<<20)
		reps := 1 + r.IntN(2)
		reg, err := m.Create(size, uint64(poolmap.MinStripe+8*r.IntN(512)), 0, reps, wire.PermAll)
		if err != nil {
			t.Fatal(err)
		}
		// The first write covers the region (a new region's memory holds
		// whatever the nodes had there), then random pieces.
		want := make([]byte, size)
		for w := range 30 {
			off := r.Uint64N(size)
			n := 1 + r.Uint64N(size-off)
			if w == 0 {
				off, n = 0, size
			}
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			copy(want[off:], data)
			for rep := range reps { // a replicated write goes to both copies
				tgs, err := m.Translate(reg.ID, reg.Key, wire.PermWrite, off, n, rep, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, tg := range tgs {
					exec(tg, wire.OpWrite, data[tg.Off-off:][:tg.Len])
				}
			}
		}
		for rep := range reps {
			got := make([]byte, 0, size)
			tgs, err := m.Translate(reg.ID, reg.Key, wire.PermRead, 0, size, rep, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tg := range tgs {
				got = append(got, exec(tg, wire.OpRead, nil)...)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("trial %d (%+v): copy %d reads back different bytes", trial, reg.Layout, rep)
			}
		}
		if err := m.Free(reg.ID, reg.Key); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMMURefusals: wrong key, freed region, missing permission and
// out-of-range accesses are refused with the wire status a client sees.
func TestMMURefusals(t *testing.T) {
	m := NewMMU(testKeys(9))
	if _, err := m.Create(1<<20, 4096, 0, 1, wire.PermAll); !errors.Is(err, ctrl.ErrNoNodes) {
		t.Errorf("no nodes: %v", err)
	}
	for i := range 2 {
		if _, err := m.AddNode(nodeAddr(i), uint64(7+i), 1<<20, 1); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := m.Create(64<<10, 4096, 0, 2, wire.PermRead)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := m.Create(4096, 4096, 1, 1, wire.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Free(gone.ID, gone.Key); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   uint32
		key  uint64
		need wire.Perm
		off  uint64
		n    uint64
		want wire.Status
	}{
		{ro.ID, ro.Key + 1, wire.PermRead, 0, 8, wire.StatusBadKey},
		{gone.ID, gone.Key, wire.PermRead, 0, 8, wire.StatusBadKey},
		{999, 1, wire.PermRead, 0, 8, wire.StatusBadKey},
		{ro.ID, ro.Key, wire.PermWrite, 0, 8, wire.StatusPermission},
		{ro.ID, ro.Key, wire.PermRead, 64 << 10, 1, wire.StatusOutOfBounds},
		{ro.ID, ro.Key, wire.PermRead, 1, 64 << 10, wire.StatusOutOfBounds},
	} {
		if _, err := m.Translate(c.id, c.key, c.need, c.off, c.n, 0, nil); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c, err, c.want)
		}
	}
	if err := m.Free(ro.ID, ro.Key^1); !errors.Is(err, wire.StatusBadKey) {
		t.Errorf("free with a wrong key: %v", err)
	}
	for _, bad := range []struct {
		cols, reps int
		perm       wire.Perm
	}{{3, 1, wire.PermAll}, {1, 2, wire.PermAll}, {0, 1, 0}, {0, 1, 0x80}} {
		if _, err := m.Create(4096, 4096, bad.cols, bad.reps, bad.perm); err == nil {
			t.Errorf("create %+v: no error", bad)
		}
	}
	if _, err := m.Create(4<<20, 4096, 0, 1, wire.PermAll); !errors.Is(err, ctrl.ErrNoSpace) {
		t.Errorf("4 MiB on 2 x 1 MiB: %v, want ctrl.ErrNoSpace", err)
	}
	checkNodes(t, m)
	if _, err := m.AddNode(netip.AddrPort{}, 1, 1, 1); !errors.Is(err, ErrPoolNode) {
		t.Errorf("bad node: %v", err)
	}
	if _, err := m.AddNode(nodeAddr(0), 99, 1<<20, 1); !errors.Is(err, ErrPoolNode) {
		t.Errorf("node re-registering with another region while in use: %v", err)
	}
}

// TestMMUNodeRestart: a node registering again in the same incarnation
// keeps its regions' copies; in another one (a restart) they are lost.
func TestMMUNodeRestart(t *testing.T) {
	m := NewMMU(func() uint64 { return 42 })
	for i := range 2 {
		if _, err := m.AddNode(nodeAddr(i), uint64(7+i), 1<<20, 5); err != nil {
			t.Fatal(err)
		}
	}
	r, err := m.Create(8192, 4096, 2, 1, wire.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	lost := func() []bool {
		var out []bool
		for s := range 2 {
			tg, err := m.Translate(r.ID, r.Key, wire.PermRead, uint64(s)*4096, 8, 0, nil)
			if err != nil || len(tg) != 1 {
				t.Fatal(err)
			}
			out = append(out, tg[0].Lost)
		}
		return out
	}
	if _, err := m.AddNode(nodeAddr(1), 8, 1<<20, 5); err != nil || slices.Contains(lost(), true) {
		t.Fatalf("heartbeat in the same incarnation: %v, lost %v", err, lost())
	}
	if _, err := m.AddNode(nodeAddr(1), 8, 1<<20, 6); err != nil {
		t.Fatal(err)
	}
	if got := lost(); got[0] || !got[1] {
		t.Fatalf("after node 1 restarted: lost %v, want [false true]", got)
	}
	// Restarted again, with another region key and more memory: accepted;
	// with less memory than its extents reach: refused.
	if _, err := m.AddNode(nodeAddr(1), 81, 1<<19, 7); !errors.Is(err, ErrPoolNode) {
		t.Errorf("restart with less memory: %v", err)
	}
	n, err := m.AddNode(nodeAddr(1), 81, 2<<20, 8)
	if err != nil || n.Key != 81 || n.Capacity != 2<<20 {
		t.Fatalf("restart with a new key and more memory: %v, %+v", err, n)
	}
	// The new memory is allocatable, and regions never overlap.
	if _, err := m.Create((2<<20)-8192, 64, 1, 1, wire.PermAll); err != nil {
		t.Fatalf("using the grown node: %v", err)
	}
	checkNodes(t, m)
}
