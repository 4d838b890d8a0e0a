// Package reducetest holds a naive reference of package reduce's
// kernels and random inputs for them, for the tests of reduce and of the
// layers that reduce with it (the switch's aggregation).
package reducetest

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"

	"github.com/ndma/ndma/wire"
)

// Dtypes and Alus are the element types and operations reduce.Apply
// implements.
var (
	Dtypes = []wire.Dtype{wire.DtypeF32, wire.DtypeF64, wire.DtypeI32, wire.DtypeI64}
	Alus   = []wire.Alu{wire.AluAdd, wire.AluMin, wire.AluMax, wire.AluProd}
)

// RefElem is the naive one-element reference: d = alu(d, s) for
// elements of type dt held in the low bits of d and s. Floats are computed
// in their own precision (float32 arithmetic is exact-rounded, as Go
// guarantees for float32 operands); integers through math/big and then
// truncated to the element width, which checks the wrap-around
// independently of Go's fixed-width arithmetic.
func RefElem(d, s uint64, dt wire.Dtype, alu wire.Alu) uint64 {
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

// Get and Put read and write element i of b.
func Get(b []byte, i int, dt wire.Dtype) uint64 {
	if dt.Size() == 4 {
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

func Put(b []byte, i int, dt wire.Dtype, v uint64) {
	if dt.Size() == 4 {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		return
	}
	binary.LittleEndian.PutUint64(b[8*i:], v)
}

// Ref is the naive reference for reduce.Apply over whole buffers.
func Ref(dst, src []byte, dt wire.Dtype, alu wire.Alu) {
	n := min(len(dst), len(src)) / dt.Size()
	for i := 0; i < n; i++ {
		Put(dst, i, dt, RefElem(Get(dst, i, dt), Get(src, i, dt), dt, alu))
	}
}

// Same reports whether a and b hold the same elements bit for bit,
// except that any two NaNs match: which operand's NaN an IEEE operation on
// two NaNs returns is unspecified (it depends on the order in which the
// compiler emits the operands), so reduce.Apply's contract leaves it open.
func Same(a, b []byte, dt wire.Dtype) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a)/dt.Size(); i++ {
		x, y := Get(a, i, dt), Get(b, i, dt)
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

// Rand fills b with random elements of dt, including the special
// values (NaN, ±Inf, ±0, extremes) with some probability.
func Rand(rng *rand.Rand, b []byte, dt wire.Dtype) {
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
		Put(b, i, dt, v)
	}
}
