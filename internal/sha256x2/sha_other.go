//go:build !amd64 || purego

package sha256x2

// Elsewhere there is no assembly: every Digest wraps crypto/sha256, so the
// block functions are never called.
const haveSHA = false

const assembly = false

func blocks1(h *[8]uint32, p []byte) { panic("sha256x2: no block function on this platform") }

func blocks2(h1, h2 *[8]uint32, p1, p2 []byte) {
	panic("sha256x2: no block function on this platform")
}
