//go:build amd64 && !purego

#include "textflag.h"

// blocks4AVX2 is SHA-512's compression (FIPS 180-4 §6.4.2) for four messages
// at once, one per 64-bit element of the YMM registers.
//
// Registers:
//	DI      st: the state h[8][4] at 0, the four lane pointers at 256
//	R8-R11  the lane pointers, advanced a block at a time
//	CX      blocks left
//	R12     W[0..79] in the frame, 32-byte aligned; W[t] holds word t of each lane
//	R13     walks W; SI walks the round constants
//	Y0-Y7   the working variables a-h, renamed round by round (no moves)
//	Y8-Y13  temporaries
//	Y14/Y15 b^c coming into a round (Maj's shared term), a^b going out
//
// AVX2 has no 64-bit rotate, so each rotate is two shifts whose results are
// XORed into the sum with everything else; the rotate by 8 in σ0 is one
// byte shuffle.

// LOADW transposes 32 bytes at off of each lane into W[off/8..off/8+3],
// byte-swapping the big-endian words.
#define LOADW(off) \
	VMOVDQU off(R8), Y0; \
	VMOVDQU off(R9), Y1; \
	VMOVDQU off(R10), Y2; \
	VMOVDQU off(R11), Y3; \
	VPUNPCKLQDQ Y1, Y0, Y4; \
	VPUNPCKHQDQ Y1, Y0, Y5; \
	VPUNPCKLQDQ Y3, Y2, Y6; \
	VPUNPCKHQDQ Y3, Y2, Y7; \
	VPERM2I128 $0x20, Y6, Y4, Y0; \
	VPERM2I128 $0x20, Y7, Y5, Y1; \
	VPERM2I128 $0x31, Y6, Y4, Y2; \
	VPERM2I128 $0x31, Y7, Y5, Y3; \
	VPSHUFB bswap<>(SB), Y0, Y0; \
	VPSHUFB bswap<>(SB), Y1, Y1; \
	VPSHUFB bswap<>(SB), Y2, Y2; \
	VPSHUFB bswap<>(SB), Y3, Y3; \
	VMOVDQA Y0, (off*4)(R12); \
	VMOVDQA Y1, (off*4+32)(R12); \
	VMOVDQA Y2, (off*4+64)(R12); \
	VMOVDQA Y3, (off*4+96)(R12)

// SCHED computes W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16] at
// off(R13). w holds W[t-2] on entry and W[t] on exit: the recurrence through
// W[t-2] stays in a register (through memory, store-to-load forwarding made
// it the schedule's bottleneck).
#define SCHED(off, w, x, s, t1, t2, t3) \
	VMOVDQA (off-480)(R13), x; \
	VPSRLQ $1, x, t1; \
	VPSLLQ $63, x, t2; \
	VPSHUFB rotr8<>(SB), x, t3; \
	VPXOR t2, t1, t1; \
	VPSRLQ $7, x, x; \
	VPXOR t3, x, x; \
	VPXOR t1, x, x; \
	VPADDQ (off-224)(R13), x, x; \
	VPADDQ (off-512)(R13), x, x; \
	VPSRLQ $19, w, s; \
	VPSLLQ $45, w, t1; \
	VPSRLQ $61, w, t2; \
	VPSLLQ $3, w, t3; \
	VPXOR t1, s, s; \
	VPXOR t3, t2, t2; \
	VPSRLQ $6, w, w; \
	VPXOR t2, s, s; \
	VPXOR w, s, s; \
	VPADDQ x, s, w; \
	VMOVDQA w, off(R13)

// BIGSIGMA sets Y8 to x rotated right by r1, r2 and r3, XORed (Σ0, Σ1
// of FIPS 180-4); each rotate is a right and a left shift (lN = 64 - rN).
// Y9-Y13 are scratch.
#define BIGSIGMA(x, r1, l1, r2, l2, r3, l3) \
	VPSRLQ $r1, x, Y8; \
	VPSLLQ $l1, x, Y9; \
	VPSRLQ $r2, x, Y10; \
	VPSLLQ $l2, x, Y11; \
	VPSRLQ $r3, x, Y12; \
	VPSLLQ $l3, x, Y13; \
	VPXOR Y9, Y8, Y8; \
	VPXOR Y11, Y10, Y10; \
	VPXOR Y13, Y12, Y12; \
	VPXOR Y10, Y8, Y8; \
	VPXOR Y12, Y8, Y8

// ROUND is round t, W[t] at off(R13) and K[t] at off(SI). It leaves T1+T2
// (the next a) in h and d+T1 (the next e) in d; the caller renames.
#define ROUND(a, b, c, d, e, f, g, h, off, bc, ab) \
	VPADDQ off(R13), h, h; \
	VPADDQ off(SI), h, h; \
	BIGSIGMA(e, 14, 50, 18, 46, 41, 23); \
	VPXOR g, f, Y9; \
	VPAND e, Y9, Y9; \
	VPXOR g, Y9, Y9; \
	VPADDQ Y9, h, h; \
	VPADDQ Y8, h, h; \
	VPADDQ h, d, d; \
	BIGSIGMA(a, 28, 36, 34, 30, 39, 25); \
	VPXOR b, a, ab; \
	VPAND ab, bc, bc; \
	VPXOR b, bc, bc; \
	VPADDQ bc, Y8, Y8; \
	VPADDQ Y8, h, h

// func blocks4AVX2(st *lanes, n int)
// Frame: W, 80 words of 32 bytes, and 32 bytes of slack to align it.
TEXT ·blocks4AVX2(SB), 0, $2592-16
	MOVQ st+0(FP), DI
	MOVQ n+8(FP), CX
	TESTQ CX, CX
	JZ   done
	MOVQ 256(DI), R8
	MOVQ 264(DI), R9
	MOVQ 272(DI), R10
	MOVQ 280(DI), R11
	LEAQ 31(SP), R12
	ANDQ $-32, R12

block:
	LOADW(0)
	LOADW(32)
	LOADW(64)
	LOADW(96)

	LEAQ 512(R12), R13
	MOVQ $32, AX
	VMOVDQA 448(R12), Y10
	VMOVDQA 480(R12), Y11

sched:
	SCHED(0, Y10, Y0, Y1, Y2, Y3, Y4)
	SCHED(32, Y11, Y5, Y6, Y7, Y8, Y9)
	ADDQ $64, R13
	DECQ AX
	JNZ  sched

	VMOVDQU 0(DI), Y0
	VMOVDQU 32(DI), Y1
	VMOVDQU 64(DI), Y2
	VMOVDQU 96(DI), Y3
	VMOVDQU 128(DI), Y4
	VMOVDQU 160(DI), Y5
	VMOVDQU 192(DI), Y6
	VMOVDQU 224(DI), Y7
	VPXOR   Y2, Y1, Y14
	MOVQ    R12, R13
	LEAQ    k512x4<>(SB), SI
	MOVQ    $10, AX

rounds:
	ROUND(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, 0, Y14, Y15)
	ROUND(Y7, Y0, Y1, Y2, Y3, Y4, Y5, Y6, 32, Y15, Y14)
	ROUND(Y6, Y7, Y0, Y1, Y2, Y3, Y4, Y5, 64, Y14, Y15)
	ROUND(Y5, Y6, Y7, Y0, Y1, Y2, Y3, Y4, 96, Y15, Y14)
	ROUND(Y4, Y5, Y6, Y7, Y0, Y1, Y2, Y3, 128, Y14, Y15)
	ROUND(Y3, Y4, Y5, Y6, Y7, Y0, Y1, Y2, 160, Y15, Y14)
	ROUND(Y2, Y3, Y4, Y5, Y6, Y7, Y0, Y1, 192, Y14, Y15)
	ROUND(Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y0, 224, Y15, Y14)
	ADDQ $256, R13
	ADDQ $256, SI
	DECQ AX
	JNZ  rounds

	VPADDQ  0(DI), Y0, Y0
	VPADDQ  32(DI), Y1, Y1
	VPADDQ  64(DI), Y2, Y2
	VPADDQ  96(DI), Y3, Y3
	VPADDQ  128(DI), Y4, Y4
	VPADDQ  160(DI), Y5, Y5
	VPADDQ  192(DI), Y6, Y6
	VPADDQ  224(DI), Y7, Y7
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	VMOVDQU Y4, 128(DI)
	VMOVDQU Y5, 160(DI)
	VMOVDQU Y6, 192(DI)
	VMOVDQU Y7, 224(DI)

	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $128, R10
	ADDQ $128, R11
	DECQ CX
	JNZ  block

	VZEROUPPER

done:
	RET

// VPSHUFB controls: byte-swap each 64-bit word; rotate each right by 8 bits.
DATA bswap<>+0x00(SB)/8, $0x0001020304050607
DATA bswap<>+0x08(SB)/8, $0x08090a0b0c0d0e0f
DATA bswap<>+0x10(SB)/8, $0x0001020304050607
DATA bswap<>+0x18(SB)/8, $0x08090a0b0c0d0e0f
GLOBL bswap<>(SB), RODATA|NOPTR, $32

DATA rotr8<>+0x00(SB)/8, $0x0007060504030201
DATA rotr8<>+0x08(SB)/8, $0x080f0e0d0c0b0a09
DATA rotr8<>+0x10(SB)/8, $0x0007060504030201
DATA rotr8<>+0x18(SB)/8, $0x080f0e0d0c0b0a09
GLOBL rotr8<>(SB), RODATA|NOPTR, $32

// K[t] of FIPS 180-4 §4.2.3, each four times (one per lane).
DATA k512x4<>+0x000(SB)/8, $0x428a2f98d728ae22
DATA k512x4<>+0x008(SB)/8, $0x428a2f98d728ae22
DATA k512x4<>+0x010(SB)/8, $0x428a2f98d728ae22
DATA k512x4<>+0x018(SB)/8, $0x428a2f98d728ae22
DATA k512x4<>+0x020(SB)/8, $0x7137449123ef65cd
DATA k512x4<>+0x028(SB)/8, $0x7137449123ef65cd
DATA k512x4<>+0x030(SB)/8, $0x7137449123ef65cd
DATA k512x4<>+0x038(SB)/8, $0x7137449123ef65cd
DATA k512x4<>+0x040(SB)/8, $0xb5c0fbcfec4d3b2f
DATA k512x4<>+0x048(SB)/8, $0xb5c0fbcfec4d3b2f
DATA k512x4<>+0x050(SB)/8, $0xb5c0fbcfec4d3b2f
DATA k512x4<>+0x058(SB)/8, $0xb5c0fbcfec4d3b2f
DATA k512x4<>+0x060(SB)/8, $0xe9b5dba58189dbbc
DATA k512x4<>+0x068(SB)/8, $0xe9b5dba58189dbbc
DATA k512x4<>+0x070(SB)/8, $0xe9b5dba58189dbbc
DATA k512x4<>+0x078(SB)/8, $0xe9b5dba58189dbbc
DATA k512x4<>+0x080(SB)/8, $0x3956c25bf348b538
DATA k512x4<>+0x088(SB)/8, $0x3956c25bf348b538
DATA k512x4<>+0x090(SB)/8, $0x3956c25bf348b538
DATA k512x4<>+0x098(SB)/8, $0x3956c25bf348b538
DATA k512x4<>+0x0a0(SB)/8, $0x59f111f1b605d019
DATA k512x4<>+0x0a8(SB)/8, $0x59f111f1b605d019
DATA k512x4<>+0x0b0(SB)/8, $0x59f111f1b605d019
DATA k512x4<>+0x0b8(SB)/8, $0x59f111f1b605d019
DATA k512x4<>+0x0c0(SB)/8, $0x923f82a4af194f9b
DATA k512x4<>+0x0c8(SB)/8, $0x923f82a4af194f9b
DATA k512x4<>+0x0d0(SB)/8, $0x923f82a4af194f9b
DATA k512x4<>+0x0d8(SB)/8, $0x923f82a4af194f9b
DATA k512x4<>+0x0e0(SB)/8, $0xab1c5ed5da6d8118
DATA k512x4<>+0x0e8(SB)/8, $0xab1c5ed5da6d8118
DATA k512x4<>+0x0f0(SB)/8, $0xab1c5ed5da6d8118
DATA k512x4<>+0x0f8(SB)/8, $0xab1c5ed5da6d8118
DATA k512x4<>+0x100(SB)/8, $0xd807aa98a3030242
DATA k512x4<>+0x108(SB)/8, $0xd807aa98a3030242
DATA k512x4<>+0x110(SB)/8, $0xd807aa98a3030242
DATA k512x4<>+0x118(SB)/8, $0xd807aa98a3030242
DATA k512x4<>+0x120(SB)/8, $0x12835b0145706fbe
DATA k512x4<>+0x128(SB)/8, $0x12835b0145706fbe
DATA k512x4<>+0x130(SB)/8, $0x12835b0145706fbe
DATA k512x4<>+0x138(SB)/8, $0x12835b0145706fbe
DATA k512x4<>+0x140(SB)/8, $0x243185be4ee4b28c
DATA k512x4<>+0x148(SB)/8, $0x243185be4ee4b28c
DATA k512x4<>+0x150(SB)/8, $0x243185be4ee4b28c
DATA k512x4<>+0x158(SB)/8, $0x243185be4ee4b28c
DATA k512x4<>+0x160(SB)/8, $0x550c7dc3d5ffb4e2
DATA k512x4<>+0x168(SB)/8, $0x550c7dc3d5ffb4e2
DATA k512x4<>+0x170(SB)/8, $0x550c7dc3d5ffb4e2
DATA k512x4<>+0x178(SB)/8, $0x550c7dc3d5ffb4e2
DATA k512x4<>+0x180(SB)/8, $0x72be5d74f27b896f
DATA k512x4<>+0x188(SB)/8, $0x72be5d74f27b896f
DATA k512x4<>+0x190(SB)/8, $0x72be5d74f27b896f
DATA k512x4<>+0x198(SB)/8, $0x72be5d74f27b896f
DATA k512x4<>+0x1a0(SB)/8, $0x80deb1fe3b1696b1
DATA k512x4<>+0x1a8(SB)/8, $0x80deb1fe3b1696b1
DATA k512x4<>+0x1b0(SB)/8, $0x80deb1fe3b1696b1
DATA k512x4<>+0x1b8(SB)/8, $0x80deb1fe3b1696b1
DATA k512x4<>+0x1c0(SB)/8, $0x9bdc06a725c71235
DATA k512x4<>+0x1c8(SB)/8, $0x9bdc06a725c71235
DATA k512x4<>+0x1d0(SB)/8, $0x9bdc06a725c71235
DATA k512x4<>+0x1d8(SB)/8, $0x9bdc06a725c71235
DATA k512x4<>+0x1e0(SB)/8, $0xc19bf174cf692694
DATA k512x4<>+0x1e8(SB)/8, $0xc19bf174cf692694
DATA k512x4<>+0x1f0(SB)/8, $0xc19bf174cf692694
DATA k512x4<>+0x1f8(SB)/8, $0xc19bf174cf692694
DATA k512x4<>+0x200(SB)/8, $0xe49b69c19ef14ad2
DATA k512x4<>+0x208(SB)/8, $0xe49b69c19ef14ad2
DATA k512x4<>+0x210(SB)/8, $0xe49b69c19ef14ad2
DATA k512x4<>+0x218(SB)/8, $0xe49b69c19ef14ad2
DATA k512x4<>+0x220(SB)/8, $0xefbe4786384f25e3
DATA k512x4<>+0x228(SB)/8, $0xefbe4786384f25e3
DATA k512x4<>+0x230(SB)/8, $0xefbe4786384f25e3
DATA k512x4<>+0x238(SB)/8, $0xefbe4786384f25e3
DATA k512x4<>+0x240(SB)/8, $0x0fc19dc68b8cd5b5
DATA k512x4<>+0x248(SB)/8, $0x0fc19dc68b8cd5b5
DATA k512x4<>+0x250(SB)/8, $0x0fc19dc68b8cd5b5
DATA k512x4<>+0x258(SB)/8, $0x0fc19dc68b8cd5b5
DATA k512x4<>+0x260(SB)/8, $0x240ca1cc77ac9c65
DATA k512x4<>+0x268(SB)/8, $0x240ca1cc77ac9c65
DATA k512x4<>+0x270(SB)/8, $0x240ca1cc77ac9c65
DATA k512x4<>+0x278(SB)/8, $0x240ca1cc77ac9c65
DATA k512x4<>+0x280(SB)/8, $0x2de92c6f592b0275
DATA k512x4<>+0x288(SB)/8, $0x2de92c6f592b0275
DATA k512x4<>+0x290(SB)/8, $0x2de92c6f592b0275
DATA k512x4<>+0x298(SB)/8, $0x2de92c6f592b0275
DATA k512x4<>+0x2a0(SB)/8, $0x4a7484aa6ea6e483
DATA k512x4<>+0x2a8(SB)/8, $0x4a7484aa6ea6e483
DATA k512x4<>+0x2b0(SB)/8, $0x4a7484aa6ea6e483
DATA k512x4<>+0x2b8(SB)/8, $0x4a7484aa6ea6e483
DATA k512x4<>+0x2c0(SB)/8, $0x5cb0a9dcbd41fbd4
DATA k512x4<>+0x2c8(SB)/8, $0x5cb0a9dcbd41fbd4
DATA k512x4<>+0x2d0(SB)/8, $0x5cb0a9dcbd41fbd4
DATA k512x4<>+0x2d8(SB)/8, $0x5cb0a9dcbd41fbd4
DATA k512x4<>+0x2e0(SB)/8, $0x76f988da831153b5
DATA k512x4<>+0x2e8(SB)/8, $0x76f988da831153b5
DATA k512x4<>+0x2f0(SB)/8, $0x76f988da831153b5
DATA k512x4<>+0x2f8(SB)/8, $0x76f988da831153b5
DATA k512x4<>+0x300(SB)/8, $0x983e5152ee66dfab
DATA k512x4<>+0x308(SB)/8, $0x983e5152ee66dfab
DATA k512x4<>+0x310(SB)/8, $0x983e5152ee66dfab
DATA k512x4<>+0x318(SB)/8, $0x983e5152ee66dfab
DATA k512x4<>+0x320(SB)/8, $0xa831c66d2db43210
DATA k512x4<>+0x328(SB)/8, $0xa831c66d2db43210
DATA k512x4<>+0x330(SB)/8, $0xa831c66d2db43210
DATA k512x4<>+0x338(SB)/8, $0xa831c66d2db43210
DATA k512x4<>+0x340(SB)/8, $0xb00327c898fb213f
DATA k512x4<>+0x348(SB)/8, $0xb00327c898fb213f
DATA k512x4<>+0x350(SB)/8, $0xb00327c898fb213f
DATA k512x4<>+0x358(SB)/8, $0xb00327c898fb213f
DATA k512x4<>+0x360(SB)/8, $0xbf597fc7beef0ee4
DATA k512x4<>+0x368(SB)/8, $0xbf597fc7beef0ee4
DATA k512x4<>+0x370(SB)/8, $0xbf597fc7beef0ee4
DATA k512x4<>+0x378(SB)/8, $0xbf597fc7beef0ee4
DATA k512x4<>+0x380(SB)/8, $0xc6e00bf33da88fc2
DATA k512x4<>+0x388(SB)/8, $0xc6e00bf33da88fc2
DATA k512x4<>+0x390(SB)/8, $0xc6e00bf33da88fc2
DATA k512x4<>+0x398(SB)/8, $0xc6e00bf33da88fc2
DATA k512x4<>+0x3a0(SB)/8, $0xd5a79147930aa725
DATA k512x4<>+0x3a8(SB)/8, $0xd5a79147930aa725
DATA k512x4<>+0x3b0(SB)/8, $0xd5a79147930aa725
DATA k512x4<>+0x3b8(SB)/8, $0xd5a79147930aa725
DATA k512x4<>+0x3c0(SB)/8, $0x06ca6351e003826f
DATA k512x4<>+0x3c8(SB)/8, $0x06ca6351e003826f
DATA k512x4<>+0x3d0(SB)/8, $0x06ca6351e003826f
DATA k512x4<>+0x3d8(SB)/8, $0x06ca6351e003826f
DATA k512x4<>+0x3e0(SB)/8, $0x142929670a0e6e70
DATA k512x4<>+0x3e8(SB)/8, $0x142929670a0e6e70
DATA k512x4<>+0x3f0(SB)/8, $0x142929670a0e6e70
DATA k512x4<>+0x3f8(SB)/8, $0x142929670a0e6e70
DATA k512x4<>+0x400(SB)/8, $0x27b70a8546d22ffc
DATA k512x4<>+0x408(SB)/8, $0x27b70a8546d22ffc
DATA k512x4<>+0x410(SB)/8, $0x27b70a8546d22ffc
DATA k512x4<>+0x418(SB)/8, $0x27b70a8546d22ffc
DATA k512x4<>+0x420(SB)/8, $0x2e1b21385c26c926
DATA k512x4<>+0x428(SB)/8, $0x2e1b21385c26c926
DATA k512x4<>+0x430(SB)/8, $0x2e1b21385c26c926
DATA k512x4<>+0x438(SB)/8, $0x2e1b21385c26c926
DATA k512x4<>+0x440(SB)/8, $0x4d2c6dfc5ac42aed
DATA k512x4<>+0x448(SB)/8, $0x4d2c6dfc5ac42aed
DATA k512x4<>+0x450(SB)/8, $0x4d2c6dfc5ac42aed
DATA k512x4<>+0x458(SB)/8, $0x4d2c6dfc5ac42aed
DATA k512x4<>+0x460(SB)/8, $0x53380d139d95b3df
DATA k512x4<>+0x468(SB)/8, $0x53380d139d95b3df
DATA k512x4<>+0x470(SB)/8, $0x53380d139d95b3df
DATA k512x4<>+0x478(SB)/8, $0x53380d139d95b3df
DATA k512x4<>+0x480(SB)/8, $0x650a73548baf63de
DATA k512x4<>+0x488(SB)/8, $0x650a73548baf63de
DATA k512x4<>+0x490(SB)/8, $0x650a73548baf63de
DATA k512x4<>+0x498(SB)/8, $0x650a73548baf63de
DATA k512x4<>+0x4a0(SB)/8, $0x766a0abb3c77b2a8
DATA k512x4<>+0x4a8(SB)/8, $0x766a0abb3c77b2a8
DATA k512x4<>+0x4b0(SB)/8, $0x766a0abb3c77b2a8
DATA k512x4<>+0x4b8(SB)/8, $0x766a0abb3c77b2a8
DATA k512x4<>+0x4c0(SB)/8, $0x81c2c92e47edaee6
DATA k512x4<>+0x4c8(SB)/8, $0x81c2c92e47edaee6
DATA k512x4<>+0x4d0(SB)/8, $0x81c2c92e47edaee6
DATA k512x4<>+0x4d8(SB)/8, $0x81c2c92e47edaee6
DATA k512x4<>+0x4e0(SB)/8, $0x92722c851482353b
DATA k512x4<>+0x4e8(SB)/8, $0x92722c851482353b
DATA k512x4<>+0x4f0(SB)/8, $0x92722c851482353b
DATA k512x4<>+0x4f8(SB)/8, $0x92722c851482353b
DATA k512x4<>+0x500(SB)/8, $0xa2bfe8a14cf10364
DATA k512x4<>+0x508(SB)/8, $0xa2bfe8a14cf10364
DATA k512x4<>+0x510(SB)/8, $0xa2bfe8a14cf10364
DATA k512x4<>+0x518(SB)/8, $0xa2bfe8a14cf10364
DATA k512x4<>+0x520(SB)/8, $0xa81a664bbc423001
DATA k512x4<>+0x528(SB)/8, $0xa81a664bbc423001
DATA k512x4<>+0x530(SB)/8, $0xa81a664bbc423001
DATA k512x4<>+0x538(SB)/8, $0xa81a664bbc423001
DATA k512x4<>+0x540(SB)/8, $0xc24b8b70d0f89791
DATA k512x4<>+0x548(SB)/8, $0xc24b8b70d0f89791
DATA k512x4<>+0x550(SB)/8, $0xc24b8b70d0f89791
DATA k512x4<>+0x558(SB)/8, $0xc24b8b70d0f89791
DATA k512x4<>+0x560(SB)/8, $0xc76c51a30654be30
DATA k512x4<>+0x568(SB)/8, $0xc76c51a30654be30
DATA k512x4<>+0x570(SB)/8, $0xc76c51a30654be30
DATA k512x4<>+0x578(SB)/8, $0xc76c51a30654be30
DATA k512x4<>+0x580(SB)/8, $0xd192e819d6ef5218
DATA k512x4<>+0x588(SB)/8, $0xd192e819d6ef5218
DATA k512x4<>+0x590(SB)/8, $0xd192e819d6ef5218
DATA k512x4<>+0x598(SB)/8, $0xd192e819d6ef5218
DATA k512x4<>+0x5a0(SB)/8, $0xd69906245565a910
DATA k512x4<>+0x5a8(SB)/8, $0xd69906245565a910
DATA k512x4<>+0x5b0(SB)/8, $0xd69906245565a910
DATA k512x4<>+0x5b8(SB)/8, $0xd69906245565a910
DATA k512x4<>+0x5c0(SB)/8, $0xf40e35855771202a
DATA k512x4<>+0x5c8(SB)/8, $0xf40e35855771202a
DATA k512x4<>+0x5d0(SB)/8, $0xf40e35855771202a
DATA k512x4<>+0x5d8(SB)/8, $0xf40e35855771202a
DATA k512x4<>+0x5e0(SB)/8, $0x106aa07032bbd1b8
DATA k512x4<>+0x5e8(SB)/8, $0x106aa07032bbd1b8
DATA k512x4<>+0x5f0(SB)/8, $0x106aa07032bbd1b8
DATA k512x4<>+0x5f8(SB)/8, $0x106aa07032bbd1b8
DATA k512x4<>+0x600(SB)/8, $0x19a4c116b8d2d0c8
DATA k512x4<>+0x608(SB)/8, $0x19a4c116b8d2d0c8
DATA k512x4<>+0x610(SB)/8, $0x19a4c116b8d2d0c8
DATA k512x4<>+0x618(SB)/8, $0x19a4c116b8d2d0c8
DATA k512x4<>+0x620(SB)/8, $0x1e376c085141ab53
DATA k512x4<>+0x628(SB)/8, $0x1e376c085141ab53
DATA k512x4<>+0x630(SB)/8, $0x1e376c085141ab53
DATA k512x4<>+0x638(SB)/8, $0x1e376c085141ab53
DATA k512x4<>+0x640(SB)/8, $0x2748774cdf8eeb99
DATA k512x4<>+0x648(SB)/8, $0x2748774cdf8eeb99
DATA k512x4<>+0x650(SB)/8, $0x2748774cdf8eeb99
DATA k512x4<>+0x658(SB)/8, $0x2748774cdf8eeb99
DATA k512x4<>+0x660(SB)/8, $0x34b0bcb5e19b48a8
DATA k512x4<>+0x668(SB)/8, $0x34b0bcb5e19b48a8
DATA k512x4<>+0x670(SB)/8, $0x34b0bcb5e19b48a8
DATA k512x4<>+0x678(SB)/8, $0x34b0bcb5e19b48a8
DATA k512x4<>+0x680(SB)/8, $0x391c0cb3c5c95a63
DATA k512x4<>+0x688(SB)/8, $0x391c0cb3c5c95a63
DATA k512x4<>+0x690(SB)/8, $0x391c0cb3c5c95a63
DATA k512x4<>+0x698(SB)/8, $0x391c0cb3c5c95a63
DATA k512x4<>+0x6a0(SB)/8, $0x4ed8aa4ae3418acb
DATA k512x4<>+0x6a8(SB)/8, $0x4ed8aa4ae3418acb
DATA k512x4<>+0x6b0(SB)/8, $0x4ed8aa4ae3418acb
DATA k512x4<>+0x6b8(SB)/8, $0x4ed8aa4ae3418acb
DATA k512x4<>+0x6c0(SB)/8, $0x5b9cca4f7763e373
DATA k512x4<>+0x6c8(SB)/8, $0x5b9cca4f7763e373
DATA k512x4<>+0x6d0(SB)/8, $0x5b9cca4f7763e373
DATA k512x4<>+0x6d8(SB)/8, $0x5b9cca4f7763e373
DATA k512x4<>+0x6e0(SB)/8, $0x682e6ff3d6b2b8a3
DATA k512x4<>+0x6e8(SB)/8, $0x682e6ff3d6b2b8a3
DATA k512x4<>+0x6f0(SB)/8, $0x682e6ff3d6b2b8a3
DATA k512x4<>+0x6f8(SB)/8, $0x682e6ff3d6b2b8a3
DATA k512x4<>+0x700(SB)/8, $0x748f82ee5defb2fc
DATA k512x4<>+0x708(SB)/8, $0x748f82ee5defb2fc
DATA k512x4<>+0x710(SB)/8, $0x748f82ee5defb2fc
DATA k512x4<>+0x718(SB)/8, $0x748f82ee5defb2fc
DATA k512x4<>+0x720(SB)/8, $0x78a5636f43172f60
DATA k512x4<>+0x728(SB)/8, $0x78a5636f43172f60
DATA k512x4<>+0x730(SB)/8, $0x78a5636f43172f60
DATA k512x4<>+0x738(SB)/8, $0x78a5636f43172f60
DATA k512x4<>+0x740(SB)/8, $0x84c87814a1f0ab72
DATA k512x4<>+0x748(SB)/8, $0x84c87814a1f0ab72
DATA k512x4<>+0x750(SB)/8, $0x84c87814a1f0ab72
DATA k512x4<>+0x758(SB)/8, $0x84c87814a1f0ab72
DATA k512x4<>+0x760(SB)/8, $0x8cc702081a6439ec
DATA k512x4<>+0x768(SB)/8, $0x8cc702081a6439ec
DATA k512x4<>+0x770(SB)/8, $0x8cc702081a6439ec
DATA k512x4<>+0x778(SB)/8, $0x8cc702081a6439ec
DATA k512x4<>+0x780(SB)/8, $0x90befffa23631e28
DATA k512x4<>+0x788(SB)/8, $0x90befffa23631e28
DATA k512x4<>+0x790(SB)/8, $0x90befffa23631e28
DATA k512x4<>+0x798(SB)/8, $0x90befffa23631e28
DATA k512x4<>+0x7a0(SB)/8, $0xa4506cebde82bde9
DATA k512x4<>+0x7a8(SB)/8, $0xa4506cebde82bde9
DATA k512x4<>+0x7b0(SB)/8, $0xa4506cebde82bde9
DATA k512x4<>+0x7b8(SB)/8, $0xa4506cebde82bde9
DATA k512x4<>+0x7c0(SB)/8, $0xbef9a3f7b2c67915
DATA k512x4<>+0x7c8(SB)/8, $0xbef9a3f7b2c67915
DATA k512x4<>+0x7d0(SB)/8, $0xbef9a3f7b2c67915
DATA k512x4<>+0x7d8(SB)/8, $0xbef9a3f7b2c67915
DATA k512x4<>+0x7e0(SB)/8, $0xc67178f2e372532b
DATA k512x4<>+0x7e8(SB)/8, $0xc67178f2e372532b
DATA k512x4<>+0x7f0(SB)/8, $0xc67178f2e372532b
DATA k512x4<>+0x7f8(SB)/8, $0xc67178f2e372532b
DATA k512x4<>+0x800(SB)/8, $0xca273eceea26619c
DATA k512x4<>+0x808(SB)/8, $0xca273eceea26619c
DATA k512x4<>+0x810(SB)/8, $0xca273eceea26619c
DATA k512x4<>+0x818(SB)/8, $0xca273eceea26619c
DATA k512x4<>+0x820(SB)/8, $0xd186b8c721c0c207
DATA k512x4<>+0x828(SB)/8, $0xd186b8c721c0c207
DATA k512x4<>+0x830(SB)/8, $0xd186b8c721c0c207
DATA k512x4<>+0x838(SB)/8, $0xd186b8c721c0c207
DATA k512x4<>+0x840(SB)/8, $0xeada7dd6cde0eb1e
DATA k512x4<>+0x848(SB)/8, $0xeada7dd6cde0eb1e
DATA k512x4<>+0x850(SB)/8, $0xeada7dd6cde0eb1e
DATA k512x4<>+0x858(SB)/8, $0xeada7dd6cde0eb1e
DATA k512x4<>+0x860(SB)/8, $0xf57d4f7fee6ed178
DATA k512x4<>+0x868(SB)/8, $0xf57d4f7fee6ed178
DATA k512x4<>+0x870(SB)/8, $0xf57d4f7fee6ed178
DATA k512x4<>+0x878(SB)/8, $0xf57d4f7fee6ed178
DATA k512x4<>+0x880(SB)/8, $0x06f067aa72176fba
DATA k512x4<>+0x888(SB)/8, $0x06f067aa72176fba
DATA k512x4<>+0x890(SB)/8, $0x06f067aa72176fba
DATA k512x4<>+0x898(SB)/8, $0x06f067aa72176fba
DATA k512x4<>+0x8a0(SB)/8, $0x0a637dc5a2c898a6
DATA k512x4<>+0x8a8(SB)/8, $0x0a637dc5a2c898a6
DATA k512x4<>+0x8b0(SB)/8, $0x0a637dc5a2c898a6
DATA k512x4<>+0x8b8(SB)/8, $0x0a637dc5a2c898a6
DATA k512x4<>+0x8c0(SB)/8, $0x113f9804bef90dae
DATA k512x4<>+0x8c8(SB)/8, $0x113f9804bef90dae
DATA k512x4<>+0x8d0(SB)/8, $0x113f9804bef90dae
DATA k512x4<>+0x8d8(SB)/8, $0x113f9804bef90dae
DATA k512x4<>+0x8e0(SB)/8, $0x1b710b35131c471b
DATA k512x4<>+0x8e8(SB)/8, $0x1b710b35131c471b
DATA k512x4<>+0x8f0(SB)/8, $0x1b710b35131c471b
DATA k512x4<>+0x8f8(SB)/8, $0x1b710b35131c471b
DATA k512x4<>+0x900(SB)/8, $0x28db77f523047d84
DATA k512x4<>+0x908(SB)/8, $0x28db77f523047d84
DATA k512x4<>+0x910(SB)/8, $0x28db77f523047d84
DATA k512x4<>+0x918(SB)/8, $0x28db77f523047d84
DATA k512x4<>+0x920(SB)/8, $0x32caab7b40c72493
DATA k512x4<>+0x928(SB)/8, $0x32caab7b40c72493
DATA k512x4<>+0x930(SB)/8, $0x32caab7b40c72493
DATA k512x4<>+0x938(SB)/8, $0x32caab7b40c72493
DATA k512x4<>+0x940(SB)/8, $0x3c9ebe0a15c9bebc
DATA k512x4<>+0x948(SB)/8, $0x3c9ebe0a15c9bebc
DATA k512x4<>+0x950(SB)/8, $0x3c9ebe0a15c9bebc
DATA k512x4<>+0x958(SB)/8, $0x3c9ebe0a15c9bebc
DATA k512x4<>+0x960(SB)/8, $0x431d67c49c100d4c
DATA k512x4<>+0x968(SB)/8, $0x431d67c49c100d4c
DATA k512x4<>+0x970(SB)/8, $0x431d67c49c100d4c
DATA k512x4<>+0x978(SB)/8, $0x431d67c49c100d4c
DATA k512x4<>+0x980(SB)/8, $0x4cc5d4becb3e42b6
DATA k512x4<>+0x988(SB)/8, $0x4cc5d4becb3e42b6
DATA k512x4<>+0x990(SB)/8, $0x4cc5d4becb3e42b6
DATA k512x4<>+0x998(SB)/8, $0x4cc5d4becb3e42b6
DATA k512x4<>+0x9a0(SB)/8, $0x597f299cfc657e2a
DATA k512x4<>+0x9a8(SB)/8, $0x597f299cfc657e2a
DATA k512x4<>+0x9b0(SB)/8, $0x597f299cfc657e2a
DATA k512x4<>+0x9b8(SB)/8, $0x597f299cfc657e2a
DATA k512x4<>+0x9c0(SB)/8, $0x5fcb6fab3ad6faec
DATA k512x4<>+0x9c8(SB)/8, $0x5fcb6fab3ad6faec
DATA k512x4<>+0x9d0(SB)/8, $0x5fcb6fab3ad6faec
DATA k512x4<>+0x9d8(SB)/8, $0x5fcb6fab3ad6faec
DATA k512x4<>+0x9e0(SB)/8, $0x6c44198c4a475817
DATA k512x4<>+0x9e8(SB)/8, $0x6c44198c4a475817
DATA k512x4<>+0x9f0(SB)/8, $0x6c44198c4a475817
DATA k512x4<>+0x9f8(SB)/8, $0x6c44198c4a475817
GLOBL k512x4<>(SB), RODATA|NOPTR, $2560
