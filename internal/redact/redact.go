// Package redact masks secrets in everything vastrun writes: exact values
// it was given (the Vast key, storage credentials, declared secrets) and
// common token shapes (GitHub, Hugging Face, AWS, Slack, JWTs, private
// keys, Bearer headers).
//
// Contract: a registered secret is masked in its raw form, line by line
// when it spans lines (so a line-buffered stream never shows a piece of
// it), and in the encodings a value takes on its way through a workload:
// JSON string escaping (Go's, with and without HTML escapes, and the
// ASCII-only form of Python's json.dumps), URL/percent-encoding (query,
// path and strict), base64 (standard and URL alphabets, at every byte
// alignment, so the secret is found inside a longer encoded blob and
// inside `echo "$S" | base64`, whose 76-column lines are masked too), and
// shell quoting (POSIX single quotes, Python's shlex.quote, bash's
// printf %q), and HTML escaping. JSON documents are masked after decoding with [JSON], so a
// mask never lands inside an escape sequence.
//
// Values shorter than [MinSecretLen], and multi-line values whose every
// line is under 4 bytes ([Unmaskable]), are refused by the preflight before
// anything is rented; Add still masks values of 4 bytes or more in their
// raw form (shorter would destroy every log). A bare 64-hex string is NOT
// masked by shape: SHA-256 digests look exactly like Vast keys and are
// evidence; the key in use is masked by its exact value instead. Masking
// is line-buffered so a secret split across two writes is still caught.
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

// MinSecretLen is the shortest declared secret vastrun accepts: a shorter
// one cannot be masked without also masking ordinary text.
const MinSecretLen = 8

// minPiece is the shortest fragment (a line of a multi-line secret, a raw
// short value) that is masked on its own.
const minPiece = 4

var shapes = regexp.MustCompile(`(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|hf_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|(?i:bearer)\s+[A-Za-z0-9._~+/-]{16,}=*)`)

// Redactor knows the secrets to mask. It is safe for concurrent use; the
// zero value masks shapes only.
type Redactor struct {
	mu       sync.RWMutex
	values   map[string]bool // registered raw values
	patterns [][]byte        // every form of every value, longest first
}

// New returns a redactor for the given values.
func New(values ...string) *Redactor {
	r := &Redactor{}
	r.Add(values...)
	return r
}

// Add registers more secret values, with every form they can take.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.values == nil {
		r.values = map[string]bool{}
	}
	seen := map[string]bool{}
	for _, p := range r.patterns {
		seen[string(p)] = true
	}
	for _, v := range values {
		if len(v) < minPiece || r.values[v] {
			continue
		}
		r.values[v] = true
		for _, f := range Forms(v) {
			if !seen[f] {
				seen[f] = true
				r.patterns = append(r.patterns, []byte(f))
			}
		}
	}
	// Longest first, so a form containing another is masked whole.
	sort.SliceStable(r.patterns, func(i, j int) bool { return len(r.patterns[i]) > len(r.patterns[j]) })
}

// Values returns the registered raw values (for checks, never for output).
func (r *Redactor) Values() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.values))
	for v := range r.values {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// String masks s.
func (r *Redactor) String(s string) string { return string(r.Bytes([]byte(s))) }

// Bytes masks b.
func (r *Redactor) Bytes(b []byte) []byte {
	if r == nil {
		return shapes.ReplaceAll(b, []byte(Mask))
	}
	r.mu.RLock()
	for _, p := range r.patterns {
		if bytes.Contains(b, p) {
			b = bytes.ReplaceAll(b, p, []byte(Mask))
		}
	}
	r.mu.RUnlock()
	return shapes.ReplaceAll(b, []byte(Mask))
}

// Contains reports whether b still holds any form of a registered secret.
func (r *Redactor) Contains(b []byte) bool {
	if r == nil {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, p := range r.patterns {
		if bytes.Contains(b, p) {
			return true
		}
	}
	return false
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
