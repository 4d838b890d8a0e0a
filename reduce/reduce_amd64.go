//go:build amd64 && !purego

package reduce

import (
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/ndma/ndma/wire"
)

// reduceVecEnabled reports whether Apply runs the AVX2 kernels.
var reduceVecEnabled = cpu.X86.HasAVX2

// reduceVecBlk is the granule of the AVX2 kernels in bytes (one YMM
// vector), a multiple of every element size.
const reduceVecBlk = 32

// reduceVec runs the AVX2 kernel for dt and alu on the leading whole
// vectors of dst and src and returns how many bytes it processed (a
// multiple of reduceVecBlk; 0 for an unknown dtype or alu); Apply leaves
// the rest to the scalar kernels. Per element the result is the scalar kernel's, bit for
// bit, except that for float Add and Prod with NaN in both operands it
// always carries dst's payload.
//
// It returns 0 when src starts before dst and overlaps the processed
// bytes: the scalar kernels then read src elements that earlier elements
// of the same call have already written, which a vector load would miss.
func reduceVec(dst, src []byte, dt wire.Dtype, alu wire.Alu) int {
	n := min(len(dst), len(src)) &^ (reduceVecBlk - 1)
	if !reduceVecEnabled || n == 0 {
		return 0
	}
	d, s := unsafe.SliceData(dst), unsafe.SliceData(src)
	if dp, sp := uintptr(unsafe.Pointer(d)), uintptr(unsafe.Pointer(s)); sp < dp && dp-sp < uintptr(n) {
		return 0
	}
	if int(dt) >= len(avx2Kernels) || int(alu) >= len(avx2Kernels[0]) || avx2Kernels[dt][alu] == nil {
		return 0
	}
	avx2Kernels[dt][alu](d, s, n)
	return n
}

// avx2Kernels[dt][alu] is the kernel for dt and alu; nil for an unknown
// pair (wire's dtypes and ALU ops number from 1).
var avx2Kernels = [5][5]func(d, s *byte, n int){
	wire.DtypeF32: {wire.AluAdd: reduceAddF32AVX2, wire.AluMin: reduceMinF32AVX2, wire.AluMax: reduceMaxF32AVX2, wire.AluProd: reduceProdF32AVX2},
	wire.DtypeF64: {wire.AluAdd: reduceAddF64AVX2, wire.AluMin: reduceMinF64AVX2, wire.AluMax: reduceMaxF64AVX2, wire.AluProd: reduceProdF64AVX2},
	wire.DtypeI32: {wire.AluAdd: reduceAddI32AVX2, wire.AluMin: reduceMinI32AVX2, wire.AluMax: reduceMaxI32AVX2, wire.AluProd: reduceProdI32AVX2},
	wire.DtypeI64: {wire.AluAdd: reduceAddI64AVX2, wire.AluMin: reduceMinI64AVX2, wire.AluMax: reduceMaxI64AVX2, wire.AluProd: reduceProdI64AVX2},
}

// The AVX2 kernels, in reduce_amd64.s. Each applies its operation to the
// n bytes at d and s, in place at d; n must be a multiple of
// reduceVecBlk.

//go:noescape
func reduceAddF32AVX2(d, s *byte, n int)

//go:noescape
func reduceMinF32AVX2(d, s *byte, n int)

//go:noescape
func reduceMaxF32AVX2(d, s *byte, n int)

//go:noescape
func reduceProdF32AVX2(d, s *byte, n int)

//go:noescape
func reduceAddF64AVX2(d, s *byte, n int)

//go:noescape
func reduceMinF64AVX2(d, s *byte, n int)

//go:noescape
func reduceMaxF64AVX2(d, s *byte, n int)

//go:noescape
func reduceProdF64AVX2(d, s *byte, n int)

//go:noescape
func reduceAddI32AVX2(d, s *byte, n int)

//go:noescape
func reduceMinI32AVX2(d, s *byte, n int)

//go:noescape
func reduceMaxI32AVX2(d, s *byte, n int)

//go:noescape
func reduceProdI32AVX2(d, s *byte, n int)

//go:noescape
func reduceAddI64AVX2(d, s *byte, n int)

//go:noescape
func reduceMinI64AVX2(d, s *byte, n int)

//go:noescape
func reduceMaxI64AVX2(d, s *byte, n int)

//go:noescape
func reduceProdI64AVX2(d, s *byte, n int)
