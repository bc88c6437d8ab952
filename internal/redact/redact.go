// Package redact masks secrets in text streams: exact values vastrun was
// given (the Vast key, storage credentials, declared secrets) and common
// token shapes (GitHub, Hugging Face, AWS, Slack, JWTs, private keys,
// Bearer headers). A bare 64-hex string is NOT masked by shape: SHA-256
// digests look exactly like Vast keys and are evidence; the key in use is
// masked by its exact value instead. Masking is line-buffered so a secret
// split across two writes is still caught.
package redact

import (
	"bytes"
	"io"
	"regexp"
	"sort"
	"sync"
)

// Mask replaces every secret.
const Mask = "***"

var shapes = regexp.MustCompile(`(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|hf_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|(?i:bearer)\s+[A-Za-z0-9._~+/-]{16,}=*)`)

// Redactor knows the secrets to mask. It is safe for concurrent use.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string
}

// New returns a redactor for the given values (short values are ignored:
// masking "a" would destroy every log).
func New(values ...string) *Redactor {
	r := &Redactor{}
	r.Add(values...)
	return r
}

// Add registers more secret values.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		if len(v) >= 4 {
			r.secrets = append(r.secrets, v)
		}
	}
	// Longest first, so a secret containing another is masked whole.
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

// String masks s.
func (r *Redactor) String(s string) string { return string(r.Bytes([]byte(s))) }

// Bytes masks b.
func (r *Redactor) Bytes(b []byte) []byte {
	r.mu.RLock()
	for _, s := range r.secrets {
		b = bytes.ReplaceAll(b, []byte(s), []byte(Mask))
	}
	r.mu.RUnlock()
	return shapes.ReplaceAll(b, []byte(Mask))
}

// Writer returns a writer that masks what passes through to w. Call Close
// (or Flush) to emit a final partial line.
func (r *Redactor) Writer(w io.Writer) *Writer { return &Writer{r: r, w: w} }

// Writer is a masking, line-buffered writer.
type Writer struct {
	mu  sync.Mutex
	r   *Redactor
	w   io.Writer
	buf []byte
}

const maxLine = 64 << 10

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if _, err := w.w.Write(w.r.Bytes(w.buf[:i+1])); err != nil {
			return len(p), err
		}
		w.buf = w.buf[i+1:]
	}
	// A very long line is emitted in pieces, keeping a tail long enough
	// that no secret can straddle the cut unmasked.
	// Masking first means no complete secret can straddle the cut; a
	// secret still arriving sits in the kept tail. Masked text contains
	// no secret, so masking it again later changes nothing.
	if len(w.buf) > maxLine {
		const keep = 4096
		masked := w.r.Bytes(w.buf)
		if _, err := w.w.Write(masked[:len(masked)-keep]); err != nil {
			return len(p), err
		}
		w.buf = append([]byte(nil), masked[len(masked)-keep:]...)
	}
	return len(p), nil
}

// Flush writes any buffered partial line.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.w.Write(w.r.Bytes(w.buf))
	w.buf = nil
	return err
}

// Close flushes.
func (w *Writer) Close() error { return w.Flush() }
