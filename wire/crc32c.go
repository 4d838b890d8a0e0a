package wire

import (
	"hash/crc32"
	"math/bits"
)

// CRC32C of long buffers by carry-less multiplication. hash/crc32 runs
// the SSE4.2 CRC32 instruction three ways at once (about 8 bytes a cycle
// at best); on a CPU with VPCLMULQDQ, crcFold folds the buffer 64 bytes
// per multiply (32 with 256-bit registers), four registers at once
// (Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ"), down to a 16-byte remainder R whose polynomial is
// congruent to the buffer's (so its CRC is the buffer's), then carries
// R's CRC over the tail with hash/crc32. The checksum of every received
// datagram goes through here: with hash/crc32 it was a tenth of a
// forwarding node's CPU in a reduction of 9000-byte datagrams.
//
// The reflected convention: the first byte's least significant bit is
// the highest power of x. Folding a 16-byte block B forward by d bits
// (onto the block d/8 bytes later) replaces it with B·x^d mod P, which
// fits 128 bits: its low 8 bytes L weigh x^64 more than its high 8 bytes
// H, so B·x^d ≡ L·(x^(d+64) mod P) + H·(x^d mod P), two 64×32-bit
// carry-less products.

// crcFoldMin is the shortest buffer crcUpdate folds; shorter ones go to
// hash/crc32 directly. BenchmarkCRCUpdate on a Xeon with AVX-512: 8952
// bytes in 126 ns with 512-bit registers, 245 ns with 256-bit ones and
// 539 ns with hash/crc32; 256 bytes in 21, 20 and 34 ns. Below that the
// gain is small, and small datagrams stay off the vector unit.
const crcFoldMin = 256

// crcFoldK holds the folding constants, each 128-bit lane {x^(d+64), x^d}
// for its distance d. For 512-bit registers: by 256 bytes (the
// four-register loop), by 64 bytes (one register, and merging the four),
// and the per-lane distances that fold a register's four lanes onto its
// last (48, 32 and 16 bytes; zero for the last lane itself). For 256-bit
// registers the same by 128 and 32 bytes, and the low lane onto the high
// (16 bytes). The assembly reads them at fixed offsets.
type crcFoldK struct {
	by256, by64, lanes  [8]uint64
	by128, by32, lanes2 [4]uint64
}

var crcK = func() *crcFoldK {
	k := new(crcFoldK)
	for i := 0; i < 8; i += 2 {
		k.by256[i], k.by256[i+1] = crcFoldConst(256*8+64), crcFoldConst(256*8)
		k.by64[i], k.by64[i+1] = crcFoldConst(64*8+64), crcFoldConst(64*8)
	}
	for lane := 0; lane < 3; lane++ {
		d := (48 - 16*lane) * 8
		k.lanes[2*lane], k.lanes[2*lane+1] = crcFoldConst(d+64), crcFoldConst(d)
	}
	for i := 0; i < 4; i += 2 {
		k.by128[i], k.by128[i+1] = crcFoldConst(128*8+64), crcFoldConst(128*8)
		k.by32[i], k.by32[i+1] = crcFoldConst(32*8+64), crcFoldConst(32*8)
	}
	k.lanes2[0], k.lanes2[1] = crcFoldConst(16*8+64), crcFoldConst(16*8)
	return k
}()

// crcFoldConst is the 64-bit operand that multiplies a reflected 64-bit
// half by x^n mod P: x^(n-1) mod P (its 32 coefficients reflected into
// the high half). The product of two reflected operands lands one bit
// lower than the reflected product; the missing factor x is the one taken
// off n.
func crcFoldConst(n int) uint64 {
	return uint64(bits.Reverse32(xnModP(n-1))) << 32
}

// xnModP is x^n mod P for the Castagnoli polynomial, bit i the
// coefficient of x^i.
func xnModP(n int) uint32 {
	const p = 1<<32 | 0x1EDC6F41
	r := uint64(1)
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= p
		}
	}
	return uint32(r)
}

// crcUpdate is crc32.Update(crc, castagnoli, p), folded on CPUs that
// can.
func crcUpdate(crc uint32, p []byte) uint32 {
	if !crcFoldEnabled || len(p) < crcFoldMin {
		return crc32.Update(crc, castagnoli, p)
	}
	return crcUpdateFolded(crc, p)
}

// crcUpdateFolded is crcUpdate's folding path, for len(p) >= 64.
func crcUpdateFolded(crc uint32, p []byte) uint32 {
	var n int
	var r uint32
	if crcFold512 {
		n = len(p) &^ 63
		r = crcFold(^crc, &p[0], n, crcK)
	} else {
		n = len(p) &^ 31
		r = crcFoldAVX2(^crc, &p[0], n, crcK)
	}
	// The remainder's register carried over the tail is the whole
	// buffer's register from ^crc (hash/crc32 inverts on the way in and
	// out).
	return crc32.Update(^r, castagnoli, p[n:])
}
