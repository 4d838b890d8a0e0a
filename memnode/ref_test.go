package memnode

import (
	"bytes"
	"flag"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/ndma/ndma/wire"
)

// refRegion and refStore are a naive model of the executor, written from
// the Exec doc comment without sharing code with it: bounds are checked by
// adding with an explicit carry, and elements are decoded byte by byte.
type refRegion struct {
	mem  []byte
	perm wire.Perm
}

type refStore map[uint64]*refRegion

type refResult struct {
	status wire.Status
	old    uint64
	data   []byte

	// anyNaN lists the region byte offsets of float elements for which
	// a vector Add met two NaNs: the result is a NaN, but IEEE 754 leaves
	// open which operand's payload it carries (and the compiler may swap
	// the operands of a commutative add), so the model accepts any NaN
	// there. The element size is the op's.
	anyNaN []int
}

// reconcile checks the elements res.anyNaN names: mem must hold a NaN of
// dt there, which the model then adopts. It reports a mismatch.
func (res *refResult) reconcile(mem, model []byte, dt wire.Dtype) bool {
	for _, off := range res.anyNaN {
		var nan bool
		if dt == wire.DtypeF32 {
			nan = math.IsNaN(float64(math.Float32frombits(uint32(refLoad(mem[off:], 4)))))
		} else {
			nan = math.IsNaN(math.Float64frombits(refLoad(mem[off:], 8)))
		}
		if !nan {
			return false
		}
		copy(model[off:off+dt.Size()], mem[off:])
	}
	return true
}

// refEnd returns addr+off+n and whether that sum neither overflows nor
// exceeds size.
func refEnd(size int, addr, off, n uint64) bool {
	sum, c1 := bits.Add64(addr, off, 0)
	sum, c2 := bits.Add64(sum, n, 0)
	return c1 == 0 && c2 == 0 && sum <= uint64(size)
}

func refLoad(b []byte, n int) uint64 {
	var v uint64
	for j := n - 1; j >= 0; j-- {
		v = v<<8 | uint64(b[j])
	}
	return v
}

func refStoreLE(b []byte, n int, v uint64) {
	for j := 0; j < n; j++ {
		b[j] = byte(v >> (8 * j))
	}
}

func (m refStore) exec(h *wire.Header, payload []byte) refResult {
	need := map[wire.Opcode]wire.Perm{
		wire.OpWrite: wire.PermWrite, wire.OpRead: wire.PermRead,
		wire.OpCAS: wire.PermAtomic, wire.OpFetchAdd: wire.PermAtomic, wire.OpVector: wire.PermVector,
	}[h.Op]
	if need == 0 {
		return refResult{status: wire.StatusUnknownOp}
	}
	r := m[h.Key]
	if r == nil {
		return refResult{status: wire.StatusBadKey}
	}
	if r.perm&need == 0 {
		return refResult{status: wire.StatusPermission}
	}
	switch h.Op {
	case wire.OpWrite:
		if !refEnd(len(r.mem), h.Addr, uint64(h.Offset), uint64(len(payload))) {
			return refResult{status: wire.StatusOutOfBounds}
		}
		for i, c := range payload {
			r.mem[int(h.Addr)+int(h.Offset)+i] = c
		}
		return refResult{}
	case wire.OpRead:
		if h.Operand1 > 1<<30 {
			return refResult{status: wire.StatusTooLarge}
		}
		if !refEnd(len(r.mem), h.Addr, 0, h.Operand1) {
			return refResult{status: wire.StatusOutOfBounds}
		}
		data := make([]byte, h.Operand1)
		for i := range data {
			data[i] = r.mem[int(h.Addr)+i]
		}
		return refResult{data: data}
	case wire.OpCAS, wire.OpFetchAdd:
		if h.Addr&7 != 0 {
			return refResult{status: wire.StatusMisaligned}
		}
		if !refEnd(len(r.mem), h.Addr, 0, 8) {
			return refResult{status: wire.StatusOutOfBounds}
		}
		w := r.mem[h.Addr:]
		old := refLoad(w, 8)
		switch {
		case h.Op == wire.OpFetchAdd:
			refStoreLE(w, 8, old+h.Operand1)
		case old == h.Operand1:
			refStoreLE(w, 8, h.Operand2)
		}
		return refResult{old: old}
	}

	// OpVector.
	var es int
	switch h.Dtype {
	case wire.DtypeF32, wire.DtypeI32:
		es = 4
	case wire.DtypeF64, wire.DtypeI64:
		es = 8
	default:
		return refResult{status: wire.StatusBadOperand}
	}
	if h.Alu != wire.AluAdd && h.Alu != wire.AluMin && h.Alu != wire.AluMax {
		return refResult{status: wire.StatusUnknownOp}
	}
	if len(payload)%es != 0 {
		return refResult{status: wire.StatusBadOperand}
	}
	if (h.Addr%uint64(es)+uint64(h.Offset)%uint64(es))%uint64(es) != 0 {
		return refResult{status: wire.StatusMisaligned}
	}
	if !refEnd(len(r.mem), h.Addr, uint64(h.Offset), uint64(len(payload))) {
		return refResult{status: wire.StatusOutOfBounds}
	}
	base := int(h.Addr + uint64(h.Offset))
	var res refResult
	for i := 0; i < len(payload); i += es {
		a, b := refLoad(r.mem[base+i:], es), refLoad(payload[i:], es)
		refStoreLE(r.mem[base+i:], es, refALU(h.Dtype, h.Alu, a, b))
		if h.Alu == wire.AluAdd && refIsNaN(h.Dtype, a) && refIsNaN(h.Dtype, b) {
			res.anyNaN = append(res.anyNaN, base+i)
		}
	}
	return res
}

func refIsNaN(dt wire.Dtype, v uint64) bool {
	switch dt {
	case wire.DtypeF32:
		return v&0x7f800000 == 0x7f800000 && v&0x007fffff != 0
	case wire.DtypeF64:
		return v&0x7ff0000000000000 == 0x7ff0000000000000 && v&0x000fffffffffffff != 0
	}
	return false
}

// refALU returns the new memory element for memory a and payload b.
func refALU(dt wire.Dtype, alu wire.Alu, a, b uint64) uint64 {
	var less, greater bool // b < a, b > a
	switch dt {
	case wire.DtypeF32:
		fa, fb := math.Float32frombits(uint32(a)), math.Float32frombits(uint32(b))
		if alu == wire.AluAdd {
			return uint64(math.Float32bits(fa + fb))
		}
		less, greater = fb < fa, fb > fa
	case wire.DtypeF64:
		fa, fb := math.Float64frombits(a), math.Float64frombits(b)
		if alu == wire.AluAdd {
			return math.Float64bits(fa + fb)
		}
		less, greater = fb < fa, fb > fa
	case wire.DtypeI32:
		ia, ib := int32(uint32(a)), int32(uint32(b))
		if alu == wire.AluAdd {
			return uint64(uint32(ia + ib))
		}
		less, greater = ib < ia, ib > ia
	case wire.DtypeI64:
		ia, ib := int64(a), int64(b)
		if alu == wire.AluAdd {
			return uint64(ia + ib)
		}
		less, greater = ib < ia, ib > ia
	}
	if (alu == wire.AluMin && less) || (alu == wire.AluMax && greater) {
		return b
	}
	return a
}

var seedFlag = flag.Uint64("memnode.seed", 1, "seed of the randomized executor test")

// opGen draws random requests biased towards the interesting edges:
// mostly valid, but with unknown keys, ops, dtypes and ALU ops, misaligned
// and out-of-bounds addresses, wrap-around addresses, and special floats.
type opGen struct {
	rng  *rand.Rand
	keys []uint64
	size map[uint64]int
}

func (g *opGen) pick(n int) int { return g.rng.IntN(n) }

func (g *opGen) chance(p float64) bool { return g.rng.Float64() < p }

// addr draws a byte address for a region of size bytes, aligned to align
// most of the time.
func (g *opGen) addr(size, align int) uint64 {
	switch {
	case g.chance(0.05):
		return math.MaxUint64 - uint64(g.pick(64))
	case g.chance(0.03):
		return g.rng.Uint64()
	}
	a := uint64(g.pick(size + 16))
	if g.chance(0.85) {
		a &^= uint64(align - 1)
	}
	return a
}

var specialBits32 = []uint32{
	0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc00001, 1, 0x3f800000, 0xbf800000, 0x7fffffff,
}

var specialBits64 = []uint64{
	0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001, 0xfff8000000000001,
	1, 0x3ff0000000000000, 0xbff0000000000000, math.MaxInt64, math.MaxUint64,
}

// payload draws n bytes of elements of es bytes (n a multiple of es, or
// not, as the caller chose), with special float values mixed in.
func (g *opGen) payload(n, es int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(g.rng.Uint32())
	}
	if es == 0 || !g.chance(0.5) {
		return p
	}
	for i := 0; i+es <= n; i += es {
		if !g.chance(0.3) {
			continue
		}
		if es == 4 {
			refStoreLE(p[i:], 4, uint64(specialBits32[g.pick(len(specialBits32))]))
		} else {
			refStoreLE(p[i:], 8, specialBits64[g.pick(len(specialBits64))])
		}
	}
	return p
}

func (g *opGen) next(model refStore) (wire.Header, []byte) {
	var h wire.Header
	key := g.keys[g.pick(len(g.keys))]
	if g.chance(0.04) {
		key = g.rng.Uint64N(8) // mostly unknown keys
	}
	h.Key = key
	size := g.size[key]
	if size == 0 {
		size = 64
	}
	ops := []wire.Opcode{wire.OpWrite, wire.OpRead, wire.OpCAS, wire.OpFetchAdd, wire.OpVector, wire.OpVector}
	h.Op = ops[g.pick(len(ops))]
	if g.chance(0.03) {
		h.Op = wire.Opcode(g.rng.Uint32())
	}
	if g.chance(0.1) {
		h.Offset = uint32(g.pick(size + 8))
	}
	if g.chance(0.01) {
		h.Offset = g.rng.Uint32()
	}
	switch h.Op {
	case wire.OpWrite:
		h.Addr = g.addr(size, 1)
		return h, g.payload(g.pick(size+8), 0)
	case wire.OpRead:
		h.Addr = g.addr(size, 1)
		h.Operand1 = uint64(g.pick(size + 8))
		switch {
		case g.chance(0.02):
			h.Operand1 = MaxReadLen + uint64(g.pick(2))
		case g.chance(0.02):
			h.Operand1 = g.rng.Uint64()
		}
		return h, nil
	case wire.OpCAS, wire.OpFetchAdd:
		h.Addr = g.addr(size, 8)
		h.Operand1, h.Operand2 = g.rng.Uint64(), g.rng.Uint64()
		if r := model[key]; r != nil && g.chance(0.5) && refEnd(len(r.mem), h.Addr, 0, 8) {
			h.Operand1 = refLoad(r.mem[h.Addr:], 8) // a CAS that matches
		}
		return h, nil
	case wire.OpVector:
		h.Dtype = wire.Dtype(1 + g.pick(4))
		if g.chance(0.03) {
			h.Dtype = wire.Dtype(g.rng.Uint32())
		}
		h.Alu = wire.Alu(1 + g.pick(3))
		if g.chance(0.03) {
			h.Alu = wire.Alu(g.rng.Uint32())
		}
		es := max(h.Dtype.Size(), 1)
		h.Addr = g.addr(size, es)
		n := g.pick(size/es+2) * es
		if g.chance(0.03) {
			n = g.pick(size + 8)
		}
		return h, g.payload(n, h.Dtype.Size())
	}
	return h, g.payload(g.pick(16), 0)
}

func TestExecMatchesReference(t *testing.T) {
	seed := *seedFlag
	t.Logf("seed %d (rerun: go test ./memnode/ -run TestExecMatchesReference -args -memnode.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6e646d61))

	s, err := NewStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	model := refStore{}
	g := &opGen{rng: rng, size: map[uint64]int{}}
	mems := map[uint64][]byte{}

	addRegion := func() {
		size := []int{8, 61, 64, 100, 256, 1000}[rng.IntN(6)]
		perm := wire.PermAll
		if rng.IntN(3) == 0 {
			perm = wire.Perm(rng.IntN(int(wire.PermAll) + 1))
		}
		mem := make([]byte, size)
		for i := range mem {
			mem[i] = byte(rng.Uint32())
		}
		key, err := s.Register(mem, perm, 0)
		if err != nil {
			t.Fatal(err)
		}
		model[key] = &refRegion{mem: bytes.Clone(mem), perm: perm}
		mems[key] = mem
		g.keys = append(g.keys, key)
		g.size[key] = size
	}
	for range 6 {
		addRegion()
	}

	const ops = 50000
	statuses := map[wire.Status]int{}
	for i := range ops {
		if rng.IntN(500) == 0 && len(g.keys) > 1 {
			// Replace a region.
			j := rng.IntN(len(g.keys))
			key := g.keys[j]
			if err := s.Deregister(key); err != nil {
				t.Fatal(err)
			}
			delete(model, key)
			delete(mems, key)
			g.keys = append(g.keys[:j], g.keys[j+1:]...)
			addRegion()
		}
		h, payload := g.next(model)
		hcopy := h
		got := s.Exec(&h, payload)
		want := model.exec(&hcopy, payload)
		statuses[got.Status]++
		if got.Status != want.status || got.Old != want.old || !bytes.Equal(got.Data, want.data) ||
			(got.Data == nil) != (want.data == nil) {
			t.Fatalf("seed %d op %d: %+v payload %x\n got {%v old %#x data %x}\nwant {%v old %#x data %x}",
				seed, i, h, payload, got.Status, got.Old, got.Data, want.status, want.old, want.data)
		}
		if want.status == wire.StatusOK && !want.reconcile(mems[h.Key], model[h.Key].mem, h.Dtype) {
			t.Fatalf("seed %d op %d: %+v payload %x: NaN+NaN did not give a NaN", seed, i, h, payload)
		}
		for key, mem := range mems {
			if !bytes.Equal(mem, model[key].mem) {
				t.Fatalf("seed %d op %d: %+v payload %x: region %#x differs from the model\n got %x\nwant %x",
					seed, i, h, payload, key, mem, model[key].mem)
			}
		}
	}
	t.Logf("%d ops, statuses: %v", ops, statuses)
	for _, st := range []wire.Status{
		wire.StatusOK, wire.StatusBadKey, wire.StatusOutOfBounds, wire.StatusMisaligned,
		wire.StatusUnknownOp, wire.StatusPermission, wire.StatusBadOperand, wire.StatusTooLarge,
	} {
		if statuses[st] == 0 {
			t.Errorf("no op ended with %v: the generator misses a path", st)
		}
	}
}
