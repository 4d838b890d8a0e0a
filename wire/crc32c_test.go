package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestCRCUpdate checks crcUpdate against hash/crc32 at every length up
// to 2 KiB and around the four-register loop's boundaries, from random
// registers and offsets (unaligned starts), with each kernel the CPU has.
func TestCRCUpdate(t *testing.T) {
	switch {
	case !crcFoldEnabled:
		t.Log("this CPU has no VPCLMULQDQ: crcUpdate is hash/crc32's")
		testCRCUpdate(t)
	case crcFold512:
		t.Run("512", testCRCUpdate)
		crcFold512 = false
		defer func() { crcFold512 = true }()
		t.Run("256", testCRCUpdate)
	default:
		t.Log("this CPU has no 512-bit VPCLMULQDQ")
		t.Run("256", testCRCUpdate)
	}
}

func testCRCUpdate(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	check := func(off, n int, reg uint32) {
		t.Helper()
		p := buf[off : off+n]
		want := crc32.Update(reg, castagnoli, p)
		if got := crcUpdate(reg, p); got != want {
			t.Fatalf("len %d offset %d register %#x: %#x, want %#x", n, off, reg, got, want)
		}
		if crcFoldEnabled && n >= 64 {
			if got := crcUpdateFolded(reg, p); got != want {
				t.Fatalf("folded, len %d offset %d register %#x: %#x, want %#x", n, off, reg, got, want)
			}
		}
	}
	for n := 0; n <= 2048; n++ {
		check(rng.IntN(64), n, rng.Uint32())
	}
	for _, n := range []int{4095, 4096, 4097, 8952, 8960, 9000, 65507, 65536} {
		for range 20 {
			check(rng.IntN(64), n, rng.Uint32())
		}
	}
	check(0, 1024, 0)
	check(0, 1024, 0xFFFFFFFF)
}

func BenchmarkCRCUpdate(b *testing.B) {
	for _, n := range []int{64, 128, 256, 512, 1024, 8952} {
		p := make([]byte, n)
		kernel := func(name string, on bool, wide bool) {
			b.Run(name+"/"+strconv.Itoa(n), func(b *testing.B) {
				if !on {
					b.Skip("not on this CPU")
				}
				defer func(w bool) { crcFold512 = w }(crcFold512)
				crcFold512 = wide
				b.SetBytes(int64(n))
				for b.Loop() {
					crcUpdateFolded(0, p)
				}
			})
		}
		kernel("fold512", crcFold512, true)
		kernel("fold256", crcFoldEnabled, false)
		b.Run("stdlib/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, castagnoli, p)
			}
		})
	}
}
