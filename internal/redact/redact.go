// Package redact masks secrets in everything vastrun writes: exact values
// it was given (the Vast key, storage credentials, declared secrets) and
// common token shapes (GitHub, Hugging Face, AWS, Slack, JWTs, private
// keys, Bearer headers). Files are written through a [Sink], the one
// writer of the packages that produce evidence (internal/archtest pins it).
//
// Contract: a registered secret is masked in the forms programs print a
// value in:
//   - raw, and each line of a multi-line value (a line-buffered stream
//     shows one line at a time);
//   - JSON-escaped: Go's (with and without HTML escapes), minimal
//     (JavaScript's JSON.stringify), Python's default ensure_ascii (\u00e9
//     in either case; a byte that is not UTF-8 as \udcXX), PHP's (\/);
//   - URL/percent-encoded: Go's query and path escapes, RFC 3986 strictly
//     (Python's quote(safe=""), in either case), Python's quote (keeps /)
//     and quote_plus, JavaScript's encodeURIComponent and encodeURI, form
//     encoding (URLSearchParams, Java's URLEncoder);
//   - shell-quoted: POSIX single quotes (both ways of quoting a quote:
//     Python's shlex.quote), double quotes, bash's printf %q and $'...';
//   - HTML-escaped (the quotes as &#34; &quot; &#x22; &#39; &#x27; &apos;,
//     or left as they are);
//   - hex, lower or upper case, bare or with separators (spaces, ':', ',',
//     0x, \x), wrapped at any width, and as hexdumps print it (xxd, xxd -p,
//     od -tx1, hexdump -C, and od -x's 16-bit words), whose printable
//     column is masked too;
//   - base64, standard and URL-safe, padded or not, at each of the three
//     byte alignments inside longer data, wrapped at any width: the stable
//     middle of the encoding is matched with line breaks ignored; and the
//     composition vastrun itself makes, base64 of JSON-escaped lines.
//
// JSON documents are masked after decoding with [JSON], so a mask never
// lands inside an escape sequence.
//
// Streams are masked line by line ([Writer]), so a secret split across
// two writes is still caught; a line that may begin a wrapped base64 or
// hex form is held until the lines after it say whether it does (a form
// wrapped at widths under four characters is held line after line). Two
// streams of one log (a command's stdout and stderr) are masked each on
// its own before their lines interleave ([Redactor.Streams], [File]).
//
// Values shorter than [MinSecretLen], and multi-line values whose every
// line is under 4 bytes ([Unmaskable]), are refused by the preflight before
// anything is rented; Add still masks values of 4 bytes or more in their
// raw form (shorter would destroy every log). A bare 64-hex string is NOT
// masked by shape: SHA-256 digests look exactly like Vast keys and are
// evidence; the key in use is masked by its exact value instead.
//
// Not covered: encodings not listed (rot13, gzip, a secret split by a
// program into pieces that are each printed apart, hex of its JSON
// escapes), and a secret printed one character per line.
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

var shapes = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|hf_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|(?i:bearer)\s+[A-Za-z0-9._~+/-]{16,}=*)`)
})

// shapeAnchors are literals one of which every shape match holds: the
// regular expression, far slower than the rest of masking, runs only on
// text that has one. (Bearer in odd mixed case, "BeArEr", is let through.)
var shapeAnchors = [][]byte{[]byte("gh"), []byte("hf_"), []byte("AKIA"), []byte("xox"), []byte("eyJ"), []byte("PRIVATE KEY"), []byte("earer"), []byte("EARER")}

func maskShapes(b []byte) []byte {
	for _, a := range shapeAnchors {
		if bytes.Contains(b, a) {
			return shapes().ReplaceAll(b, []byte(Mask))
		}
	}
	return b
}

// Redactor knows the secrets to mask. It is safe for concurrent use; the
// zero value masks shapes only.
type Redactor struct {
	mu     sync.RWMutex
	values map[string]bool // registered raw values
	set    *patternSet     // every form of every value; replaced, never changed, by patterns
	stale  bool            // values were added since set was built
}

// patternSet is what is matched: the text forms as they are, the base64
// and hex forms in their views.
type patternSet struct {
	text, b64, hex *matcher
	longest        int // the longest pattern, in bytes
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
	for _, v := range values {
		if len(v) >= minPiece && !r.values[v] {
			r.values[v] = true
			// The patterns are built when something is next masked:
			// building them (every form of every value) took 2.7 ms of a
			// 0.1 s reap --json, which masks nothing unless it fails.
			r.stale = true
		}
	}
}

// build makes the pattern set of every registered value. Called with
// r.mu held for writing.
func (r *Redactor) build() *patternSet {
	var text, b64, hexs [][]byte
	seen := map[string]bool{}
	longest := 0
	collect := func(list *[][]byte, forms []string) {
		for _, f := range forms {
			if !seen[f] {
				seen[f] = true
				*list = append(*list, []byte(f))
				longest = max(longest, len(f))
			}
		}
	}
	for v := range r.values {
		collect(&text, Forms(v))
		b, h := encodedForms(v)
		collect(&b64, b)
		collect(&hexs, h)
	}
	return &patternSet{text: newMatcher(text, false), b64: newMatcher(b64, true), hex: newMatcher(hexs, true), longest: longest}
}

// patterns is the pattern set of every value added so far, built on the
// first call after an Add.
func (r *Redactor) patterns() *patternSet {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	set, stale := r.set, r.stale
	r.mu.RUnlock()
	if !stale {
		return set
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stale {
		r.set, r.stale = r.build(), false
	}
	return r.set
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
func (r *Redactor) String(s string) string { return string(r.mask([]byte(s))) }

// Bytes masks b into a new slice; b is left as it was.
func (r *Redactor) Bytes(b []byte) []byte {
	out := r.mask(b)
	if len(out) > 0 && len(b) > 0 && &out[0] == &b[0] {
		out = bytes.Clone(out)
	}
	return out
}

// bigInput is the size above which Bytes masks through a Writer, in
// bounded batches of lines, so that the views' index arrays stay small.
const bigInput = 1 << 20

// maskLines masks a piece of a log (see patternSet.mask).
func (r *Redactor) maskLines(b []byte) []byte {
	if set := r.patterns(); set != nil {
		b = set.mask(b, true)
	}
	return maskShapes(b)
}

// mask masks b; it may return b itself when nothing in it is masked.
func (r *Redactor) mask(b []byte) []byte {
	set := r.patterns()
	if set == nil {
		return maskShapes(b)
	}
	if len(b) > bigInput {
		var out bytes.Buffer
		out.Grow(len(b))
		w := r.Writer(&out)
		w.Write(b) //nolint:errcheck // a bytes.Buffer cannot fail
		w.Close()  //nolint:errcheck // a bytes.Buffer cannot fail
		return out.Bytes()
	}
	return maskShapes(set.mask(b, false))
}

// mask masks the text forms and the encoded forms, both found in b as it
// is (masking one first could hide the other: a mask in a hexdump's offset
// column breaks the dump). A text form that spans lines (a multi-line
// secret) is masked whole, or, with lines set (a log), line by line,
// keeping the log's lines; an encoded form is masked line by line.
func (set *patternSet) mask(b []byte, lines bool) []byte {
	var spans []span
	set.text.find(b, func(s, e int) { spans = append(spans, span{s, e}) })
	enc := set.viewSpans(b)
	switch {
	case spans == nil && enc == nil:
		return b
	case lines || spans == nil:
		return replaceLines(b, append(spans, enc...))
	case enc == nil:
		return replace(b, spans)
	}
	// Both: whole where only text forms are, line by line where an encoded
	// form is.
	all := merge(append(append([]span(nil), spans...), enc...))
	var whole, byLine []span
	for _, a := range all {
		encoded := false
		for _, v := range enc {
			encoded = encoded || (v.start < a.end && a.start < v.end)
		}
		if encoded {
			byLine = append(byLine, a)
		} else {
			whole = append(whole, a)
		}
	}
	return replaceMixed(b, whole, byLine)
}

func (set *patternSet) viewSpans(b []byte) []span {
	var spans []span
	vw := getView(len(b))
	defer views.Put(vw)
	if len(set.b64.pats) > 0 {
		b64View(b, 0, vw)
		spans = append(spans, vw.spans(set.b64)...)
	}
	if len(set.hex.pats) > 0 {
		vw.reset()
		hexView(b, 0, vw)
		spans = append(spans, vw.spans(set.hex)...)
	}
	return spans
}

// Contains reports whether b still holds any form of a registered secret.
func (r *Redactor) Contains(b []byte) bool {
	set := r.patterns()
	if set == nil {
		return false
	}
	if set.text.any(b) {
		return true
	}
	for len(b) > 0 {
		// Views of at most bigInput bytes, overlapping by a margin that any
		// wrapped form fits in.
		n := min(len(b), bigInput)
		if set.viewSpans(b[:n]) != nil {
			return true
		}
		if n == len(b) {
			break
		}
		b = b[n-min(n/2, 8*set.longest+4096):]
	}
	return false
}

// Writer returns a writer that masks what passes through to w. Call Close
// (or Flush) to emit what it still holds.
func (r *Redactor) Writer(w io.Writer) *Writer { return &Writer{r: r, w: w} }

// Streams returns n writers that mask what passes through them each on its
// own (a line of one never joins a line of another) and write whole masked
// lines to w, one writer at a time. A command's stdout and stderr going to
// one log take one each: through a single writer, a secret printed in two
// writes to stdout with a write to stderr between them would reach the log
// split, and unmasked.
func (r *Redactor) Streams(w io.Writer, n int) []*Writer {
	lw := &lockedWriter{w: w}
	out := make([]*Writer, n)
	for i := range out {
		out[i] = r.Writer(lw)
	}
	return out
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Writer is a masking, line-buffered writer.
//
// It passes on whole lines, masked. A line whose end could be the start of
// a wrapped encoded form (base64 or hex continuing on the next lines) is
// held until the lines after it say whether it is: that needs the end to
// match at least the first three characters of a form (or the whole of
// what is held, so that a form wrapped at a width under three is held line
// after line), which ordinary output seldom does; a line ending in one or
// two such characters goes on, and the rest of the form, without its first
// characters, is a form of its own (see encodedForms).
type Writer struct {
	mu sync.Mutex
	r  *Redactor
	w  io.Writer
	// held: masked whole lines that may begin a wrapped form; part: the
	// line still being written, not masked yet.
	held, part []byte
}

const (
	maxLine = 64 << 10 // a longer line is passed on in pieces
	batch   = 256 << 10
)

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.LastIndexByte(w.part[:min(len(w.part), batch)], '\n')
		if i < 0 {
			i = bytes.IndexByte(w.part, '\n')
		}
		if i < 0 {
			break
		}
		if err := w.emit(w.part[:i+1], true); err != nil {
			return len(p), err
		}
		w.part = w.part[i+1:]
	}
	// A very long line is passed on in pieces, keeping a tail long enough
	// that no form can straddle the cut unmasked: masking first means no
	// whole form straddles it, and one still arriving sits in the tail.
	// Masked text holds no form, so masking it again changes nothing.
	if len(w.part) > maxLine {
		keep := w.keep()
		masked := w.r.maskLines(append(w.held, w.part...))
		w.held = nil
		if len(masked) > keep {
			if _, err := w.w.Write(masked[:len(masked)-keep]); err != nil {
				return len(p), err
			}
			masked = masked[len(masked)-keep:]
		}
		w.part = append([]byte(nil), masked...)
	}
	if len(w.part) == 0 {
		w.part = nil // let a long-gone line's buffer go
	}
	return len(p), nil
}

// keep is the tail of a long line kept back when the rest is passed on.
func (w *Writer) keep() int {
	if set := w.r.patterns(); set != nil {
		return max(4096, 4*set.longest)
	}
	return 4096
}

// emit masks the held lines and lines (whole lines), passes on all but
// what may begin a wrapped form, and holds that, as it came: the next lines
// may complete a form that starts there, or a longer one that a match
// ending there is the start of.
func (w *Writer) emit(lines []byte, mayHold bool) error {
	region := lines
	if len(w.held) > 0 {
		region = append(w.held, lines...)
	}
	cut, out := len(region), region
	if set := w.r.patterns(); set != nil {
		var spans []span
		spans, cut = set.streamSpans(region, mayHold && len(region) <= batch+maxLine)
		// A form that runs past the cut is held whole: what is left of it
		// after the cut might not be a form on its own.
		spans = merge(spans)
		for i := len(spans) - 1; i >= 0; i-- {
			if sp := spans[i]; sp.start < cut && sp.end > cut {
				cut = bytes.LastIndexByte(region[:sp.start], '\n') + 1
			}
		}
		out = region[:cut]
		var before []span
		for _, sp := range spans {
			if sp.end <= cut {
				before = append(before, sp)
			}
		}
		if before != nil {
			out = replaceLines(out, before)
		}
	}
	if out = maskShapes(out); len(out) > 0 {
		if _, err := w.w.Write(out); err != nil {
			return err
		}
	}
	w.held = append([]byte(nil), region[cut:]...)
	return nil
}

// streamSpans finds every form in b (text forms masked line by line, as
// in a log) and, with hold, where the lines that may begin a wrapped form
// start (len(b) when none do).
func (set *patternSet) streamSpans(b []byte, hold bool) ([]span, int) {
	var spans []span
	set.text.find(b, func(s, e int) { spans = append(spans, span{s, e}) })
	cut := len(b)
	vw := getView(len(b))
	defer views.Put(vw)
	for _, c := range []struct {
		m     *matcher
		build func([]byte, int, *view)
	}{{set.b64, b64View}, {set.hex, hexView}} {
		if len(c.m.pats) == 0 {
			continue
		}
		vw.reset()
		c.build(b, 0, vw)
		spans = append(spans, vw.spans(c.m)...)
		if !hold || !c.m.mayOpen(vw.v) {
			continue // the common case: the end is inside no pattern
		}
		if n := c.m.openPrefix(vw.v); n > 0 {
			start := int(vw.pos[len(vw.v)-n])
			cut = min(cut, bytes.LastIndexByte(b[:start], '\n')+1)
		}
	}
	return spans, cut
}

// Flush writes what the writer holds: the held lines and the last,
// unfinished line.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.held) == 0 && len(w.part) == 0 {
		return nil
	}
	err := w.emit(w.part, false)
	w.held, w.part = nil, nil
	return err
}

// Close flushes.
func (w *Writer) Close() error { return w.Flush() }
