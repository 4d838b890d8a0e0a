//go:build amd64 && !purego

#include "textflag.h"

// func crcFold(reg uint32, p *byte, n int, k *crcFoldK) uint32
//
// Z0-Z3 hold the four 64-byte blocks in flight; Z10, Z11 and Z12 the
// constants for folding by 256 bytes, by 64 bytes, and lanes onto the
// last lane. VPCLMULQDQ $0x00 multiplies each lane's low halves, $0x11
// its high halves; VPTERNLOGQ $0x96 XORs three operands.
TEXT ·crcFold(SB), NOSPLIT, $0-36
	MOVL reg+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX

	VMOVDQU64 0(DX), Z10
	VMOVDQU64 64(DX), Z11
	VMOVDQU64 128(DX), Z12

	// The register goes in with the first four bytes.
	VMOVDQU64 0(SI), Z0
	VMOVD     AX, X5
	VPXORQ    Z5, Z0, Z0
	ADDQ      $64, SI
	SUBQ      $64, CX
	CMPQ      CX, $192
	JB        one

	VMOVDQU64 0(SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	ADDQ      $192, SI
	SUBQ      $192, CX

four:
	CMPQ       CX, $256
	JB         merge
	VPCLMULQDQ $0x00, Z10, Z0, Z4
	VPCLMULQDQ $0x11, Z10, Z0, Z0
	VPTERNLOGQ $0x96, 0(SI), Z4, Z0
	VPCLMULQDQ $0x00, Z10, Z1, Z5
	VPCLMULQDQ $0x11, Z10, Z1, Z1
	VPTERNLOGQ $0x96, 64(SI), Z5, Z1
	VPCLMULQDQ $0x00, Z10, Z2, Z6
	VPCLMULQDQ $0x11, Z10, Z2, Z2
	VPTERNLOGQ $0x96, 128(SI), Z6, Z2
	VPCLMULQDQ $0x00, Z10, Z3, Z7
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	VPTERNLOGQ $0x96, 192(SI), Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        four

merge:
	// Z0 onto Z1, Z1 onto Z2, Z2 onto Z3, 64 bytes each.
	VPCLMULQDQ $0x00, Z11, Z0, Z4
	VPCLMULQDQ $0x11, Z11, Z0, Z0
	VPTERNLOGQ $0x96, Z4, Z0, Z1
	VPCLMULQDQ $0x00, Z11, Z1, Z4
	VPCLMULQDQ $0x11, Z11, Z1, Z1
	VPTERNLOGQ $0x96, Z4, Z1, Z2
	VPCLMULQDQ $0x00, Z11, Z2, Z4
	VPCLMULQDQ $0x11, Z11, Z2, Z2
	VPTERNLOGQ $0x96, Z4, Z2, Z3
	VMOVDQA64  Z3, Z0

one:
	CMPQ       CX, $64
	JB         lanes
	VPCLMULQDQ $0x00, Z11, Z0, Z4
	VPCLMULQDQ $0x11, Z11, Z0, Z0
	VPTERNLOGQ $0x96, 0(SI), Z4, Z0
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        one

lanes:
	// Lanes 0-2 folded onto lane 3 (whose constant is zero).
	VPCLMULQDQ    $0x00, Z12, Z0, Z4
	VPCLMULQDQ    $0x11, Z12, Z0, Z5
	VPXORQ        Z4, Z5, Z4
	VEXTRACTI32X4 $3, Z0, X6
	VEXTRACTI32X4 $1, Z4, X7
	VEXTRACTI32X4 $2, Z4, X8
	VPXOR         X4, X6, X6
	VPXOR         X7, X8, X7
	VPXOR         X7, X6, X6

	// The remainder's CRC register from zero.
	VMOVQ   X6, AX
	VPEXTRQ $1, X6, BX
	XORL    DX, DX
	CRC32Q  AX, DX
	CRC32Q  BX, DX
	MOVL    DX, ret+32(FP)
	VZEROUPPER
	RET

// func crcFoldAVX2(reg uint32, p *byte, n int, k *crcFoldK) uint32
//
// crcFold with 256-bit registers (VEX VPCLMULQDQ, no AVX-512): Y0-Y3
// hold the four 32-byte blocks in flight; Y10, Y11 and Y12 the constants
// for folding by 128 bytes, by 32 bytes, and the low lane onto the high.
TEXT ·crcFoldAVX2(SB), NOSPLIT, $0-36
	MOVL reg+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), DX

	VMOVDQU 192(DX), Y10
	VMOVDQU 224(DX), Y11
	VMOVDQU 256(DX), Y12

	VMOVDQU 0(SI), Y0
	VMOVD   AX, X5
	VPXOR   Y5, Y0, Y0
	ADDQ    $32, SI
	SUBQ    $32, CX
	CMPQ    CX, $96
	JB      one

	VMOVDQU 0(SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	ADDQ    $96, SI
	SUBQ    $96, CX

four:
	CMPQ       CX, $128
	JB         merge
	VPCLMULQDQ $0x00, Y10, Y0, Y4
	VPCLMULQDQ $0x11, Y10, Y0, Y0
	VPXOR      0(SI), Y4, Y4
	VPXOR      Y4, Y0, Y0
	VPCLMULQDQ $0x00, Y10, Y1, Y5
	VPCLMULQDQ $0x11, Y10, Y1, Y1
	VPXOR      32(SI), Y5, Y5
	VPXOR      Y5, Y1, Y1
	VPCLMULQDQ $0x00, Y10, Y2, Y6
	VPCLMULQDQ $0x11, Y10, Y2, Y2
	VPXOR      64(SI), Y6, Y6
	VPXOR      Y6, Y2, Y2
	VPCLMULQDQ $0x00, Y10, Y3, Y7
	VPCLMULQDQ $0x11, Y10, Y3, Y3
	VPXOR      96(SI), Y7, Y7
	VPXOR      Y7, Y3, Y3
	ADDQ       $128, SI
	SUBQ       $128, CX
	JMP        four

merge:
	VPCLMULQDQ $0x00, Y11, Y0, Y4
	VPCLMULQDQ $0x11, Y11, Y0, Y0
	VPXOR      Y4, Y1, Y1
	VPXOR      Y0, Y1, Y1
	VPCLMULQDQ $0x00, Y11, Y1, Y4
	VPCLMULQDQ $0x11, Y11, Y1, Y1
	VPXOR      Y4, Y2, Y2
	VPXOR      Y1, Y2, Y2
	VPCLMULQDQ $0x00, Y11, Y2, Y4
	VPCLMULQDQ $0x11, Y11, Y2, Y2
	VPXOR      Y4, Y3, Y3
	VPXOR      Y2, Y3, Y0

one:
	CMPQ       CX, $32
	JB         lanes
	VPCLMULQDQ $0x00, Y11, Y0, Y4
	VPCLMULQDQ $0x11, Y11, Y0, Y0
	VPXOR      0(SI), Y4, Y4
	VPXOR      Y4, Y0, Y0
	ADDQ       $32, SI
	SUBQ       $32, CX
	JMP        one

lanes:
	// Lane 0 folded onto lane 1 (whose constant is zero).
	VPCLMULQDQ   $0x00, Y12, Y0, Y4
	VPCLMULQDQ   $0x11, Y12, Y0, Y5
	VPXOR        Y4, Y5, Y4
	VEXTRACTI128 $1, Y0, X6
	VPXOR        X4, X6, X6

	VMOVQ   X6, AX
	VPEXTRQ $1, X6, BX
	XORL    DX, DX
	CRC32Q  AX, DX
	CRC32Q  BX, DX
	MOVL    DX, ret+32(FP)
	VZEROUPPER
	RET

// func cpuidVPCLMULQDQ() bool
TEXT ·cpuidVPCLMULQDQ(SB), NOSPLIT, $0-1
	MOVL  $7, AX
	XORL  CX, CX
	CPUID
	SHRL  $10, CX
	ANDL  $1, CX
	MOVB  CX, ret+0(FP)
	RET
