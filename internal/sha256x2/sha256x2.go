// Package sha256x2 is SHA-256 (FIPS 180-4) that can hash two independent
// messages at once on one core.
//
// Why: on x86 with the SHA extensions a single SHA-256 stream is bound by
// the latency of SHA256RNDS2, not by its throughput, so crypto/sha256 leaves
// most of the unit idle. Write2 feeds two digests' blocks through one
// instruction stream with their rounds interleaved, and the two dependency
// chains overlap: nearly twice the bytes per core. Callers with several
// independent streams to hash (a checkpoint's files and parts) pair them.
//
// Contract:
//   - Digest is a hash.Hash computing standard SHA-256; its sums equal
//     crypto/sha256's for the same bytes, whatever mix of Write and Write2
//     fed them.
//   - Write2(d1, p1, d2, p2) has exactly the effect of d1.Write(p1) then
//     d2.Write(p2). Only its speed differs: the full blocks both have ready
//     are hashed together on the calling goroutine (no goroutines, no
//     allocation).
//   - Sum does not change the digest's state. A Digest is not safe for
//     concurrent use.
//   - Interleaved reports whether the two-way code runs (amd64 with the SHA
//     extensions, SSSE3 and SSE4.1). Elsewhere a Digest wraps crypto/sha256
//     and Write2 is two Writes: correct everywhere, faster where it can be.
package sha256x2

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// Size is the size of a SHA-256 checksum in bytes.
const Size = 32

// BlockSize is SHA-256's block size in bytes.
const BlockSize = 64

// chunk bounds one assembly call (about 50 µs of hashing): the goroutine
// cannot be preempted inside it, and a caller may hand over gigabytes.
const chunk = 64 << 10

// useSHA is haveSHA unless a test turns it off to check the crypto/sha256
// path on a machine that has the extensions.
var useSHA = haveSHA

// Interleaved reports whether Write2 runs the two-way SHA-NI code (amd64
// with SHA extensions); elsewhere Write2 is two Writes.
func Interleaved() bool { return useSHA }

var iv = [8]uint32{
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}

// Digest is a SHA-256 hash.Hash (New, Write, Sum, Reset, Size, BlockSize).
// Make one with New; the zero value is not ready for use.
type Digest struct {
	h   [8]uint32
	x   [BlockSize]byte // the pending partial block: x[:nx]
	nx  int
	len uint64    // bytes written
	std hash.Hash // non-nil: no SHA extensions, crypto/sha256 does the work
}

var _ hash.Hash = (*Digest)(nil)

// New returns a SHA-256 digest.
func New() *Digest {
	d := &Digest{}
	if !useSHA {
		d.std = sha256.New()
	}
	d.Reset()
	return d
}

// Reset returns d to its initial state.
func (d *Digest) Reset() {
	if d.std != nil {
		d.std.Reset()
		return
	}
	d.h = iv
	d.nx = 0
	d.len = 0
}

// Size returns 32.
func (d *Digest) Size() int { return Size }

// BlockSize returns 64.
func (d *Digest) BlockSize() int { return BlockSize }

// Write adds p to the message. It never returns an error.
func (d *Digest) Write(p []byte) (int, error) {
	if d.std != nil {
		return d.std.Write(p)
	}
	n := len(p)
	d.len += uint64(n)
	p = d.fill(p)
	d.rest(p)
	return n, nil
}

// fill completes the pending partial block from p, hashing it once full,
// and returns what is left of p. When it returns a non-empty slice there is
// no pending block.
func (d *Digest) fill(p []byte) []byte {
	if d.nx == 0 {
		return p
	}
	c := copy(d.x[d.nx:], p)
	d.nx += c
	if d.nx == BlockSize {
		blocks1(&d.h, d.x[:])
		d.nx = 0
	}
	return p[c:]
}

// rest hashes p's full blocks and keeps its tail pending; d has no pending
// block, or p is empty.
func (d *Digest) rest(p []byte) {
	if m := len(p) &^ (BlockSize - 1); m > 0 {
		blocks1(&d.h, p[:m])
		p = p[m:]
	}
	if len(p) > 0 {
		d.nx = copy(d.x[:], p)
	}
}

// Write2 is d1.Write(p1) followed by d2.Write(p2) (d1 != d2, both non-nil),
// except that the full blocks the two have in common are hashed together,
// interleaved, on the calling goroutine.
func Write2(d1 *Digest, p1 []byte, d2 *Digest, p2 []byte) {
	if d1 == d2 || d1.std != nil || d2.std != nil {
		d1.Write(p1)
		d2.Write(p2)
		return
	}
	d1.len += uint64(len(p1))
	d2.len += uint64(len(p2))
	p1 = d1.fill(p1)
	p2 = d2.fill(p2)
	// A digest still holding a partial block has an empty p, so m is 0.
	if m := min(len(p1), len(p2)) &^ (BlockSize - 1); m > 0 {
		blocks2(&d1.h, &d2.h, p1[:m], p2[:m])
		p1, p2 = p1[m:], p2[m:]
	}
	d1.rest(p1)
	d2.rest(p2)
}

// Sum appends the digest of the bytes written so far to b, leaving d as it
// was.
func (d *Digest) Sum(b []byte) []byte {
	if d.std != nil {
		return d.std.Sum(b)
	}
	c := *d // the padding goes into a copy: Sum must not change d
	var pad [BlockSize + 8]byte
	pad[0] = 0x80
	// 0x80, then zeros up to 56 mod 64, then the length in bits.
	padLen := 55 - int(c.len%BlockSize)
	if padLen < 0 {
		padLen += BlockSize
	}
	binary.BigEndian.PutUint64(pad[1+padLen:], c.len<<3)
	c.fillAll(pad[:1+padLen+8])
	var out [Size]byte
	for i, v := range c.h {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return append(b, out[:]...)
}

// fillAll is Write without counting the length: the padding is not part of
// the message.
func (d *Digest) fillAll(p []byte) {
	p = d.fill(p)
	d.rest(p)
}
