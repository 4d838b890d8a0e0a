package reduce

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ndma/ndma/reduce/reducetest"
	"github.com/ndma/ndma/wire"
)

func TestReduceAgainstReference(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			// Lengths around the unrolled block size exercise both loops.
			for _, n := range []int{0, 1, 2, 7, 8, 15, 16, 17, 31, 33, 100, 2048} {
				nb := n * dt.Size()
				dst, src := make([]byte, nb), make([]byte, nb)
				reducetest.Rand(rng, dst, dt)
				reducetest.Rand(rng, src, dt)
				want := append([]byte(nil), dst...)
				reducetest.Ref(want, src, dt, alu)
				Apply(dst, src, dt, alu)
				if !reducetest.Same(dst, want, dt) {
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
	Apply(d, f32(nan, 3, negz, 4), wire.DtypeF32, wire.AluMin)
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
	Apply(d, i32(1, -1, 1<<16), wire.DtypeI32, wire.AluAdd)
	if g := int32(binary.LittleEndian.Uint32(d)); g != math.MinInt32 {
		t.Errorf("i32 add wrap: got %d", g)
	}
	d = i32(1<<16, -3)
	Apply(d, i32(1<<16, 5), wire.DtypeI32, wire.AluProd)
	if g, h := int32(binary.LittleEndian.Uint32(d)), int32(binary.LittleEndian.Uint32(d[4:])); g != 0 || h != -15 {
		t.Errorf("i32 prod: got %d %d", g, h)
	}
	d = i32(-1)
	Apply(d, i32(1), wire.DtypeI32, wire.AluMax)
	if g := int32(binary.LittleEndian.Uint32(d)); g != 1 {
		t.Errorf("i32 max signed: got %d", g)
	}

	// Unequal lengths: the shorter one wins, the rest of dst is untouched;
	// a partial trailing element is ignored; unknown dtype/alu do nothing.
	d = i32(1, 2, 3)
	Apply(d, i32(10, 10)[:7], wire.DtypeI32, wire.AluAdd)
	if g := []int32{int32(binary.LittleEndian.Uint32(d)), int32(binary.LittleEndian.Uint32(d[4:])), int32(binary.LittleEndian.Uint32(d[8:]))}; g[0] != 11 || g[1] != 2 || g[2] != 3 {
		t.Errorf("short src: got %v", g)
	}
	d = i32(1)
	Apply(d, i32(2), wire.DtypeNone, wire.AluAdd)
	Apply(d, i32(2), wire.DtypeI32, wire.AluNone)
	Apply(d, i32(2), wire.DtypeI32, wire.Alu(99))
	if g := int32(binary.LittleEndian.Uint32(d)); g != 1 {
		t.Errorf("unknown dtype/alu changed dst: %d", g)
	}
}

func TestReduceAllocs(t *testing.T) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			if n := testing.AllocsPerRun(10, func() { Apply(d, s, dt, alu) }); n != 0 {
				t.Errorf("%v %v: %v allocs", dt, alu, n)
			}
		}
	}
}

func BenchmarkReduceF32Add8K(b *testing.B) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	reducetest.Rand(rand.New(rand.NewPCG(1, 2)), s, wire.DtypeF32)
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		Apply(d, s, wire.DtypeF32, wire.AluAdd)
	}
}

func BenchmarkReduce8K(b *testing.B) {
	d, s := make([]byte, 8192), make([]byte, 8192)
	for _, dt := range reducetest.Dtypes {
		for _, alu := range reducetest.Alus {
			b.Run(dt.String()+"-"+alu.String(), func(b *testing.B) {
				b.SetBytes(int64(len(d)))
				b.ReportAllocs()
				for b.Loop() {
					Apply(d, s, dt, alu)
				}
			})
		}
	}
}
