//go:build amd64 && !purego

#include "textflag.h"

// SHA-256 block functions on the SHA extensions, written from FIPS 180-4 and
// the instructions' documented semantics.
//
// State layout (see stateIn/stateOut in sha_amd64.go): s[0:4] is the ABEF
// register (dword 3 = a, 2 = b, 1 = e, 0 = f) and s[4:8] is CDGH (dword 3 =
// c, 2 = d, 1 = g, 0 = h), the operand layout SHA256RNDS2 works on, so that
// loading them is two MOVOUs.
//
// Go's operand order is source(s) first: "SHA256RNDS2 X0, S, D" is Intel's
// "sha256rnds2 D, S, xmm0": two rounds on CDGH in D and ABEF in S with the
// message+constant words in X0's low two dwords; the new ABEF lands in D,
// and the old ABEF is the new CDGH. So the two state registers swap roles
// every two rounds and are back in place after four.

// K: the 64 round constants of FIPS 180-4 section 4.2.2.
DATA ·k256+0(SB)/4, $0x428a2f98
DATA ·k256+4(SB)/4, $0x71374491
DATA ·k256+8(SB)/4, $0xb5c0fbcf
DATA ·k256+12(SB)/4, $0xe9b5dba5
DATA ·k256+16(SB)/4, $0x3956c25b
DATA ·k256+20(SB)/4, $0x59f111f1
DATA ·k256+24(SB)/4, $0x923f82a4
DATA ·k256+28(SB)/4, $0xab1c5ed5
DATA ·k256+32(SB)/4, $0xd807aa98
DATA ·k256+36(SB)/4, $0x12835b01
DATA ·k256+40(SB)/4, $0x243185be
DATA ·k256+44(SB)/4, $0x550c7dc3
DATA ·k256+48(SB)/4, $0x72be5d74
DATA ·k256+52(SB)/4, $0x80deb1fe
DATA ·k256+56(SB)/4, $0x9bdc06a7
DATA ·k256+60(SB)/4, $0xc19bf174
DATA ·k256+64(SB)/4, $0xe49b69c1
DATA ·k256+68(SB)/4, $0xefbe4786
DATA ·k256+72(SB)/4, $0x0fc19dc6
DATA ·k256+76(SB)/4, $0x240ca1cc
DATA ·k256+80(SB)/4, $0x2de92c6f
DATA ·k256+84(SB)/4, $0x4a7484aa
DATA ·k256+88(SB)/4, $0x5cb0a9dc
DATA ·k256+92(SB)/4, $0x76f988da
DATA ·k256+96(SB)/4, $0x983e5152
DATA ·k256+100(SB)/4, $0xa831c66d
DATA ·k256+104(SB)/4, $0xb00327c8
DATA ·k256+108(SB)/4, $0xbf597fc7
DATA ·k256+112(SB)/4, $0xc6e00bf3
DATA ·k256+116(SB)/4, $0xd5a79147
DATA ·k256+120(SB)/4, $0x06ca6351
DATA ·k256+124(SB)/4, $0x14292967
DATA ·k256+128(SB)/4, $0x27b70a85
DATA ·k256+132(SB)/4, $0x2e1b2138
DATA ·k256+136(SB)/4, $0x4d2c6dfc
DATA ·k256+140(SB)/4, $0x53380d13
DATA ·k256+144(SB)/4, $0x650a7354
DATA ·k256+148(SB)/4, $0x766a0abb
DATA ·k256+152(SB)/4, $0x81c2c92e
DATA ·k256+156(SB)/4, $0x92722c85
DATA ·k256+160(SB)/4, $0xa2bfe8a1
DATA ·k256+164(SB)/4, $0xa81a664b
DATA ·k256+168(SB)/4, $0xc24b8b70
DATA ·k256+172(SB)/4, $0xc76c51a3
DATA ·k256+176(SB)/4, $0xd192e819
DATA ·k256+180(SB)/4, $0xd6990624
DATA ·k256+184(SB)/4, $0xf40e3585
DATA ·k256+188(SB)/4, $0x106aa070
DATA ·k256+192(SB)/4, $0x19a4c116
DATA ·k256+196(SB)/4, $0x1e376c08
DATA ·k256+200(SB)/4, $0x2748774c
DATA ·k256+204(SB)/4, $0x34b0bcb5
DATA ·k256+208(SB)/4, $0x391c0cb3
DATA ·k256+212(SB)/4, $0x4ed8aa4a
DATA ·k256+216(SB)/4, $0x5b9cca4f
DATA ·k256+220(SB)/4, $0x682e6ff3
DATA ·k256+224(SB)/4, $0x748f82ee
DATA ·k256+228(SB)/4, $0x78a5636f
DATA ·k256+232(SB)/4, $0x84c87814
DATA ·k256+236(SB)/4, $0x8cc70208
DATA ·k256+240(SB)/4, $0x90befffa
DATA ·k256+244(SB)/4, $0xa4506ceb
DATA ·k256+248(SB)/4, $0xbef9a3f7
DATA ·k256+252(SB)/4, $0xc67178f2
GLOBL ·k256(SB), RODATA|NOPTR, $256

// PSHUFB control that reverses the bytes of each dword: the message words
// are big-endian.
DATA ·bswapMask+0(SB)/8, $0x0405060700010203
DATA ·bswapMask+8(SB)/8, $0x0c0d0e0f08090a0b
GLOBL ·bswapMask(SB), RODATA|NOPTR, $16

// LOADW loads 16 message bytes as four big-endian words into m.
#define LOADW(src, off, m) \
	MOVOU off(src), m; \
	PSHUFB X15, m

// ROUNDS4 does rounds 4*g .. 4*g+3 with message words m (W[4g..4g+3]);
// koff = 16*g indexes K (AX points at k256).
#define ROUNDS4(abef, cdgh, m, koff) \
	MOVOU koff(AX), X0; \
	PADDD m, X0; \
	SHA256RNDS2 X0, abef, cdgh; \
	PSHUFD $0x0e, X0, X0; \
	SHA256RNDS2 X0, cdgh, abef

// ROUNDS4x2 is ROUNDS4 for both messages with their SHA256RNDS2s
// alternating, so each waits on its own chain only: ta and tb hold the two
// message+constant sums, moved into X0 in turn.
#define ROUNDS4x2(koff, abefA, cdghA, mA, ta, abefB, cdghB, mB, tb) \
	MOVOU koff(AX), ta; \
	MOVO ta, tb; \
	PADDD mA, ta; \
	PADDD mB, tb; \
	MOVO ta, X0; \
	SHA256RNDS2 X0, abefA, cdghA; \
	MOVO tb, X0; \
	SHA256RNDS2 X0, abefB, cdghB; \
	PSHUFD $0x0e, ta, X0; \
	SHA256RNDS2 X0, cdghA, abefA; \
	PSHUFD $0x0e, tb, X0; \
	SHA256RNDS2 X0, cdghB, abefB

// SCHED turns m0 = W[t-16..t-13] into W[t..t+3], given m1 = W[t-12..t-9],
// m2 = W[t-8..t-5], m3 = W[t-4..t-1]; t is a temporary.
//   MSG1: m0[k] = W[t-16+k] + sigma0(W[t-15+k])
//   PALIGNR: t = W[t-7..t-4], which PADDD adds
//   MSG2: adds sigma1 of W[t-2+k], the last two from its own results
#define SCHED(m0, m1, m2, m3, t) \
	SHA256MSG1 m1, m0; \
	MOVO m3, t; \
	PALIGNR $4, m2, t; \
	PADDD t, m0; \
	SHA256MSG2 m3, m0

// FEED: the feed-forward at the end of a block; s holds the state the block
// started from, and gets the new one.
#define FEED(s, abef, cdgh, t) \
	MOVOU 0(s), t; \
	PADDD t, abef; \
	MOVOU abef, 0(s); \
	MOVOU 16(s), t; \
	PADDD t, cdgh; \
	MOVOU cdgh, 16(s)

// func block1(s *[8]uint32, p *byte, nblocks int)
TEXT ·block1(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ nblocks+16(FP), CX
	LEAQ ·k256(SB), AX
	MOVOU ·bswapMask(SB), X15
	MOVOU 0(DI), X1
	MOVOU 16(DI), X2
	TESTQ CX, CX
	JZ done1

loop1:
	MOVO X1, X11
	MOVO X2, X12
	LOADW(SI, 0, X3)
	LOADW(SI, 16, X4)
	LOADW(SI, 32, X5)
	LOADW(SI, 48, X6)
	ROUNDS4(X1, X2, X3, 0)
	ROUNDS4(X1, X2, X4, 16)
	ROUNDS4(X1, X2, X5, 32)
	ROUNDS4(X1, X2, X6, 48)
	SCHED(X3, X4, X5, X6, X13)
	ROUNDS4(X1, X2, X3, 64)
	SCHED(X4, X5, X6, X3, X13)
	ROUNDS4(X1, X2, X4, 80)
	SCHED(X5, X6, X3, X4, X13)
	ROUNDS4(X1, X2, X5, 96)
	SCHED(X6, X3, X4, X5, X13)
	ROUNDS4(X1, X2, X6, 112)
	SCHED(X3, X4, X5, X6, X13)
	ROUNDS4(X1, X2, X3, 128)
	SCHED(X4, X5, X6, X3, X13)
	ROUNDS4(X1, X2, X4, 144)
	SCHED(X5, X6, X3, X4, X13)
	ROUNDS4(X1, X2, X5, 160)
	SCHED(X6, X3, X4, X5, X13)
	ROUNDS4(X1, X2, X6, 176)
	SCHED(X3, X4, X5, X6, X13)
	ROUNDS4(X1, X2, X3, 192)
	SCHED(X4, X5, X6, X3, X13)
	ROUNDS4(X1, X2, X4, 208)
	SCHED(X5, X6, X3, X4, X13)
	ROUNDS4(X1, X2, X5, 224)
	SCHED(X6, X3, X4, X5, X13)
	ROUNDS4(X1, X2, X6, 240)
	PADDD X11, X1
	PADDD X12, X2
	ADDQ $64, SI
	DECQ CX
	JNZ loop1

	MOVOU X1, 0(DI)
	MOVOU X2, 16(DI)

done1:
	RET

// func block2(s1, s2 *[8]uint32, p1, p2 *byte, nblocks int)
//
// Two independent messages, one block of each per iteration. Each step is
// done for the first message, then the second: the two chains of
// SHA256RNDS2 do not depend on each other, so the core runs one while the
// other waits on its latency. X0 is shared (SHA256RNDS2 reads it
// implicitly); renaming removes the false dependency.
TEXT ·block2(SB), NOSPLIT, $0-40
	MOVQ s1+0(FP), DI
	MOVQ s2+8(FP), DX
	MOVQ p1+16(FP), SI
	MOVQ p2+24(FP), BX
	MOVQ nblocks+32(FP), CX
	LEAQ ·k256(SB), AX
	MOVOU ·bswapMask(SB), X15
	MOVOU 0(DI), X1
	MOVOU 16(DI), X2
	MOVOU 0(DX), X7
	MOVOU 16(DX), X8
	TESTQ CX, CX
	JZ done2

loop2:
	LOADW(SI, 0, X3)
	LOADW(BX, 0, X9)
	LOADW(SI, 16, X4)
	LOADW(BX, 16, X10)
	LOADW(SI, 32, X5)
	LOADW(BX, 32, X11)
	LOADW(SI, 48, X6)
	LOADW(BX, 48, X12)
	ROUNDS4x2(0, X1, X2, X3, X13, X7, X8, X9, X14)
	ROUNDS4x2(16, X1, X2, X4, X13, X7, X8, X10, X14)
	ROUNDS4x2(32, X1, X2, X5, X13, X7, X8, X11, X14)
	ROUNDS4x2(48, X1, X2, X6, X13, X7, X8, X12, X14)
	SCHED(X3, X4, X5, X6, X13)
	SCHED(X9, X10, X11, X12, X14)
	ROUNDS4x2(64, X1, X2, X3, X13, X7, X8, X9, X14)
	SCHED(X4, X5, X6, X3, X13)
	SCHED(X10, X11, X12, X9, X14)
	ROUNDS4x2(80, X1, X2, X4, X13, X7, X8, X10, X14)
	SCHED(X5, X6, X3, X4, X13)
	SCHED(X11, X12, X9, X10, X14)
	ROUNDS4x2(96, X1, X2, X5, X13, X7, X8, X11, X14)
	SCHED(X6, X3, X4, X5, X13)
	SCHED(X12, X9, X10, X11, X14)
	ROUNDS4x2(112, X1, X2, X6, X13, X7, X8, X12, X14)
	SCHED(X3, X4, X5, X6, X13)
	SCHED(X9, X10, X11, X12, X14)
	ROUNDS4x2(128, X1, X2, X3, X13, X7, X8, X9, X14)
	SCHED(X4, X5, X6, X3, X13)
	SCHED(X10, X11, X12, X9, X14)
	ROUNDS4x2(144, X1, X2, X4, X13, X7, X8, X10, X14)
	SCHED(X5, X6, X3, X4, X13)
	SCHED(X11, X12, X9, X10, X14)
	ROUNDS4x2(160, X1, X2, X5, X13, X7, X8, X11, X14)
	SCHED(X6, X3, X4, X5, X13)
	SCHED(X12, X9, X10, X11, X14)
	ROUNDS4x2(176, X1, X2, X6, X13, X7, X8, X12, X14)
	SCHED(X3, X4, X5, X6, X13)
	SCHED(X9, X10, X11, X12, X14)
	ROUNDS4x2(192, X1, X2, X3, X13, X7, X8, X9, X14)
	SCHED(X4, X5, X6, X3, X13)
	SCHED(X10, X11, X12, X9, X14)
	ROUNDS4x2(208, X1, X2, X4, X13, X7, X8, X10, X14)
	SCHED(X5, X6, X3, X4, X13)
	SCHED(X11, X12, X9, X10, X14)
	ROUNDS4x2(224, X1, X2, X5, X13, X7, X8, X11, X14)
	SCHED(X6, X3, X4, X5, X13)
	SCHED(X12, X9, X10, X11, X14)
	ROUNDS4x2(240, X1, X2, X6, X13, X7, X8, X12, X14)
	FEED(DI, X1, X2, X13)
	FEED(DX, X7, X8, X14)
	ADDQ $64, SI
	ADDQ $64, BX
	DECQ CX
	JNZ loop2

done2:
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
