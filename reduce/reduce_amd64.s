//go:build amd64 && !purego

#include "textflag.h"

// AVX2 kernels for Reduce. Each is
//
//	func name(d, s *byte, n int)
//
// and applies its operation to the n bytes at d and s, in place at d;
// n must be a multiple of 32. The main loop handles 128 bytes (four YMM
// vectors) per iteration, a second loop the remaining 32-byte vectors.
// All loads and stores are unaligned.

// DS: d = op(d, s) with d as the first source operand, so that when both
// elements are NaN the result carries d's payload (quieted). Used for Add,
// Prod and the 32-bit integer Min/Max.
#define DS(op, r, off) \
	VMOVDQU off(DI), r; \
	op off(SI), r, r; \
	VMOVDQU r, off(DI)

// SD: d = op(s, d) with s as the first source operand. MINPS(a, b) and
// MAXPS(a, b) return a only when a < b (a > b) and b otherwise, b
// unchanged, so with a = s and b = d they compute exactly
// "if s < d { d = s }": NaN on either side or equal values (±0) keep d.
#define SD(op, r, off) \
	VMOVDQU off(SI), r; \
	op off(DI), r, r; \
	VMOVDQU r, off(DI)

// MINQ, MAXQ: signed 64-bit min/max (AVX2 has no VPMINSQ): rm is the
// mask of lanes where s < d (s > d), and the blend takes s there.
#define MINQ(rd, rs, rm, off) \
	VMOVDQU off(DI), rd; \
	VMOVDQU off(SI), rs; \
	VPCMPGTQ rs, rd, rm; \
	VPBLENDVB rm, rs, rd, rd; \
	VMOVDQU rd, off(DI)

#define MAXQ(rd, rs, rm, off) \
	VMOVDQU off(DI), rd; \
	VMOVDQU off(SI), rs; \
	VPCMPGTQ rd, rs, rm; \
	VPBLENDVB rm, rs, rd, rd; \
	VMOVDQU rd, off(DI)

// PRODQ: 64-bit low multiply (AVX2 has no VPMULLQ) from 32x32->64-bit
// products: d*s mod 2^64 = lo(d)*lo(s) + (hi(d)*lo(s) + lo(d)*hi(s))<<32.
#define PRODQ(rd, rs, rt, ru, off) \
	VMOVDQU off(DI), rd; \
	VMOVDQU off(SI), rs; \
	VPSRLQ $32, rd, rt; \
	VPMULUDQ rs, rt, rt; \
	VPSRLQ $32, rs, ru; \
	VPMULUDQ rd, ru, ru; \
	VPADDQ ru, rt, rt; \
	VPSLLQ $32, rt, rt; \
	VPMULUDQ rs, rd, rd; \
	VPADDQ rt, rd, rd; \
	VMOVDQU rd, off(DI)

#define DS4(op) DS(op, Y0, 0); DS(op, Y1, 32); DS(op, Y2, 64); DS(op, Y3, 96)
#define DS1(op) DS(op, Y0, 0)
#define SD4(op) SD(op, Y0, 0); SD(op, Y1, 32); SD(op, Y2, 64); SD(op, Y3, 96)
#define SD1(op) SD(op, Y0, 0)
#define Q4(m) m(Y0, Y4, Y8, 0); m(Y1, Y5, Y9, 32); m(Y2, Y6, Y10, 64); m(Y3, Y7, Y11, 96)
#define Q1(m) m(Y0, Y4, Y8, 0)
#define P4 PRODQ(Y0, Y4, Y8, Y12, 0); PRODQ(Y1, Y5, Y9, Y13, 32); PRODQ(Y2, Y6, Y10, Y14, 64); PRODQ(Y3, Y7, Y11, Y15, 96)
#define P1 PRODQ(Y0, Y4, Y8, Y12, 0)

// KERNEL defines the function name with block4 processing 128 bytes at
// (DI, SI) and block1 processing 32.
#define KERNEL(name, block4, block1) \
TEXT name(SB), NOSPLIT, $0-24; \
	MOVQ d+0(FP), DI; \
	MOVQ s+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	CMPQ CX, $128; \
	JB   tail; \
loop4: \
	block4; \
	ADDQ $128, DI; \
	ADDQ $128, SI; \
	SUBQ $128, CX; \
	CMPQ CX, $128; \
	JAE  loop4; \
tail: \
	TESTQ CX, CX; \
	JZ   done; \
loop1: \
	block1; \
	ADDQ $32, DI; \
	ADDQ $32, SI; \
	SUBQ $32, CX; \
	JNZ  loop1; \
done: \
	VZEROUPPER; \
	RET

KERNEL(·reduceAddF32AVX2, DS4(VADDPS), DS1(VADDPS))
KERNEL(·reduceProdF32AVX2, DS4(VMULPS), DS1(VMULPS))
KERNEL(·reduceMinF32AVX2, SD4(VMINPS), SD1(VMINPS))
KERNEL(·reduceMaxF32AVX2, SD4(VMAXPS), SD1(VMAXPS))

KERNEL(·reduceAddF64AVX2, DS4(VADDPD), DS1(VADDPD))
KERNEL(·reduceProdF64AVX2, DS4(VMULPD), DS1(VMULPD))
KERNEL(·reduceMinF64AVX2, SD4(VMINPD), SD1(VMINPD))
KERNEL(·reduceMaxF64AVX2, SD4(VMAXPD), SD1(VMAXPD))

KERNEL(·reduceAddI32AVX2, DS4(VPADDD), DS1(VPADDD))
KERNEL(·reduceProdI32AVX2, DS4(VPMULLD), DS1(VPMULLD))
KERNEL(·reduceMinI32AVX2, DS4(VPMINSD), DS1(VPMINSD))
KERNEL(·reduceMaxI32AVX2, DS4(VPMAXSD), DS1(VPMAXSD))

KERNEL(·reduceAddI64AVX2, DS4(VPADDQ), DS1(VPADDQ))
KERNEL(·reduceMinI64AVX2, Q4(MINQ), Q1(MINQ))
KERNEL(·reduceMaxI64AVX2, Q4(MAXQ), Q1(MAXQ))
KERNEL(·reduceProdI64AVX2, P4, P1)
