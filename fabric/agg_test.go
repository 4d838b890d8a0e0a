package fabric

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/reduce/reducetest"
	"github.com/ndma/ndma/wire"
)

func newTestPool(t testing.TB, cfg PoolConfig) *AggPool {
	t.Helper()
	p, err := NewAggPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// i64s encodes vs as little-endian int64 elements.
func i64s(vs ...int64) []byte {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

// checkPoolInvariants checks the bookkeeping that must hold between calls.
func checkPoolInvariants(t testing.TB, p *AggPool) {
	t.Helper()
	inUse := 0
	groups := map[uint32]int{}
	var reserved int64
	for i := range p.slots {
		s := &p.slots[i]
		if s.state == aggFree {
			continue
		}
		inUse++
		groups[s.key.Group]++
		reserved += s.reserve
		if j, ok := p.index[s.key]; !ok || int(j) != i {
			t.Fatalf("slot %d key %+v not indexed", i, s.key)
		}
	}
	if inUse != len(p.index) || inUse+len(p.free) != len(p.slots) {
		t.Fatalf("in use %d, index %d, free %d, slots %d", inUse, len(p.index), len(p.free), len(p.slots))
	}
	if len(groups) != len(p.groups) {
		t.Fatalf("groups %v, pool says %v", groups, p.groups)
	}
	for g, n := range groups {
		if p.groups[g] != n {
			t.Fatalf("group %d: %d slots, pool says %d", g, n, p.groups[g])
		}
	}
	if reserved != p.reserved || p.reserved > p.cfg.MaxBytes {
		t.Fatalf("reserved %d, pool says %d (max %d)", reserved, p.reserved, p.cfg.MaxBytes)
	}
	if pooled, allocated := p.bufs.FreeBytes(), p.bufs.Allocated(); allocated > p.cfg.MaxBytes || pooled > allocated {
		t.Fatalf("allocated %d, pooled %d, max %d", allocated, pooled, p.cfg.MaxBytes)
	}
	// The open slots, and only they, are on the list Oldest reads, once.
	open := 0
	for i := range p.slots {
		if p.slots[i].state == aggOpen {
			open++
		}
	}
	n, prev := 0, int32(-1)
	for i := p.oldest; i >= 0; prev, i = i, p.slots[i].newer {
		if s := &p.slots[i]; s.state != aggOpen || s.older != prev || n > open {
			t.Fatalf("open list broken at slot %d (state %d, older %d, want %d)", i, s.state, s.older, prev)
		}
		n++
	}
	if n != open || p.newest != prev {
		t.Fatalf("open list holds %d slots (newest %d, last %d); %d are open", n, p.newest, prev, open)
	}
}

// TestAggEveryDtypeAlu reduces random chunks with every dtype and alu in
// both modes, against the naive reference of reduce_test.go: in arrival
// order for non-deterministic slots, in member order for deterministic
// ones, where several arrival orders must give identical bytes.
func TestAggEveryDtypeAlu(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 2))
	p := newTestPool(t, PoolConfig{Slots: 4, SlotBytes: 1024})
	const members = 7
	op := uint64(0)
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			data := make([][]byte, members)
			for m := range data {
				data[m] = make([]byte, 1000/dt.Size()*dt.Size())
				reducetest.Rand(rng, data[m], dt)
			}
			memberRef := slices.Clone(data[0])
			for m := 1; m < members; m++ {
				reducetest.Ref(memberRef, data[m], dt, alu)
			}
			var detResult []byte
			for run := 0; run < 6; run++ {
				for _, det := range []bool{false, true} {
					op++
					key := AggKey{Group: 1, Op: op}
					order := rng.Perm(members)
					var got []byte
					for i, m := range order {
						c := &Contribution{Key: key, Member: m, Members: members, Dtype: dt, Alu: alu, Deterministic: det, Data: data[m]}
						st, res := p.Contribute(c)
						if i > 0 && rng.IntN(2) == 0 { // a retransmission of an earlier contribution
							dup := *c
							dup.Member = order[rng.IntN(i)]
							dup.Data = data[dup.Member]
							if st2, _ := p.Contribute(&dup); st2 != ContribDuplicate && !(st2 == ContribDone && i == members-1) {
								t.Fatalf("seed %d: duplicate got %v", seed, st2)
							}
						}
						if i < members-1 {
							if st != ContribAccepted || res != nil {
								t.Fatalf("seed %d: %v %v det=%v contribution %d: %v", seed, dt, alu, det, i, st)
							}
							continue
						}
						if st != ContribComplete {
							t.Fatalf("seed %d: %v %v det=%v last contribution: %v", seed, dt, alu, det, st)
						}
						got = slices.Clone(res)
						if !bytes.Equal(p.Result(key), res) {
							t.Fatalf("seed %d: Result differs from returned result", seed)
						}
					}
					if det {
						if !reducetest.Same(got, memberRef, dt) {
							t.Fatalf("seed %d: %v %v deterministic order %v: result differs from member-order reference", seed, dt, alu, order)
						}
						if detResult != nil && !bytes.Equal(got, detResult) {
							t.Fatalf("seed %d: %v %v deterministic results differ between arrival orders", seed, dt, alu)
						}
						detResult = got
					} else {
						want := slices.Clone(data[order[0]])
						for _, m := range order[1:] {
							reducetest.Ref(want, data[m], dt, alu)
						}
						if !reducetest.Same(got, want, dt) {
							t.Fatalf("seed %d: %v %v order %v: result differs from arrival-order reference", seed, dt, alu, order)
						}
					}
					p.Release(key)
					checkPoolInvariants(t, p)
				}
			}
		}
	}
	if st := p.Stats(); st.InUse != 0 || st.Completions != 4*4*12 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAggDuplicatesAndDone(t *testing.T) {
	for _, det := range []bool{false, true} {
		p := newTestPool(t, PoolConfig{Slots: 2})
		key := AggKey{Group: 3, Op: 9, Offset: 8192}
		c := func(m int, v int64) *Contribution {
			return &Contribution{Key: key, Member: m, Members: 3, Dtype: wire.DtypeI64, Alu: wire.AluAdd, Deterministic: det, Data: i64s(v, -v)}
		}
		steps := []struct {
			m    int
			v    int64
			want ContribStatus
		}{
			{2, 100, ContribAccepted},
			{2, 100, ContribDuplicate},
			{2, 555, ContribDuplicate}, // different data, same member: still not added
			{1, 10, ContribAccepted},
			{1, 10, ContribDuplicate},
			{0, 1, ContribComplete},
			{0, 1, ContribDone},
			{2, 100, ContribDone},
		}
		for i, s := range steps {
			st, res := p.Contribute(c(s.m, s.v))
			if st != s.want {
				t.Fatalf("det=%v step %d: got %v want %v", det, i, st, s.want)
			}
			if st == ContribComplete && !bytes.Equal(res, i64s(111, -111)) {
				t.Fatalf("det=%v: result %v", det, res)
			}
			if st != ContribComplete && res != nil {
				t.Fatalf("det=%v step %d: non-nil result with %v", det, i, st)
			}
		}
		if !bytes.Equal(p.Result(key), i64s(111, -111)) {
			t.Fatalf("det=%v: Result after done: %v", det, p.Result(key))
		}
		st := p.Stats()
		if st.Contributions != 3 || st.Completions != 1 || st.Duplicates != 5 || st.InUse != 1 || st.Slots != 2 {
			t.Fatalf("det=%v: stats %+v", det, st)
		}
		p.Release(key)
		if p.Result(key) != nil || p.Stats().InUse != 0 {
			t.Fatal("slot not released")
		}
		p.Release(key) // unknown: ignored
		checkPoolInvariants(t, p)
	}
}

func TestAggNoSlotAndRelease(t *testing.T) {
	p := newTestPool(t, PoolConfig{Slots: 3})
	c := func(op uint64, m int) *Contribution {
		return &Contribution{Key: AggKey{Group: 1, Op: op}, Member: m, Members: 2, Dtype: wire.DtypeI32, Alu: wire.AluMax, Data: []byte{1, 0, 0, 0}}
	}
	for op := uint64(1); op <= 3; op++ {
		if st, _ := p.Contribute(c(op, 0)); st != ContribAccepted {
			t.Fatalf("op %d: %v", op, st)
		}
	}
	if st, _ := p.Contribute(c(4, 0)); st != ContribNoSlot {
		t.Fatalf("full pool: %v", st)
	}
	// Existing slots still progress while the pool is full.
	if st, _ := p.Contribute(c(2, 1)); st != ContribComplete {
		t.Fatalf("existing slot in a full pool: %v", st)
	}
	if st, _ := p.Contribute(c(4, 0)); st != ContribNoSlot {
		t.Fatalf("complete slots still hold their slot: %v", st)
	}
	p.Release(AggKey{Group: 1, Op: 2})
	if st, _ := p.Contribute(c(4, 0)); st != ContribAccepted {
		t.Fatalf("after release: %v", st)
	}
	if st := p.Stats(); st.NoSlot != 2 || st.InUse != 3 {
		t.Fatalf("stats %+v", st)
	}
	checkPoolInvariants(t, p)
}

// TestAggFairShare: three groups compete for a 12-slot pool.
func TestAggFairShare(t *testing.T) {
	p := newTestPool(t, PoolConfig{Slots: 12})
	open := func(g uint32, op uint64) ContribStatus {
		st, _ := p.Contribute(&Contribution{Key: AggKey{Group: g, Op: op}, Member: 0, Members: 2, Dtype: wire.DtypeF32, Alu: wire.AluAdd, Data: make([]byte, 64)})
		return st
	}

	// A lone group can take every slot.
	if s := p.Share(7); s != 12 {
		t.Fatalf("lone share %d", s)
	}
	for op := uint64(0); op < 12; op++ {
		if st := open(7, op); st != ContribAccepted {
			t.Fatalf("lone group slot %d: %v", op, st)
		}
	}
	if st := open(7, 12); st != ContribNoSlot {
		t.Fatalf("13th slot: %v", st)
	}
	if n := p.ReleaseGroup(7); n != 12 {
		t.Fatalf("ReleaseGroup freed %d", n)
	}

	// All three active: 4 each, whatever the interleaving.
	groups := []uint32{1, 2, 3}
	for op := uint64(0); op < 10; op++ {
		for _, g := range groups {
			st := open(g, op)
			if want := ContribAccepted; op >= 4 {
				want = ContribNoSlot
				if st != want {
					t.Fatalf("group %d op %d: %v", g, op, st)
				}
			} else if st != want {
				t.Fatalf("group %d op %d: %v", g, op, st)
			}
		}
	}
	for _, g := range groups {
		if p.InUse(g) != 4 || p.Share(g) != 4 {
			t.Fatalf("group %d: in use %d share %d", g, p.InUse(g), p.Share(g))
		}
	}
	if p.Share(99) != 3 {
		t.Fatalf("share of a fourth group: %d", p.Share(99))
	}
	checkPoolInvariants(t, p)

	// Group 3 leaves: the other two may grow to 6 each.
	p.ReleaseGroup(3)
	for _, g := range groups[:2] {
		for op := uint64(100); op < 102; op++ {
			if st := open(g, op); st != ContribAccepted {
				t.Fatalf("group %d growing: %v", g, st)
			}
		}
		if st := open(g, 200); st != ContribNoSlot {
			t.Fatalf("group %d beyond 6: %v", g, st)
		}
	}

	// A hog keeps what it holds but, once another group holds a slot,
	// opens nothing more until it is under its share: freed slots go to
	// the newcomer. (A group that holds nothing is not counted in the
	// others' shares: it must win a free slot first.)
	p.ReleaseGroup(1)
	p.ReleaseGroup(2)
	for op := uint64(0); op < 12; op++ {
		open(5, op)
	}
	if st := open(6, 0); st != ContribNoSlot {
		t.Fatalf("newcomer with no free slot: %v", st)
	}
	if p.Share(6) != 6 || p.Share(5) != 12 {
		t.Fatalf("shares %d %d", p.Share(5), p.Share(6))
	}
	p.Release(AggKey{Group: 5, Op: 0})
	if st := open(6, 0); st != ContribAccepted {
		t.Fatalf("newcomer after a release: %v", st)
	}
	if p.Share(5) != 6 {
		t.Fatalf("hog share %d", p.Share(5))
	}
	p.Release(AggKey{Group: 5, Op: 1})
	if st := open(5, 50); st != ContribNoSlot {
		t.Fatalf("hog reopened above its share: %v", st)
	}
	if st := open(6, 1); st != ContribAccepted {
		t.Fatalf("newcomer's second slot: %v", st)
	}
	checkPoolInvariants(t, p)
}

func TestAggMismatch(t *testing.T) {
	p := newTestPool(t, PoolConfig{Slots: 4, SlotBytes: 64})
	key := AggKey{Group: 1, Op: 1}
	base := Contribution{Key: key, Member: 0, Members: 4, Dtype: wire.DtypeF64, Alu: wire.AluMin, Data: make([]byte, 32)}
	if st, _ := p.Contribute(&base); st != ContribAccepted {
		t.Fatalf("first: %v", st)
	}
	cases := []struct {
		name    string
		invalid bool // invalid in itself, not only against the slot
		mod     func(c *Contribution)
	}{
		{"length", false, func(c *Contribution) { c.Data = make([]byte, 24) }},
		{"dtype", false, func(c *Contribution) { c.Dtype = wire.DtypeI64 }},
		{"alu", false, func(c *Contribution) { c.Alu = wire.AluMax }},
		{"members", false, func(c *Contribution) { c.Members = 5 }},
		{"determinism", false, func(c *Contribution) { c.Deterministic = true }},
		{"bad dtype", true, func(c *Contribution) { c.Dtype = wire.DtypeNone }},
		{"unknown dtype", true, func(c *Contribution) { c.Dtype = 9 }},
		{"bad alu", true, func(c *Contribution) { c.Alu = wire.AluNone }},
		{"unknown alu", true, func(c *Contribution) { c.Alu = 5 }},
		{"partial element", true, func(c *Contribution) { c.Data = make([]byte, 33) }},
		{"member negative", true, func(c *Contribution) { c.Member = -1 }},
		{"member >= members", true, func(c *Contribution) { c.Member = 4 }},
		{"zero members", true, func(c *Contribution) { c.Members = 0; c.Member = 0 }},
		{"too many members", true, func(c *Contribution) { c.Members = AggMaxMembers + 1 }},
	}
	invalid := 0
	for i, tc := range cases {
		c := base
		c.Member = 1
		tc.mod(&c)
		if st, res := p.Contribute(&c); st != ContribMismatch || res != nil {
			t.Errorf("%s: %v", tc.name, st)
		}
		if !tc.invalid {
			continue
		}
		// Invalid contributions open no slot either.
		invalid++
		c.Key.Op = 100 + uint64(i)
		if st, _ := p.Contribute(&c); st != ContribMismatch {
			t.Errorf("%s on a new key: %v", tc.name, st)
		}
	}
	if st, _ := p.Contribute(nil); st != ContribMismatch {
		t.Errorf("nil: %v", st)
	}
	// A chunk over SlotBytes is told apart (its sender's MTU is above the
	// switch's), on the slot and on a new key, and opens nothing either.
	over := base
	over.Member, over.Data = 1, make([]byte, 72)
	for _, op := range []uint64{key.Op, 99} {
		over.Key.Op = op
		if st, res := p.Contribute(&over); st != ContribTooLarge || res != nil {
			t.Errorf("over SlotBytes, op %d: %v", op, st)
		}
	}
	if got := p.Missing(key, nil); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("mismatches were recorded: missing %v", got)
	}
	if st := p.Stats(); st.Mismatches != uint64(len(cases)+invalid+1+2) || st.Contributions != 1 || st.InUse != 1 {
		t.Fatalf("stats %+v", st)
	}
	checkPoolInvariants(t, p)
}

func TestAggMissing(t *testing.T) {
	for _, det := range []bool{false, true} {
		p := newTestPool(t, PoolConfig{})
		key := AggKey{Group: 2, Op: 5, Offset: 9000}
		if got := p.Missing(key, nil); got != nil {
			t.Fatalf("unknown key: %v", got)
		}
		for _, m := range []int{5, 0, 3, 70, 129} {
			p.Contribute(&Contribution{Key: key, Member: m, Members: 130, Dtype: wire.DtypeI32, Alu: wire.AluAdd, Deterministic: det, Data: make([]byte, 8)})
		}
		var want []int
		for m := 0; m < 130; m++ {
			if !slices.Contains([]int{5, 0, 3, 70, 129}, m) {
				want = append(want, m)
			}
		}
		dst := []int{-1}
		if got := p.Missing(key, dst); !slices.Equal(got, append([]int{-1}, want...)) {
			t.Fatalf("det=%v: missing %v", det, got)
		}
		for _, m := range want {
			p.Contribute(&Contribution{Key: key, Member: m, Members: 130, Dtype: wire.DtypeI32, Alu: wire.AluAdd, Deterministic: det, Data: make([]byte, 8)})
		}
		if p.Result(key) == nil {
			t.Fatal("not complete")
		}
		if got := p.Missing(key, nil); got != nil {
			t.Fatalf("complete slot: missing %v", got)
		}
	}
}

func TestAggReleaseGroup(t *testing.T) {
	p := newTestPool(t, PoolConfig{Slots: 16, SlotBytes: 64})
	for g := uint32(1); g <= 3; g++ {
		for op := uint64(0); op < 4; op++ {
			for m := 0; m < int(g); m++ { // group 1's slots complete, the others don't
				st, _ := p.Contribute(&Contribution{Key: AggKey{Group: g, Op: op}, Member: m, Members: 1 + int(g/2)*3, Dtype: wire.DtypeF32, Alu: wire.AluProd, Deterministic: g == 3, Data: make([]byte, 64)})
				if st != ContribAccepted && st != ContribComplete {
					t.Fatalf("group %d op %d member %d: %v", g, op, m, st)
				}
			}
		}
	}
	checkPoolInvariants(t, p)
	if p.reserved == 0 {
		t.Fatal("deterministic slots reserved nothing")
	}
	if n := p.ReleaseGroup(3); n != 4 {
		t.Fatalf("released %d", n)
	}
	if p.reserved != 0 {
		t.Fatalf("reservation left: %d", p.reserved)
	}
	if n := p.ReleaseGroup(3); n != 0 {
		t.Fatalf("released %d again", n)
	}
	if n := p.ReleaseGroup(1); n != 4 {
		t.Fatalf("released %d complete slots", n)
	}
	if p.InUse(1) != 0 || p.InUse(2) != 4 || p.InUse(3) != 0 || p.Stats().InUse != 4 {
		t.Fatalf("in use %d %d %d %+v", p.InUse(1), p.InUse(2), p.InUse(3), p.Stats())
	}
	checkPoolInvariants(t, p)
}

// TestAgg1024Members fills the whole contributor bitmap, in both modes.
func TestAgg1024Members(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	p := newTestPool(t, PoolConfig{Slots: 2})
	for _, det := range []bool{false, true} {
		key := AggKey{Group: 1, Op: 1}
		order := rng.Perm(AggMaxMembers)
		var want int64
		for i, m := range order {
			v := int64(m)*1_000_003 - 7
			want += v
			st, res := p.Contribute(&Contribution{Key: key, Member: m, Members: AggMaxMembers, Dtype: wire.DtypeI64, Alu: wire.AluAdd, Deterministic: det, Data: i64s(v, 1)})
			if i == AggMaxMembers-2 {
				if got := p.Missing(key, nil); !slices.Equal(got, []int{order[AggMaxMembers-1]}) {
					t.Fatalf("seed %d det=%v: missing %v want %d", seed, det, got, order[AggMaxMembers-1])
				}
			}
			if i < AggMaxMembers-1 {
				if st != ContribAccepted {
					t.Fatalf("seed %d det=%v: %d: %v", seed, det, i, st)
				}
				continue
			}
			if st != ContribComplete || !bytes.Equal(res, i64s(want, AggMaxMembers)) {
				t.Fatalf("seed %d det=%v: %v %v", seed, det, st, res)
			}
		}
		checkPoolInvariants(t, p)
		p.Release(key)
	}
}

// TestAggDeterministicMemoryBound: MaxBytes admits a deterministic slot
// only if its worst case fits, and admitted slots always complete.
func TestAggDeterministicMemoryBound(t *testing.T) {
	const slotBytes = 64
	p := newTestPool(t, PoolConfig{Slots: 8, SlotBytes: slotBytes, MaxBytes: (AggMaxMembers - 1) * slotBytes})
	bigC := func(m int) *Contribution {
		return &Contribution{Key: AggKey{Group: 1, Op: 1}, Member: m, Members: AggMaxMembers, Dtype: wire.DtypeI32, Alu: wire.AluAdd, Deterministic: true, Data: make([]byte, slotBytes)}
	}
	small := &Contribution{Key: AggKey{Group: 2, Op: 1}, Member: 1, Members: 2, Dtype: wire.DtypeI32, Alu: wire.AluAdd, Deterministic: true, Data: make([]byte, 4)}
	// Reverse order: the worst case, every member but 0 buffered.
	for m := AggMaxMembers - 1; m >= 1; m-- {
		if st, _ := p.Contribute(bigC(m)); st != ContribAccepted {
			t.Fatalf("member %d: %v", m, st)
		}
	}
	checkPoolInvariants(t, p)
	if st, _ := p.Contribute(small); st != ContribNoSlot {
		t.Fatalf("deterministic slot beyond MaxBytes: %v", st)
	}
	// Non-deterministic slots need no buffering.
	nd := *small
	nd.Deterministic = false
	nd.Key.Op = 2
	if st, _ := p.Contribute(&nd); st != ContribAccepted {
		t.Fatalf("non-deterministic: %v", st)
	}
	if st, _ := p.Contribute(bigC(0)); st != ContribComplete {
		t.Fatalf("member 0: %v", st)
	}
	checkPoolInvariants(t, p)
	// The completed slot gave its reservation back, though it holds its slot.
	if st, _ := p.Contribute(small); st != ContribAccepted {
		t.Fatalf("after completion: %v", st)
	}
	checkPoolInvariants(t, p)
}

// TestAggBufferEviction: free buffers of one size class give way to
// another's, so allocated buffer memory stays within MaxBytes.
func TestAggBufferEviction(t *testing.T) {
	const slotBytes = 128
	p := newTestPool(t, PoolConfig{Slots: 2, SlotBytes: slotBytes, MaxBytes: (AggMaxMembers - 1) * slotBytes})
	for round, n := range []int{128, 64, 128, 4} {
		key := AggKey{Group: 1, Op: uint64(round)}
		var want int64
		for m := AggMaxMembers - 1; m >= 0; m-- { // reverse: all but member 0 buffered
			want += int64(m)
			data := make([]byte, n)
			binary.LittleEndian.PutUint32(data, uint32(m))
			st, res := p.Contribute(&Contribution{Key: key, Member: m, Members: AggMaxMembers, Dtype: wire.DtypeI32, Alu: wire.AluAdd, Deterministic: true, Data: data})
			if m > 0 && st != ContribAccepted {
				t.Fatalf("round %d member %d: %v", round, m, st)
			}
			if m == 0 && (st != ContribComplete || int64(binary.LittleEndian.Uint32(res)) != want) {
				t.Fatalf("round %d: %v %v", round, st, res)
			}
		}
		checkPoolInvariants(t, p)
		if l := p.bufs.Free(n); l != AggMaxMembers-1 || p.bufs.Allocated() > p.cfg.MaxBytes {
			t.Fatalf("round %d: %d free buffers of the class, allocated %d", round, l, p.bufs.Allocated())
		}
		p.Release(key)
	}
}

// TestAggSteadyStateAllocs: after warm-up, Contribute and Release allocate
// nothing in either mode.
func TestAggSteadyStateAllocs(t *testing.T) {
	for _, det := range []bool{false, true} {
		p := newTestPool(t, PoolConfig{Slots: 8})
		data := make([]byte, 8192)
		order := []int{3, 1, 7, 0, 2, 6, 5, 4}
		op := uint64(0)
		round := func() {
			op++
			for k := uint32(0); k < 4; k++ {
				key := AggKey{Group: k % 2, Op: op, Offset: k * 8192}
				for _, m := range order {
					p.Contribute(&Contribution{Key: key, Member: m, Members: 8, Dtype: wire.DtypeF32, Alu: wire.AluAdd, Deterministic: det, Data: data})
				}
			}
			for k := uint32(0); k < 4; k++ {
				p.Release(AggKey{Group: k % 2, Op: op, Offset: k * 8192})
			}
		}
		for range 10 {
			round()
		}
		if n := testing.AllocsPerRun(100, round); n != 0 {
			t.Errorf("det=%v: %v allocs per round of 4 slots", det, n)
		}
	}
}

func TestNewAggPoolConfig(t *testing.T) {
	p := newTestPool(t, PoolConfig{})
	if st := p.Stats(); st.Slots != 1024 || p.cfg.SlotBytes != 9000 || p.cfg.MaxBytes != 256<<20 {
		t.Fatalf("defaults: %+v %+v", st, p.cfg)
	}
	for _, cfg := range []PoolConfig{
		{Slots: -1},
		{Slots: aggMaxSlots + 1},
		{SlotBytes: -5},
		{SlotBytes: wire.MaxPayload + 1},
		{MaxBytes: -1},
		{SlotBytes: 1000, MaxBytes: 1000 * 100},
	} {
		if _, err := NewAggPool(cfg); !errors.Is(err, ErrPoolConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// aggModelSlot is the randomized test's model of one slot.
type aggModelSlot struct {
	c     Contribution // parameters of the first contribution
	data  map[int][]byte
	order []int // arrival order
	done  bool
}

// TestAggRandomized drives a small pool with random contributions
// (duplicates, mismatches), releases and group releases across several
// groups, against a model that keeps every contribution and reduces
// naively.
func TestAggRandomized(t *testing.T) {
	seed := rand.Uint64()
	defer func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 4))
	const slots, slotBytes = 10, 256
	p := newTestPool(t, PoolConfig{Slots: slots, SlotBytes: slotBytes, MaxBytes: (AggMaxMembers - 1) * slotBytes})
	model := map[AggKey]*aggModelSlot{}
	var keys []AggKey // candidate keys, some live, some not
	held := func(g uint32) int {
		n := 0
		for k := range model {
			if k.Group == g {
				n++
			}
		}
		return n
	}
	var reserved int64 // the model's reservations, recomputed every step
	for step := 0; step < 20000; step++ {
		switch r := rng.IntN(100); {
		case r < 3 && len(keys) > 0: // release one
			k := keys[rng.IntN(len(keys))]
			p.Release(k)
			delete(model, k)
		case r < 4: // release a group
			g := uint32(rng.IntN(4))
			want := held(g)
			if n := p.ReleaseGroup(g); n != want {
				t.Fatalf("step %d: ReleaseGroup(%d) = %d want %d", step, g, n, want)
			}
			for k := range model {
				if k.Group == g {
					delete(model, k)
				}
			}
		case r < 10 || len(keys) == 0: // a new key
			keys = append(keys, AggKey{Group: uint32(rng.IntN(4)), Op: uint64(rng.IntN(1000)), Offset: uint32(rng.IntN(4)) * slotBytes})
		default: // a contribution to a known key
			k := keys[rng.IntN(len(keys))]
			ms := model[k]
			var c Contribution
			if ms != nil {
				c = ms.c
				if rng.IntN(20) == 0 { // a mismatching one
					c.Alu = wire.Alu(1 + (int(c.Alu) % 4))
				}
			} else {
				dt := reducetest.Dtypes[rng.IntN(4)]
				members := 1 + rng.IntN(6)
				if rng.IntN(10) == 0 {
					members = 1 + rng.IntN(AggMaxMembers)
				}
				c = Contribution{Key: k, Members: members, Dtype: dt, Alu: reducetest.Alus[rng.IntN(4)], Deterministic: rng.IntN(2) == 0,
					Data: make([]byte, rng.IntN(slotBytes/dt.Size()+1)*dt.Size())}
			}
			c.Member = rng.IntN(c.Members)
			c.Data = make([]byte, len(c.Data))
			reducetest.Rand(rng, c.Data, c.Dtype)

			// What the model expects.
			var want ContribStatus
			switch {
			case ms == nil:
				share := max(1, slots/(len(groupsOf(model))+b2i(held(k.Group) == 0)))
				need := int64(0)
				if c.Deterministic && c.Members > 1 {
					need = int64(c.Members-1) * int64(p.classSize(len(c.Data)))
				}
				if len(model) == slots || held(k.Group) >= share || reserved+need > p.cfg.MaxBytes {
					want = ContribNoSlot
				} else {
					want = ContribAccepted
				}
			case ms.done:
				want = ContribDone
			case c.Alu != ms.c.Alu:
				want = ContribMismatch
			case ms.data[c.Member] != nil:
				want = ContribDuplicate
			default:
				want = ContribAccepted
			}
			if want == ContribAccepted {
				if ms == nil {
					ms = &aggModelSlot{c: c, data: map[int][]byte{}}
					model[k] = ms
				}
				ms.data[c.Member] = slices.Clone(c.Data)
				ms.order = append(ms.order, c.Member)
				if len(ms.data) == c.Members {
					want = ContribComplete
					ms.done = true
				}
			}
			st, res := p.Contribute(&c)
			if st != want {
				t.Fatalf("step %d: %+v: got %v want %v", step, c.Key, st, want)
			}
			if st == ContribComplete {
				order := ms.order
				if c.Deterministic {
					order = slices.Sorted(maps.Keys(ms.data))
				}
				ref := slices.Clone(ms.data[order[0]])
				for _, m := range order[1:] {
					reducetest.Ref(ref, ms.data[m], c.Dtype, c.Alu)
				}
				if !reducetest.Same(res, ref, c.Dtype) {
					t.Fatalf("step %d: %+v det=%v: result differs from reference", step, c.Key, c.Deterministic)
				}
			}
		}
		// Recompute the model's reservation: open deterministic slots.
		reserved = 0
		for _, s := range model {
			if !s.done && s.c.Deterministic && s.c.Members > 1 {
				reserved += int64(s.c.Members-1) * int64(p.classSize(len(s.c.Data)))
			}
		}
		if step%500 == 0 {
			checkPoolInvariants(t, p)
		}
		if st := p.Stats(); st.InUse != len(model) {
			t.Fatalf("step %d: in use %d, model %d", step, st.InUse, len(model))
		}
	}
	checkPoolInvariants(t, p)
	for g := uint32(0); g < 4; g++ {
		p.ReleaseGroup(g)
	}
	if p.reserved != 0 || p.Stats().InUse != 0 {
		t.Fatalf("after releasing all: reserved %d, stats %+v", p.reserved, p.Stats())
	}
}

func groupsOf(model map[AggKey]*aggModelSlot) map[uint32]bool {
	g := map[uint32]bool{}
	for k := range model {
		g[k.Group] = true
	}
	return g
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestContribStatusString(t *testing.T) {
	for st, want := range map[ContribStatus]string{ContribAccepted: "accepted", ContribDone: "done", 42: "contrib(42)"} {
		if got := st.String(); got != want {
			t.Errorf("%d: %q want %q", st, got, want)
		}
	}
}

// BenchmarkContribute8Members: per op, 8 contributions of an 8 KiB f32 sum
// to one slot, then Release.
func BenchmarkContribute8Members(b *testing.B) {
	for _, det := range []bool{false, true} {
		b.Run(fmt.Sprintf("det=%v", det), func(b *testing.B) {
			p := newTestPool(b, PoolConfig{Slots: 64})
			data := make([][]byte, 8)
			for m := range data {
				data[m] = make([]byte, 8192)
				reducetest.Rand(rand.New(rand.NewPCG(uint64(m), 5)), data[m], wire.DtypeF32)
			}
			order := []int{5, 2, 7, 0, 1, 4, 6, 3} // some out of turn
			c := Contribution{Members: 8, Dtype: wire.DtypeF32, Alu: wire.AluAdd, Deterministic: det}
			b.SetBytes(8 * 8192)
			b.ReportAllocs()
			op := uint64(0)
			for b.Loop() {
				op++
				c.Key = AggKey{Group: 1, Op: op}
				for _, m := range order {
					c.Member, c.Data = m, data[m]
					if st, _ := p.Contribute(&c); st != ContribAccepted && st != ContribComplete {
						b.Fatal(st)
					}
				}
				p.Release(c.Key)
			}
		})
	}
}

// TestAggOldest: Oldest names the open slot opened first, skipping slots
// that completed or were released, with the time of the contribution
// that opened it.
func TestAggOldest(t *testing.T) {
	p := newTestPool(t, PoolConfig{Slots: 4})
	t0 := time.Unix(1000, 0)
	contrib := func(op uint64, member int, at time.Duration) ContribStatus {
		st, _ := p.Contribute(&Contribution{Key: AggKey{Group: 1, Op: op}, Member: member, Members: 2,
			Dtype: wire.DtypeI64, Alu: wire.AluAdd, Data: i64s(1), Time: t0.Add(at)})
		return st
	}
	if _, _, ok := p.Oldest(); ok {
		t.Fatal("empty pool: Oldest found a slot")
	}
	for op := uint64(1); op <= 3; op++ {
		if st := contrib(op, 0, time.Duration(op)*time.Second); st != ContribAccepted {
			t.Fatalf("op %d: %v", op, st)
		}
	}
	want := func(op uint64, at time.Duration) {
		t.Helper()
		k, opened, ok := p.Oldest()
		if !ok || k.Op != op || !opened.Equal(t0.Add(at)) {
			t.Fatalf("Oldest = %+v at %v (%v), want op %d at %v", k, opened.Sub(t0), ok, op, at)
		}
		checkPoolInvariants(t, p)
	}
	want(1, time.Second)
	if st := contrib(1, 1, 9*time.Second); st != ContribComplete { // complete slots are not open
		t.Fatalf("completing op 1: %v", st)
	}
	want(2, 2*time.Second)
	p.Release(AggKey{Group: 1, Op: 2})
	want(3, 3*time.Second)
	contrib(4, 1, 4*time.Second)
	p.ReleaseGroup(1)
	if _, _, ok := p.Oldest(); ok {
		t.Fatal("after ReleaseGroup: Oldest found a slot")
	}
	checkPoolInvariants(t, p)
}
