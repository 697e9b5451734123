//go:build amd64 && !purego

#include "textflag.h"

// Byte shuffle kernels for typesizes 2, 4 and 8.
//
// All of them rest on one step, an "unpack stage": seen as one array A of
// 16*R bytes held in R registers, the stage makes B with B[2m] = A[m] and
// B[2m+1] = A[8R+m], that is B[2k] = unpacklo(A[k], A[k+R/2]) and
// B[2k+1] = unpackhi(A[k], A[k+R/2]). It rotates the bits of every byte's
// index left by one. A group of 16 elements of T = 2^t bytes has a 4+t bit
// index: element-major (element bits, then byte bits) before the shuffle,
// plane-major (byte bits, then element bits) after it. Unshuffling rotates
// the index left by t bits (t stages), shuffling by 4 bits (4 stages).
//
// The AVX2 kernels run the same stages on both 128-bit lanes at once: lane 0
// holds elements 0-15 of a group of 32, lane 1 elements 16-31.

// Two-register stage: b0, b1 = lo(a0, a1), hi(a0, a1).
#define STAGE2(a0, a1, b0, b1) \
	MOVO a0, b0; \
	MOVO a0, b1; \
	PUNPCKLBW a1, b0; \
	PUNPCKHBW a1, b1

#define STAGE4(a0, a1, a2, a3, b0, b1, b2, b3) \
	STAGE2(a0, a2, b0, b1); \
	STAGE2(a1, a3, b2, b3)

#define STAGE8(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7) \
	STAGE2(a0, a4, b0, b1); \
	STAGE2(a1, a5, b2, b3); \
	STAGE2(a2, a6, b4, b5); \
	STAGE2(a3, a7, b6, b7)

#define VSTAGE2(a0, a1, b0, b1) \
	VPUNPCKLBW a1, a0, b0; \
	VPUNPCKHBW a1, a0, b1

#define VSTAGE4(a0, a1, a2, a3, b0, b1, b2, b3) \
	VSTAGE2(a0, a2, b0, b1); \
	VSTAGE2(a1, a3, b2, b3)

#define VSTAGE8(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7) \
	VSTAGE2(a0, a4, b0, b1); \
	VSTAGE2(a1, a5, b2, b3); \
	VSTAGE2(a2, a6, b4, b5); \
	VSTAGE2(a3, a7, b6, b7)

// func unshuffle2SSE2(dst, p0, p1 *byte, n int)
// n is a multiple of 16.
TEXT ·unshuffle2SSE2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), R8
	MOVQ p1+16(FP), R9
	MOVQ n+24(FP), CX
	XORQ AX, AX
	JMP  u2s_test

u2s_loop:
	MOVOU (R8)(AX*1), X0
	MOVOU (R9)(AX*1), X1
	STAGE2(X0, X1, X2, X3)
	MOVOU X2, (DI)
	MOVOU X3, 16(DI)
	ADDQ  $32, DI
	ADDQ  $16, AX

u2s_test:
	CMPQ AX, CX
	JB   u2s_loop
	RET

// func unshuffle4SSE2(dst, p0, p1, p2, p3 *byte, n int)
// n is a multiple of 16.
TEXT ·unshuffle4SSE2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), R8
	MOVQ p1+16(FP), R9
	MOVQ p2+24(FP), R10
	MOVQ p3+32(FP), R11
	MOVQ n+40(FP), CX
	XORQ AX, AX
	JMP  u4s_test

u4s_loop:
	MOVOU (R8)(AX*1), X0
	MOVOU (R9)(AX*1), X1
	MOVOU (R10)(AX*1), X2
	MOVOU (R11)(AX*1), X3
	STAGE4(X0, X1, X2, X3, X4, X5, X6, X7)
	STAGE4(X4, X5, X6, X7, X0, X1, X2, X3)
	MOVOU X0, (DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	ADDQ  $64, DI
	ADDQ  $16, AX

u4s_test:
	CMPQ AX, CX
	JB   u4s_loop
	RET

// func unshuffle8SSE2(dst *byte, p *[8]*byte, n int)
// n is a multiple of 16.
TEXT ·unshuffle8SSE2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ 0(SI), R8
	MOVQ 8(SI), R9
	MOVQ 16(SI), R10
	MOVQ 24(SI), R11
	MOVQ 32(SI), R12
	MOVQ 40(SI), R13
	MOVQ 48(SI), R14
	MOVQ 56(SI), DX
	XORQ AX, AX
	JMP  u8s_test

u8s_loop:
	MOVOU (R8)(AX*1), X0
	MOVOU (R9)(AX*1), X1
	MOVOU (R10)(AX*1), X2
	MOVOU (R11)(AX*1), X3
	MOVOU (R12)(AX*1), X4
	MOVOU (R13)(AX*1), X5
	MOVOU (R14)(AX*1), X6
	MOVOU (DX)(AX*1), X7
	STAGE8(X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15)
	STAGE8(X8, X9, X10, X11, X12, X13, X14, X15, X0, X1, X2, X3, X4, X5, X6, X7)
	STAGE8(X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15)
	MOVOU X8, (DI)
	MOVOU X9, 16(DI)
	MOVOU X10, 32(DI)
	MOVOU X11, 48(DI)
	MOVOU X12, 64(DI)
	MOVOU X13, 80(DI)
	MOVOU X14, 96(DI)
	MOVOU X15, 112(DI)
	ADDQ  $128, DI
	ADDQ  $16, AX

u8s_test:
	CMPQ AX, CX
	JB   u8s_loop
	RET

// func unshuffle2AVX2(dst, p0, p1 *byte, n int)
// n is a multiple of 32.
TEXT ·unshuffle2AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), R8
	MOVQ p1+16(FP), R9
	MOVQ n+24(FP), CX
	XORQ AX, AX
	JMP  u2a_test

u2a_loop:
	VMOVDQU    (R8)(AX*1), Y0
	VMOVDQU    (R9)(AX*1), Y1
	VSTAGE2(Y0, Y1, Y2, Y3)
	VPERM2I128 $0x20, Y3, Y2, Y0
	VPERM2I128 $0x31, Y3, Y2, Y1
	VMOVDQU    Y0, (DI)
	VMOVDQU    Y1, 32(DI)
	ADDQ       $64, DI
	ADDQ       $32, AX

u2a_test:
	CMPQ AX, CX
	JB   u2a_loop
	VZEROUPPER
	RET

// func unshuffle4AVX2(dst, p0, p1, p2, p3 *byte, n int)
// n is a multiple of 32.
TEXT ·unshuffle4AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), R8
	MOVQ p1+16(FP), R9
	MOVQ p2+24(FP), R10
	MOVQ p3+32(FP), R11
	MOVQ n+40(FP), CX
	XORQ AX, AX
	JMP  u4a_test

u4a_loop:
	VMOVDQU    (R8)(AX*1), Y0
	VMOVDQU    (R9)(AX*1), Y1
	VMOVDQU    (R10)(AX*1), Y2
	VMOVDQU    (R11)(AX*1), Y3
	VSTAGE4(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VSTAGE4(Y4, Y5, Y6, Y7, Y0, Y1, Y2, Y3)
	VPERM2I128 $0x20, Y1, Y0, Y4
	VPERM2I128 $0x20, Y3, Y2, Y5
	VPERM2I128 $0x31, Y1, Y0, Y6
	VPERM2I128 $0x31, Y3, Y2, Y7
	VMOVDQU    Y4, (DI)
	VMOVDQU    Y5, 32(DI)
	VMOVDQU    Y6, 64(DI)
	VMOVDQU    Y7, 96(DI)
	ADDQ       $128, DI
	ADDQ       $32, AX

u4a_test:
	CMPQ AX, CX
	JB   u4a_loop
	VZEROUPPER
	RET

// func unshuffle8AVX2(dst *byte, p *[8]*byte, n int)
// n is a multiple of 32.
TEXT ·unshuffle8AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ 0(SI), R8
	MOVQ 8(SI), R9
	MOVQ 16(SI), R10
	MOVQ 24(SI), R11
	MOVQ 32(SI), R12
	MOVQ 40(SI), R13
	MOVQ 48(SI), R14
	MOVQ 56(SI), DX
	XORQ AX, AX
	JMP  u8a_test

u8a_loop:
	VMOVDQU    (R8)(AX*1), Y0
	VMOVDQU    (R9)(AX*1), Y1
	VMOVDQU    (R10)(AX*1), Y2
	VMOVDQU    (R11)(AX*1), Y3
	VMOVDQU    (R12)(AX*1), Y4
	VMOVDQU    (R13)(AX*1), Y5
	VMOVDQU    (R14)(AX*1), Y6
	VMOVDQU    (DX)(AX*1), Y7
	VSTAGE8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	VSTAGE8(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VSTAGE8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	VPERM2I128 $0x20, Y9, Y8, Y0
	VPERM2I128 $0x20, Y11, Y10, Y1
	VPERM2I128 $0x20, Y13, Y12, Y2
	VPERM2I128 $0x20, Y15, Y14, Y3
	VPERM2I128 $0x31, Y9, Y8, Y4
	VPERM2I128 $0x31, Y11, Y10, Y5
	VPERM2I128 $0x31, Y13, Y12, Y6
	VPERM2I128 $0x31, Y15, Y14, Y7
	VMOVDQU    Y0, (DI)
	VMOVDQU    Y1, 32(DI)
	VMOVDQU    Y2, 64(DI)
	VMOVDQU    Y3, 96(DI)
	VMOVDQU    Y4, 128(DI)
	VMOVDQU    Y5, 160(DI)
	VMOVDQU    Y6, 192(DI)
	VMOVDQU    Y7, 224(DI)
	ADDQ       $256, DI
	ADDQ       $32, AX

u8a_test:
	CMPQ AX, CX
	JB   u8a_loop
	VZEROUPPER
	RET

// func shuffle2SSE2(dst *byte, stride int, src *byte, n int)
// Plane j of dst starts at dst+j*stride; n is a multiple of 16.
TEXT ·shuffle2SSE2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ (DI)(BX*1), R8
	XORQ AX, AX
	JMP  s2s_test

s2s_loop:
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	STAGE2(X0, X1, X2, X3)
	STAGE2(X2, X3, X0, X1)
	STAGE2(X0, X1, X2, X3)
	STAGE2(X2, X3, X0, X1)
	MOVOU X0, (DI)(AX*1)
	MOVOU X1, (R8)(AX*1)
	ADDQ  $32, SI
	ADDQ  $16, AX

s2s_test:
	CMPQ AX, CX
	JB   s2s_loop
	RET

// func shuffle4SSE2(dst *byte, stride int, src *byte, n int)
TEXT ·shuffle4SSE2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	JMP  s4s_test

s4s_loop:
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	STAGE4(X0, X1, X2, X3, X4, X5, X6, X7)
	STAGE4(X4, X5, X6, X7, X0, X1, X2, X3)
	STAGE4(X0, X1, X2, X3, X4, X5, X6, X7)
	STAGE4(X4, X5, X6, X7, X0, X1, X2, X3)
	MOVOU X0, (DI)(AX*1)
	MOVOU X1, (R8)(AX*1)
	MOVOU X2, (R9)(AX*1)
	MOVOU X3, (R10)(AX*1)
	ADDQ  $64, SI
	ADDQ  $16, AX

s4s_test:
	CMPQ AX, CX
	JB   s4s_loop
	RET

// func shuffle8SSE2(dst *byte, stride int, src *byte, n int)
TEXT ·shuffle8SSE2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	XORQ AX, AX
	JMP  s8s_test

s8s_loop:
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVOU 64(SI), X4
	MOVOU 80(SI), X5
	MOVOU 96(SI), X6
	MOVOU 112(SI), X7
	STAGE8(X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15)
	STAGE8(X8, X9, X10, X11, X12, X13, X14, X15, X0, X1, X2, X3, X4, X5, X6, X7)
	STAGE8(X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15)
	STAGE8(X8, X9, X10, X11, X12, X13, X14, X15, X0, X1, X2, X3, X4, X5, X6, X7)
	MOVOU X0, (DI)(AX*1)
	MOVOU X1, (R8)(AX*1)
	MOVOU X2, (R9)(AX*1)
	MOVOU X3, (R10)(AX*1)
	MOVOU X4, (R11)(AX*1)
	MOVOU X5, (R12)(AX*1)
	MOVOU X6, (R13)(AX*1)
	MOVOU X7, (R14)(AX*1)
	ADDQ  $128, SI
	ADDQ  $16, AX

s8s_test:
	CMPQ AX, CX
	JB   s8s_loop
	RET

// func shuffle2AVX2(dst *byte, stride int, src *byte, n int)
// n is a multiple of 32. Lane 0 of register k is loaded with source chunk
// k, lane 1 with chunk k+T (the next 16 elements), so that after the
// stages each register holds 32 consecutive bytes of one plane.
TEXT ·shuffle2AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ (DI)(BX*1), R8
	XORQ AX, AX
	JMP  s2a_test

s2a_loop:
	VMOVDQU     (SI), X0
	VMOVDQU     16(SI), X1
	VINSERTI128 $1, 32(SI), Y0, Y0
	VINSERTI128 $1, 48(SI), Y1, Y1
	VSTAGE2(Y0, Y1, Y2, Y3)
	VSTAGE2(Y2, Y3, Y0, Y1)
	VSTAGE2(Y0, Y1, Y2, Y3)
	VSTAGE2(Y2, Y3, Y0, Y1)
	VMOVDQU     Y0, (DI)(AX*1)
	VMOVDQU     Y1, (R8)(AX*1)
	ADDQ        $64, SI
	ADDQ        $32, AX

s2a_test:
	CMPQ AX, CX
	JB   s2a_loop
	VZEROUPPER
	RET

// func shuffle4AVX2(dst *byte, stride int, src *byte, n int)
TEXT ·shuffle4AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	XORQ AX, AX
	JMP  s4a_test

s4a_loop:
	VMOVDQU     (SI), X0
	VMOVDQU     16(SI), X1
	VMOVDQU     32(SI), X2
	VMOVDQU     48(SI), X3
	VINSERTI128 $1, 64(SI), Y0, Y0
	VINSERTI128 $1, 80(SI), Y1, Y1
	VINSERTI128 $1, 96(SI), Y2, Y2
	VINSERTI128 $1, 112(SI), Y3, Y3
	VSTAGE4(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VSTAGE4(Y4, Y5, Y6, Y7, Y0, Y1, Y2, Y3)
	VSTAGE4(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VSTAGE4(Y4, Y5, Y6, Y7, Y0, Y1, Y2, Y3)
	VMOVDQU     Y0, (DI)(AX*1)
	VMOVDQU     Y1, (R8)(AX*1)
	VMOVDQU     Y2, (R9)(AX*1)
	VMOVDQU     Y3, (R10)(AX*1)
	ADDQ        $128, SI
	ADDQ        $32, AX

s4a_test:
	CMPQ AX, CX
	JB   s4a_loop
	VZEROUPPER
	RET

// func shuffle8AVX2(dst *byte, stride int, src *byte, n int)
TEXT ·shuffle8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	XORQ AX, AX
	JMP  s8a_test

s8a_loop:
	VMOVDQU     (SI), X0
	VMOVDQU     16(SI), X1
	VMOVDQU     32(SI), X2
	VMOVDQU     48(SI), X3
	VMOVDQU     64(SI), X4
	VMOVDQU     80(SI), X5
	VMOVDQU     96(SI), X6
	VMOVDQU     112(SI), X7
	VINSERTI128 $1, 128(SI), Y0, Y0
	VINSERTI128 $1, 144(SI), Y1, Y1
	VINSERTI128 $1, 160(SI), Y2, Y2
	VINSERTI128 $1, 176(SI), Y3, Y3
	VINSERTI128 $1, 192(SI), Y4, Y4
	VINSERTI128 $1, 208(SI), Y5, Y5
	VINSERTI128 $1, 224(SI), Y6, Y6
	VINSERTI128 $1, 240(SI), Y7, Y7
	VSTAGE8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	VSTAGE8(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VSTAGE8(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)
	VSTAGE8(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	VMOVDQU     Y0, (DI)(AX*1)
	VMOVDQU     Y1, (R8)(AX*1)
	VMOVDQU     Y2, (R9)(AX*1)
	VMOVDQU     Y3, (R10)(AX*1)
	VMOVDQU     Y4, (R11)(AX*1)
	VMOVDQU     Y5, (R12)(AX*1)
	VMOVDQU     Y6, (R13)(AX*1)
	VMOVDQU     Y7, (R14)(AX*1)
	ADDQ        $256, SI
	ADDQ        $32, AX

s8a_test:
	CMPQ AX, CX
	JB   s8a_loop
	VZEROUPPER
	RET

// Bit transpose of 8x8 bit matrices, one per 8-byte word, in place: the
// three swap steps of trans8x8 (shuffle.go) on two (SSE2) or four (AVX2)
// words at a time.

// One step: t = (x ^ x>>s) & m; x ^= t ^ t<<s. t is scratch.
#define TSTEP(x, t, m, s) \
	MOVO  x, t; \
	PSRLQ $s, t; \
	PXOR  x, t; \
	PAND  m, t; \
	PXOR  t, x; \
	PSLLQ $s, t; \
	PXOR  t, x

#define VTSTEP(x, t, m, s) \
	VPSRLQ $s, x, t; \
	VPXOR  x, t, t; \
	VPAND  m, t, t; \
	VPXOR  t, x, x; \
	VPSLLQ $s, t, t; \
	VPXOR  t, x, x

// func trans8x8SSE2(b *byte, n int)
// n is a multiple of 16.
TEXT ·trans8x8SSE2(SB), NOSPLIT, $0-16
	MOVQ       b+0(FP), DI
	MOVQ       n+8(FP), CX
	MOVQ       $0x00AA00AA00AA00AA, AX
	MOVQ       AX, X8
	PUNPCKLQDQ X8, X8
	MOVQ       $0x0000CCCC0000CCCC, AX
	MOVQ       AX, X9
	PUNPCKLQDQ X9, X9
	MOVQ       $0x00000000F0F0F0F0, AX
	MOVQ       AX, X10
	PUNPCKLQDQ X10, X10
	XORQ       AX, AX
	JMP        t8s_test

t8s_loop:
	MOVOU (DI)(AX*1), X0
	TSTEP(X0, X1, X8, 7)
	TSTEP(X0, X1, X9, 14)
	TSTEP(X0, X1, X10, 28)
	MOVOU X0, (DI)(AX*1)
	ADDQ  $16, AX

t8s_test:
	CMPQ AX, CX
	JB   t8s_loop
	RET

// func trans8x8AVX2(b *byte, n int)
// n is a multiple of 32.
TEXT ·trans8x8AVX2(SB), NOSPLIT, $0-16
	MOVQ         b+0(FP), DI
	MOVQ         n+8(FP), CX
	MOVQ         $0x00AA00AA00AA00AA, AX
	MOVQ         AX, X8
	VPBROADCASTQ X8, Y8
	MOVQ         $0x0000CCCC0000CCCC, AX
	MOVQ         AX, X9
	VPBROADCASTQ X9, Y9
	MOVQ         $0x00000000F0F0F0F0, AX
	MOVQ         AX, X10
	VPBROADCASTQ X10, Y10
	XORQ         AX, AX
	JMP          t8a_test

t8a_loop:
	VMOVDQU (DI)(AX*1), Y0
	VTSTEP(Y0, Y1, Y8, 7)
	VTSTEP(Y0, Y1, Y9, 14)
	VTSTEP(Y0, Y1, Y10, 28)
	VMOVDQU Y0, (DI)(AX*1)
	ADDQ    $32, AX

t8a_test:
	CMPQ AX, CX
	JB   t8a_loop
	VZEROUPPER
	RET
