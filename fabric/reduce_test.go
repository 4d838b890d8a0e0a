package fabric

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/ndma/ndma/wire"
)

var (
	reduceDtypes = []wire.Dtype{wire.DtypeF32, wire.DtypeF64, wire.DtypeI32, wire.DtypeI64}
	reduceAlus   = []wire.Alu{wire.AluAdd, wire.AluMin, wire.AluMax, wire.AluProd}
)

// refReduceElem is the naive one-element reference: d = alu(d, s) for
// elements of type dt held in the low bits of d and s. Floats are computed
// in their own precision (float32 arithmetic is exact-rounded, as Go
// guarantees for float32 operands); integers through math/big and then
// truncated to the element width, which checks the wrap-around
// independently of Go's fixed-width arithmetic.
func refReduceElem(d, s uint64, dt wire.Dtype, alu wire.Alu) uint64 {
	switch dt {
	case wire.DtypeF32:
		a, b := math.Float32frombits(uint32(d)), math.Float32frombits(uint32(s))
		switch alu {
		case wire.AluAdd:
			return uint64(math.Float32bits(a + b))
		case wire.AluProd:
			return uint64(math.Float32bits(a * b))
		case wire.AluMin:
			if b < a {
				return s
			}
		case wire.AluMax:
			if b > a {
				return s
			}
		}
		return d
	case wire.DtypeF64:
		a, b := math.Float64frombits(d), math.Float64frombits(s)
		switch alu {
		case wire.AluAdd:
			return math.Float64bits(a + b)
		case wire.AluProd:
			return math.Float64bits(a * b)
		case wire.AluMin:
			if b < a {
				return s
			}
		case wire.AluMax:
			if b > a {
				return s
			}
		}
		return d
	}
	bitsN := uint(dt.Size() * 8)
	signed := func(v uint64) *big.Int {
		v &= 1<<bitsN - 1
		x := new(big.Int).SetUint64(v)
		if v>>(bitsN-1) != 0 {
			x.Sub(x, new(big.Int).Lsh(big.NewInt(1), bitsN))
		}
		return x
	}
	a, b := signed(d), signed(s)
	var r *big.Int
	switch alu {
	case wire.AluAdd:
		r = new(big.Int).Add(a, b)
	case wire.AluProd:
		r = new(big.Int).Mul(a, b)
	case wire.AluMin:
		if b.Cmp(a) < 0 {
			return s
		}
		return d
	case wire.AluMax:
		if b.Cmp(a) > 0 {
			return s
		}
		return d
	}
	mod := new(big.Int).Lsh(big.NewInt(1), bitsN)
	r.Mod(r, mod) // Euclidean: 0 <= r < mod
	return r.Uint64()
}

// refGet and refPut read and write element i of b.
func refGet(b []byte, i int, dt wire.Dtype) uint64 {
	if dt.Size() == 4 {
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

func refPut(b []byte, i int, dt wire.Dtype, v uint64) {
	if dt.Size() == 4 {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		return
	}
	binary.LittleEndian.PutUint64(b[8*i:], v)
}

// refReduce is the naive reference for Reduce over whole buffers.
func refReduce(dst, src []byte, dt wire.Dtype, alu wire.Alu) {
	n := min(len(dst), len(src)) / dt.Size()
	for i := 0; i < n; i++ {
		refPut(dst, i, dt, refReduceElem(refGet(dst, i, dt), refGet(src, i, dt), dt, alu))
	}
}

// sameElems reports whether a and b hold the same elements bit for bit,
// except that any two NaNs match: which operand's NaN an IEEE operation on
// two NaNs returns is unspecified (it depends on the order in which the
// compiler emits the operands), so Reduce's contract leaves it open.
func sameElems(a, b []byte, dt wire.Dtype) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a)/dt.Size(); i++ {
		x, y := refGet(a, i, dt), refGet(b, i, dt)
		if x == y {
			continue
		}
		switch dt {
		case wire.DtypeF32:
			if math.IsNaN(float64(math.Float32frombits(uint32(x)))) && math.IsNaN(float64(math.Float32frombits(uint32(y)))) {
				continue
			}
		case wire.DtypeF64:
			if math.IsNaN(math.Float64frombits(x)) && math.IsNaN(math.Float64frombits(y)) {
				continue
			}
		}
		return false
	}
	return true
}

// randElems fills b with random elements of dt, including the special
// values (NaN, ±Inf, ±0, extremes) with some probability.
func randElems(rng *rand.Rand, b []byte, dt wire.Dtype) {
	n := len(b) / dt.Size()
	for i := 0; i < n; i++ {
		var v uint64
		special := rng.IntN(8) == 0
		switch dt {
		case wire.DtypeF32:
			f := float32(rng.NormFloat64() * 100)
			if special {
				f = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), math.MaxFloat32, math.SmallestNonzeroFloat32}[rng.IntN(7)]
			}
			v = uint64(math.Float32bits(f))
		case wire.DtypeF64:
			f := rng.NormFloat64() * 1e6
			if special {
				f = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), math.MaxFloat64, math.SmallestNonzeroFloat64}[rng.IntN(7)]
			}
			v = math.Float64bits(f)
		case wire.DtypeI32:
			v = uint64(rng.Uint32())
			if special {
				v = uint64([]uint32{0, 1, 0xffffffff, 0x7fffffff, 0x80000000}[rng.IntN(5)])
			}
		case wire.DtypeI64:
			v = rng.Uint64()
			if special {
				v = []uint64{0, 1, math.MaxUint64, math.MaxInt64, 1 << 63}[rng.IntN(5)]
			}
		}
		refPut(b, i, dt, v)
	}
}

func TestReduceAgainstReference(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, dt := range reduceDtypes {
		for _, alu := range reduceAlus {
			// Lengths around the unrolled block size exercise both loops.
			for _, n := range []int{0, 1, 2, 7, 8, 15, 16, 17, 31, 33, 100, 2048} {
				nb := n * dt.Size()
				dst, src := make([]byte, nb), make([]byte, nb)
				randElems(rng, dst, dt)
				randElems(rng, src, dt)
				want := append([]byte(nil), dst...)
				refReduce(want, src, dt, alu)
				Reduce(dst, src, dt, alu)
				if !sameElems(dst, want, dt) {
					t.Fatalf("seed %d: %v %v n=%d: got %x want %x", seed, dt, alu, n, dst, want)
				}
			}
		}
	}
}

func TestReduceSemantics(t *testing.T) {
	f32 := func(vs ...float32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b
	}
	nan := float32(math.NaN())
	negz := float32(math.Copysign(0, -1))

	// A NaN in src never replaces; a NaN in dst is never replaced.
	d := f32(1, nan, 0, 5)
	Reduce(d, f32(nan, 3, negz, 4), wire.DtypeF32, wire.AluMin)
	got := []uint32{binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:]), binary.LittleEndian.Uint32(d[8:]), binary.LittleEndian.Uint32(d[12:])}
	want := []uint32{math.Float32bits(1), math.Float32bits(nan), math.Float32bits(0), math.Float32bits(4)}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("min elem %d: got %#x want %#x", i, got[i], want[i])
		}
	}

	// Integer Add and Prod wrap; Min/Max are signed.
	i32 := func(vs ...int32) []byte {
		b := make([]byte, 4*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		}
		return b
	}
	d = i32(math.MaxInt32, -1, 1<<16)
	Reduce(d, i32(1, -1, 1<<16), wire.DtypeI32, wire.AluAdd)
	if g := int32(binary.LittleEndian.Uint32(d)); g != math.MinInt32 {
		t.Errorf("i32 add wrap: got %d", g)
	}
	d = i32(1<<16, -3)
	Reduce(d, i32(1<<16, 5), wire.DtypeI32, wire.AluProd)
	if g, h := int32(binary.LittleEndian.Uint32(d)), int32(binary.LittleEndian.Uint32(d[4:])); g != 0 || h != -15 {
		t.Errorf("i32 prod: got %d %d", g, h)
	}
	d = i32(-1)
	Reduce(d, i32(1), wire.DtypeI32, wire.AluMax)
	if g := int32(binary.LittleEndian.Uint32(d)); g != 1 {
		t.Errorf("i32 max signed: got %d", g)
	}

	// Unequal lengths: the shorter one wins, the rest of dst is untouched;
	// a partial trailing element is ignored; unknown dtype/alu do nothing.
	d = i32(1, 2, 3)
	Reduce(d, i32(10, 10)[:7], wire.DtypeI32, wire.AluAdd)
	if g := []int32{int32(binary.LittleEndian.Uint32(d)), int32(binary.LittleEndian.Uint32(d[4:])), int32(binary.LittleEndian.Uint32(d[8:]))}; g[0] != 11 || g[1] != 2 || g[2] != 3 {
		t.Errorf("short src: got %v", g)
	}
	d = i32(1)
	Reduce(d, i32(2), wire.DtypeNone, wire.AluAdd)
	Reduce(d, i32(2), wire.DtypeI32, wire.AluNone)
	Reduce(d, i32(2), wire.DtypeI32, wire.Alu(99))
	if g := int32(binary.LittleEndian.Uint32(d)); g != 1 {
		t.Errorf("unknown dtype/alu changed dst: %d", g)
	}
}

func TestReduceAllocs(t *testing.T) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	for _, dt := range reduceDtypes {
		for _, alu := range reduceAlus {
			if n := testing.AllocsPerRun(10, func() { Reduce(d, s, dt, alu) }); n != 0 {
				t.Errorf("%v %v: %v allocs", dt, alu, n)
			}
		}
	}
}

func BenchmarkReduceF32Add8K(b *testing.B) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	randElems(rand.New(rand.NewPCG(1, 2)), s, wire.DtypeF32)
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		Reduce(d, s, wire.DtypeF32, wire.AluAdd)
	}
}

func BenchmarkReduce8K(b *testing.B) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	for _, dt := range reduceDtypes {
		for _, alu := range reduceAlus {
			b.Run(dt.String()+"-"+alu.String(), func(b *testing.B) {
				b.SetBytes(int64(len(d)))
				b.ReportAllocs()
				for b.Loop() {
					Reduce(d, s, dt, alu)
				}
			})
		}
	}
}
