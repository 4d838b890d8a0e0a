package reduce

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ndma/ndma/reduce/reducetest"
	"github.com/ndma/ndma/wire"
)

// scalarKernel returns the scalar Go kernel for dt and alu.
func scalarKernel(dt wire.Dtype, alu wire.Alu) func(d, s []byte) {
	k := map[wire.Dtype]map[wire.Alu]func(d, s []byte){
		wire.DtypeF32: {wire.AluAdd: reduceAddF32, wire.AluMin: reduceMinF32, wire.AluMax: reduceMaxF32, wire.AluProd: reduceProdF32},
		wire.DtypeF64: {wire.AluAdd: reduceAddF64, wire.AluMin: reduceMinF64, wire.AluMax: reduceMaxF64, wire.AluProd: reduceProdF64},
		wire.DtypeI32: {wire.AluAdd: reduceAddI32, wire.AluMin: reduceMinI32, wire.AluMax: reduceMaxI32, wire.AluProd: reduceProdI32},
		wire.DtypeI64: {wire.AluAdd: reduceAddI64, wire.AluMin: reduceMinI64, wire.AluMax: reduceMaxI64, wire.AluProd: reduceProdI64},
	}
	return k[dt][alu]
}

// vecSpecials are the element values the vector tests mix in, as bits:
// NaNs with distinct payloads (quiet and signalling, both signs), ±0,
// ±Inf, denormals, extremes, and small values whose products underflow.
var vecSpecials = map[wire.Dtype][]uint64{
	wire.DtypeF32: {
		0x7fc00000, 0x7fc00001, 0xffc12345, 0x7f800001, 0xff800abc, 0x7fffffff,
		0x00000000, 0x80000000, 0x7f800000, 0xff800000,
		0x00000001, 0x807fffff, 0x00400000, 0x00800000, 0x7f7fffff, 0xff7fffff,
		uint64(math.Float32bits(1)), uint64(math.Float32bits(-1)), uint64(math.Float32bits(1e-20)), uint64(math.Float32bits(-3e-25)),
	},
	wire.DtypeF64: {
		0x7ff8000000000000, 0x7ff8000000000001, 0xfff8123456789abc, 0x7ff0000000000001, 0xfff00000000abcde, 0x7fffffffffffffff,
		0x0000000000000000, 0x8000000000000000, 0x7ff0000000000000, 0xfff0000000000000,
		0x0000000000000001, 0x800fffffffffffff, 0x0008000000000000, 0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff,
		math.Float64bits(1), math.Float64bits(-1), math.Float64bits(1e-160), math.Float64bits(-3e-170),
	},
	wire.DtypeI32: {0, 1, 2, 0xffffffff, 0xfffffffe, 0x7fffffff, 0x80000000, 0x80000001, 0x10000, 0xffff0000},
	wire.DtypeI64: {0, 1, 2, math.MaxUint64, math.MaxUint64 - 1, math.MaxInt64, 1 << 63, 1<<63 + 1, 1 << 32, 0xffffffff, 0xffffffff00000000},
}

// vecFill fills b with elements of dt: a third specials, a third random
// bits, a third reducetest.Rand' mix.
func vecFill(rng *rand.Rand, b []byte, dt wire.Dtype) {
	reducetest.Rand(rng, b, dt)
	sp := vecSpecials[dt]
	for i := range len(b) / dt.Size() {
		switch rng.IntN(3) {
		case 0:
			reducetest.Put(b, i, dt, sp[rng.IntN(len(sp))])
		case 1:
			reducetest.Put(b, i, dt, rng.Uint64())
		}
	}
}

// isNaNBits reports whether v holds a NaN of dt; quietNaN sets its quiet
// bit.
func isNaNBits(v uint64, dt wire.Dtype) bool {
	switch dt {
	case wire.DtypeF32:
		return v&0x7f800000 == 0x7f800000 && v&0x007fffff != 0
	case wire.DtypeF64:
		return v&0x7ff0000000000000 == 0x7ff0000000000000 && v&0x000fffffffffffff != 0
	}
	return false
}

func quietNaN(v uint64, dt wire.Dtype) uint64 {
	if dt == wire.DtypeF32 {
		return v | 0x00400000
	}
	return v | 0x0008000000000000
}

// vecBytes returns how many leading bytes Apply hands to the vector
// kernel for these arguments, computed independently of reduceVec.
func vecBytes(dst, src []byte, dt wire.Dtype, alu wire.Alu) int {
	if !reduceVecEnabled {
		return 0
	}
	return min(len(dst), len(src)) / 32 * 32
}

// wantReduce is what Apply must leave in dst for non-overlapping dst and
// src: the vector kernel's result on the first nv bytes, the scalar
// kernel's on the rest. The vector result is the scalar kernel's except
// that for float Add and Prod of two NaNs it is dst's NaN, quieted.
func wantReduce(dst, src []byte, dt wire.Dtype, alu wire.Alu, nv int) []byte {
	k := scalarKernel(dt, alu)
	want := bytes.Clone(dst)
	k(want[:nv], src[:nv])
	k(want[nv:], src[nv:])
	if (alu == wire.AluAdd || alu == wire.AluProd) && (dt == wire.DtypeF32 || dt == wire.DtypeF64) {
		for i := range nv / dt.Size() {
			if d, s := reducetest.Get(dst, i, dt), reducetest.Get(src, i, dt); isNaNBits(d, dt) && isNaNBits(s, dt) {
				reducetest.Put(want, i, dt, quietNaN(d, dt))
			}
		}
	}
	return want
}

// checkReduce runs Apply on copies of dst and src placed at offsets
// doff and soff into guarded buffers and compares the result with
// wantReduce, bit for bit, and checks that nothing else changed.
func checkReduce(t *testing.T, dst, src []byte, doff, soff int, dt wire.Dtype, alu wire.Alu) {
	t.Helper()
	const guard = 40
	dbuf := bytes.Repeat([]byte{0xa5}, doff+len(dst)+guard)
	sbuf := bytes.Repeat([]byte{0x5a}, soff+len(src)+guard)
	d := dbuf[doff : doff+len(dst)]
	s := sbuf[soff : soff+len(src)]
	copy(d, dst)
	copy(s, src)
	nv := vecBytes(d, s, dt, alu)
	if got := reduceVec(bytes.Clone(d), s, dt, alu); got != nv {
		t.Fatalf("%v %v len %d/%d: reduceVec processed %d bytes, want %d", dt, alu, len(dst), len(src), got, nv)
	}
	want := wantReduce(dst, src, dt, alu, nv)
	Apply(d, s, dt, alu)
	if !bytes.Equal(d, want) {
		for i := range min(len(d), len(src)) / dt.Size() {
			if g, w := reducetest.Get(d, i, dt), reducetest.Get(want, i, dt); g != w {
				t.Fatalf("%v %v len %d/%d off %d/%d elem %d: got %#x want %#x (d %#x s %#x, vector bytes %d)",
					dt, alu, len(dst), len(src), doff, soff, i, g, w, reducetest.Get(dst, i, dt), reducetest.Get(src, i, dt), nv)
			}
		}
		t.Fatalf("%v %v len %d/%d off %d/%d: dst differs from want beyond the reduced elements", dt, alu, len(dst), len(src), doff, soff)
	}
	if !bytes.Equal(s, src) {
		t.Fatalf("%v %v len %d/%d: src changed", dt, alu, len(dst), len(src))
	}
	for i, b := range dbuf[:doff] {
		if b != 0xa5 {
			t.Fatalf("%v %v: byte %d before dst changed", dt, alu, i)
		}
	}
	for i, b := range dbuf[doff+len(dst):] {
		if b != 0xa5 {
			t.Fatalf("%v %v: byte %d after dst changed", dt, alu, i)
		}
	}
}

func TestReduceVecMatchesScalar(t *testing.T) {
	t.Logf("vector kernels enabled: %v", reduceVecEnabled)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)
	lengths := []int{}
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 1024, 4095, 4096, 8192+36, 16384+7)
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			for _, n := range lengths {
				offs := 4
				if n > 300 {
					offs = 2
				}
				for doff := range offs {
					for soff := range offs {
						// src shorter, equal or longer than dst.
						sn := max(0, n+rng.IntN(17)-8)
						if rng.IntN(2) == 0 {
							sn = n
						}
						dst, src := make([]byte, n), make([]byte, sn)
						vecFill(rng, dst, dt)
						vecFill(rng, src, dt)
						checkReduce(t, dst, src, doff, soff, dt, alu)
					}
				}
			}
		}
	}
}

// TestReduceVecSpecialPairs reduces every pair of special values, laid
// out so that most pairs fall in the vector part.
func TestReduceVecSpecialPairs(t *testing.T) {
	for _, dt := range reducetest.Dtypes {
		sp := vecSpecials[dt]
		var ds, ss []uint64
		for _, a := range sp {
			for _, b := range sp {
				ds, ss = append(ds, a), append(ss, b)
			}
		}
		dst, src := make([]byte, len(ds)*dt.Size()), make([]byte, len(ss)*dt.Size())
		for i := range ds {
			reducetest.Put(dst, i, dt, ds[i])
			reducetest.Put(src, i, dt, ss[i])
		}
		for _, alu := range reducetest.Alus {
			checkReduce(t, dst, src, 0, 0, dt, alu)
			checkReduce(t, dst, src, 1, 3, dt, alu)
			// The same pairs, each repeated over a whole vector.
			n := 32 / dt.Size()
			rd, rs := make([]byte, 0, len(dst)*n), make([]byte, 0, len(src)*n)
			for i := range ds {
				for range n {
					rd = append(rd, dst[i*dt.Size():(i+1)*dt.Size()]...)
					rs = append(rs, src[i*dt.Size():(i+1)*dt.Size()]...)
				}
			}
			checkReduce(t, rd, rs, 0, 0, dt, alu)
		}
	}
}

// TestReduceVecNaNPayload checks which NaN a float Add or Prod of two
// NaNs returns in the vector part: dst's, quieted.
func TestReduceVecNaNPayload(t *testing.T) {
	if !reduceVecEnabled {
		t.Skip("no vector kernels")
	}
	for _, dt := range []wire.Dtype{wire.DtypeF32, wire.DtypeF64} {
		for _, alu := range []wire.Alu{wire.AluAdd, wire.AluProd} {
			for _, pair := range [][2]uint64{{0, 1}, {1, 0}, {2, 3}, {3, 2}, {4, 0}, {0, 4}} {
				sp := vecSpecials[dt] // 0..5 are NaNs with distinct payloads
				a, b := sp[pair[0]], sp[pair[1]]
				n := 256 / dt.Size()
				dst, src := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				for i := range n {
					reducetest.Put(dst, i, dt, a)
					reducetest.Put(src, i, dt, b)
				}
				Apply(dst, src, dt, alu)
				for i := range n {
					if g := reducetest.Get(dst, i, dt); g != quietNaN(a, dt) {
						t.Fatalf("%v %v NaN %#x, NaN %#x: elem %d = %#x, want %#x", dt, alu, a, b, i, g, quietNaN(a, dt))
					}
				}
			}
		}
	}
}

// TestReduceVecOverlap runs Apply with dst and src overlapping in one
// buffer, src before and after dst, and compares with the scalar kernel
// on the same layout: element by element in order, so an element of src
// that an earlier element of dst overwrote is read with its new value.
func TestReduceVecOverlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			for _, n := range []int{32, 100, 256, 1000} {
				for _, so := range []int{0, 1, 4, 8, 31, 32, 33, 64, 127, 128, 129, 200, 512} {
					for _, do := range []int{0, 1, 4, 8, 31, 32, 64, 128, 129, 200} {
						buf := make([]byte, 1600)
						// No NaNs: which of two NaNs an Add returns may differ
						// by position, and positions shift with the overlap.
						for i := range len(buf) / 8 {
							reducetest.Put(buf, i, wire.DtypeI64, math.Float64bits(rng.NormFloat64()))
						}
						for i := range buf {
							if rng.IntN(4) == 0 {
								buf[i] = byte(rng.IntN(16))
							}
						}
						if dt == wire.DtypeF32 || dt == wire.DtypeF64 {
							for i := range len(buf) / dt.Size() {
								if isNaNBits(reducetest.Get(buf, i, dt), dt) {
									reducetest.Put(buf, i, dt, 0)
								}
							}
						}
						want := bytes.Clone(buf)
						scalarKernel(dt, alu)(want[do:do+n], want[so:so+n])
						got := bytes.Clone(buf)
						Apply(got[do:do+n], got[so:so+n], dt, alu)
						if !bytes.Equal(got, want) {
							t.Fatalf("%v %v n %d dst at %d src at %d: result differs from the scalar kernel", dt, alu, n, do, so)
						}
					}
				}
			}
		}
	}
}

// TestReduceNoVec checks the build without vector kernels (other
// architectures, -tags purego, or no AVX2): reduceVec does nothing and
// Apply is exactly the scalar kernels, NaN payloads included.
func TestReduceNoVec(t *testing.T) {
	if reduceVecEnabled {
		t.Skip("vector kernels enabled; run with -tags purego to test the scalar-only build")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			for _, n := range []int{0, 3, 32, 64, 100, 257, 4096} {
				dst, src := make([]byte, n), make([]byte, n)
				vecFill(rng, dst, dt)
				vecFill(rng, src, dt)
				if got := reduceVec(dst, src, dt, alu); got != 0 {
					t.Fatalf("reduceVec processed %d bytes", got)
				}
				want := bytes.Clone(dst)
				scalarKernel(dt, alu)(want, src)
				Apply(dst, src, dt, alu)
				if !bytes.Equal(dst, want) {
					t.Fatalf("%v %v n %d: Reduce differs from the scalar kernel", dt, alu, n)
				}
			}
		}
	}
}

// BenchmarkReduce8KScalar is BenchmarkReduce8K on the scalar kernels
// alone, for comparison with the vector path.
func BenchmarkReduce8KScalar(b *testing.B) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			k := scalarKernel(dt, alu)
			b.Run(dt.String()+"-"+alu.String(), func(b *testing.B) {
				b.SetBytes(int64(len(d)))
				b.ReportAllocs()
				for b.Loop() {
					k(d, s)
				}
			})
		}
	}
}
