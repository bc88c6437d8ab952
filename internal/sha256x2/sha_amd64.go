//go:build amd64 && !purego

package sha256x2

// block1 hashes nblocks 64-byte blocks at p into s, which is in the
// ABEF/CDGH layout of stateIn.
//
//go:noescape
func block1(s *[8]uint32, p *byte, nblocks int)

// block2 hashes nblocks blocks at p1 into s1 and nblocks blocks at p2 into
// s2, the rounds of the two interleaved.
//
//go:noescape
func block2(s1, s2 *[8]uint32, p1, p2 *byte, nblocks int)

// assembly: this build has the block functions (tests tell a build without
// them from a CPU without the extensions).
const assembly = true

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// haveSHA: SHA extensions (CPUID.7.0:EBX bit 29), SSSE3 (PSHUFB, PALIGNR:
// CPUID.1:ECX bit 9) and SSE4.1 (CPUID.1:ECX bit 19).
var haveSHA = func() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	_, ebx7, _, _ := cpuid(7, 0)
	return ecx1&(1<<9) != 0 && ecx1&(1<<19) != 0 && ebx7&(1<<29) != 0
}()

// stateIn puts the FIPS state a..h into the operand layout of SHA256RNDS2:
// ABEF as dwords 3..0 of the first register, CDGH of the second.
func stateIn(h *[8]uint32) [8]uint32 {
	return [8]uint32{h[5], h[4], h[1], h[0], h[7], h[6], h[3], h[2]}
}

func stateOut(h *[8]uint32, s *[8]uint32) {
	h[0], h[1], h[2], h[3] = s[3], s[2], s[7], s[6]
	h[4], h[5], h[6], h[7] = s[1], s[0], s[5], s[4]
}

// blocks1 hashes p (len a multiple of 64) into h, one message.
func blocks1(h *[8]uint32, p []byte) {
	if len(p) < BlockSize {
		return
	}
	s := stateIn(h)
	for len(p) > 0 {
		n := min(len(p), chunk)
		block1(&s, &p[0], n/BlockSize)
		p = p[n:]
	}
	stateOut(h, &s)
}

// blocks2 hashes p1 into h1 and p2 into h2, two messages of the same length
// (a multiple of 64), their rounds interleaved.
func blocks2(h1, h2 *[8]uint32, p1, p2 []byte) {
	if len(p1) != len(p2) {
		panic("sha256x2: blocks2 of unequal lengths")
	}
	if len(p1) < BlockSize {
		return
	}
	s1, s2 := stateIn(h1), stateIn(h2)
	for len(p1) > 0 {
		n := min(len(p1), chunk)
		block2(&s1, &s2, &p1[0], &p2[0], n/BlockSize)
		p1, p2 = p1[n:], p2[n:]
	}
	stateOut(h1, &s1)
	stateOut(h2, &s2)
}
