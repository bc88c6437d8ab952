package redact

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// benchLog is ~8 MiB of training-log-like lines: mostly prose and numbers,
// some base64 and hex blobs, no secret in it (the common case).
func benchLog() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	for b.Len() < 8<<20 {
		switch rng.IntN(8) {
		case 0:
			blob := make([]byte, 48)
			for i := range blob {
				blob[i] = byte(rng.Uint32())
			}
			fmt.Fprintf(&b, "chunk %x\n", blob)
		case 1:
			fmt.Fprintf(&b, "data: %s\n", bytes.Repeat([]byte("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo"), 2))
		default:
			fmt.Fprintf(&b, "epoch %d step %d loss=%.6f lr=%.2e grad_norm=%.4f tokens/s=%d\n", rng.IntN(100), rng.IntN(100000), rng.Float64(), rng.Float64()/1000, rng.Float64()*10, rng.IntN(1<<20))
		}
	}
	return b.Bytes()
}

func benchRedactor() *Redactor {
	return New("q8Zr/Kd+2mXw9/Vt4LpN7sYb+Hc3W1eJ", `tok-"quote' back\slash é☃ sp`, "hf_"+string(bytes.Repeat([]byte("x"), 34)),
		"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
}

// BenchmarkWriter streams a large log through the masking writer in 4 KiB writes.
func BenchmarkWriter(b *testing.B) {
	log := benchLog()
	r := benchRedactor()
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for range b.N {
		w := r.Writer(io.Discard)
		for i := 0; i < len(log); i += 4096 {
			w.Write(log[i:min(i+4096, len(log))])
		}
		w.Close()
	}
}

// BenchmarkBytes masks a large log in one call.
func BenchmarkBytes(b *testing.B) {
	log := benchLog()
	r := benchRedactor()
	b.SetBytes(int64(len(log)))
	b.ResetTimer()
	for range b.N {
		r.Bytes(log)
	}
}
