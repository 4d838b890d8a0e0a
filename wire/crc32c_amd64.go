//go:build amd64 && !purego

package wire

import "golang.org/x/sys/cpu"

// crcFold512 reports whether the CPU folds with 512-bit VPCLMULQDQ, and
// crcFoldEnabled whether it folds at all (256-bit VPCLMULQDQ with AVX2,
// as on AMD's Zen 3, otherwise). x/sys/cpu reports VPCLMULQDQ only with
// AVX-512, hence the CPUID of our own.
var (
	crcFold512     = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ
	crcFoldEnabled = crcFold512 || cpu.X86.HasAVX2 && cpuidVPCLMULQDQ()
)

// crcFold folds the n bytes at p (n a multiple of 64, at least 64), the
// CRC register reg taken in with the first four bytes, into a 16-byte
// remainder and returns the remainder's CRC register (from zero). In
// crc32c_amd64.s.
//
//go:noescape
func crcFold(reg uint32, p *byte, n int, k *crcFoldK) uint32

// crcFoldAVX2 is crcFold with 256-bit registers, n a multiple of 32, at
// least 32.
//
//go:noescape
func crcFoldAVX2(reg uint32, p *byte, n int, k *crcFoldK) uint32

// cpuidVPCLMULQDQ reports CPUID leaf 7's VPCLMULQDQ bit.
func cpuidVPCLMULQDQ() bool
