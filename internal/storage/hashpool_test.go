package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"testing"
)

// Many streams hashing at once through the pool, each reusing two buffers
// in turn the way downloadOne does (a buffer is overwritten as soon as the
// chunk after it was submitted), get the digests crypto/sha256 gives.
func TestHashStreamsInThePool(t *testing.T) {
	const streams = 24
	var wg sync.WaitGroup
	errs := make(chan string, streams)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			msg := make([]byte, rng.IntN(3<<20))
			for i := range msg {
				msg[i] = byte(rng.Uint32())
			}
			hs := newHashStream()
			var bufs [2][]byte
			for i := range bufs {
				bufs[i] = make([]byte, 300<<10)
			}
			for off, b := 0, 0; off < len(msg); b ^= 1 {
				n := min(len(msg)-off, 1+rng.IntN(len(bufs[b])))
				if rng.IntN(4) == 0 {
					n = min(len(msg)-off, 64*(1+rng.IntN(64))) // whole blocks, the common case
				}
				copy(bufs[b], msg[off:off+n])
				hs.submit(bufs[b][:n])
				off += n
				// The other buffer's chunk is hashed now: scribble on it.
				for i := range bufs[b^1] {
					bufs[b^1][i] = 0xff
				}
			}
			want := sha256.Sum256(msg)
			if got := hex.EncodeToString(hs.sum()); got != hex.EncodeToString(want[:]) {
				errs <- "stream " + string(rune('a'+s)) + ": digest " + got + ", want " + hex.EncodeToString(want[:])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
