package redact

import (
	"bytes"
	"sync"
)

// A view is the text as an encoding's reader sees it: base64 and hex
// ignore the line breaks and spaces a program wraps them with, so an
// encoded secret is matched in the view whatever the width of the lines,
// and each match is mapped back to the bytes it came from.
type view struct {
	v   []byte  // the characters that count
	pos []int32 // pos[i]: index in the text of v[i]
	// ascii: the printable columns of hexdump lines (xxd, hexdump -C); a
	// match ending on such a line masks its column too.
	ascii []asciiCol
}

type asciiCol struct {
	digits span // the line's hex digits, as indexes in v
	col    span // the printable column, as indexes in the text
}

// views recycles the views' buffers: masking a log builds two per batch.
var views = sync.Pool{New: func() any { return new(view) }}

func getView(n int) *view {
	vw := views.Get().(*view)
	if cap(vw.v) < n {
		vw.v, vw.pos = make([]byte, 0, n), make([]int32, 0, n)
	}
	vw.reset()
	return vw
}

func (vw *view) reset() { vw.v, vw.pos, vw.ascii = vw.v[:0], vw.pos[:0], vw.ascii[:0] }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func lowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// b64View keeps everything but whitespace.
func b64View(b []byte, base int, vw *view) {
	for i, c := range b {
		if !isSpace(c) {
			vw.v = append(vw.v, c)
			vw.pos = append(vw.pos, int32(base+i))
		}
	}
}

// hexView keeps hex digits (lowercased) and every other character that is
// not a separator hex printers put between bytes: whitespace, ':' and ','
// and the 0x and \x prefixes. Hexdumps (xxd, hexdump -C, od), at the start
// of a line or after a log's own prefix, give only their hex columns: their
// offsets and printable columns would otherwise break the run of digits at
// every line.
func hexView(b []byte, base int, vw *view) {
	for ls := 0; ls < len(b); {
		le := ls
		for le < len(b) && b[le] != '\n' {
			le++
		}
		d, ok := parseHexdump(b, ls, le, false)
		at := ls
		for p := ls + 1; !ok && p < le; p++ {
			if b[p-1] == ' ' && isHex(b[p]) {
				// After a prefix only a dump whose printable column (or
				// nothing) follows its groups counts: less is too easily
				// ordinary text.
				if d, ok = parseHexdump(b, p, le, true); ok {
					at = p
				}
			}
		}
		if !ok {
			at = le
		}
		for i := ls; i < at; i++ {
			c := b[i]
			switch {
			case isSpace(c) || c == ':' || c == ',':
				continue
			case (c == '0' || c == '\\') && i+2 < at && (b[i+1] == 'x' || b[i+1] == 'X') && isHex(b[i+2]):
				i++
				continue
			case !isHex(c):
				// Any other character only breaks a run of digits: one
				// stands for a row of them, keeping the view short.
				if n := len(vw.v); n > 0 && !isHex(vw.v[n-1]) {
					continue
				}
			}
			vw.v = append(vw.v, lowerHex(c))
			vw.pos = append(vw.pos, int32(base+i))
		}
		if ok {
			first := len(vw.v)
			for _, g := range d.groups {
				for i := g.start; i < g.end; i++ {
					vw.v = append(vw.v, lowerHex(b[i]))
					vw.pos = append(vw.pos, int32(base+i))
				}
			}
			if d.col.end > d.col.start && len(vw.v) > first {
				vw.ascii = append(vw.ascii, asciiCol{digits: span{first, len(vw.v)}, col: span{base + d.col.start, base + d.col.end}})
			}
		}
		ls = le + 1
	}
}

// hexdump is one line of a hexdump: its groups of hex digits and its
// printable column (empty when it has none).
type hexdump struct {
	groups []span
	col    span
}

// parseHexdump reads b[ls:le] as a hexdump line: an offset of 6 to 16 hex
// digits, then ':' or a space, then groups of hex digits, then optionally,
// two spaces off at least, a printable column of exactly the groups'
// bytes as xxd and hexdump -C show them ('.' for what is not printable
// ASCII), bare (its spaces at either end trimmed) or between '|'. strict
// asks for groups followed by such a column or by nothing.
func parseHexdump(b []byte, ls, le int, strict bool) (hexdump, bool) {
	j := ls
	for j < le && isHex(b[j]) {
		j++
	}
	if n := j - ls; n < 6 || n > 16 || j == le || (b[j] != ':' && b[j] != ' ') {
		return hexdump{}, false
	}
	var groups []span
	at := j + 1
	for {
		k := at
		for k < le && b[k] == ' ' {
			k++
		}
		e := k
		for e < le && isHex(b[e]) {
			e++
		}
		if e == k || (e-k)%2 != 0 || (e < le && b[e] != ' ' && b[e] != '\r') {
			break
		}
		groups = append(groups, span{k, e})
		at = e
	}
	var shown []byte
	ends := make([]int, len(groups)+1) // ends[t]: bytes in the first t groups
	for t, g := range groups {
		for i := g.start; i+1 < g.end; i += 2 {
			c := unhex(b[i])<<4 | unhex(b[i+1])
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			shown = append(shown, c)
		}
		ends[t+1] = len(shown)
	}
	restOf := func(t int) span {
		s, e := j+1, le
		if t > 0 {
			s = groups[t-1].end
		}
		for s < le && b[s] == ' ' {
			s++
		}
		for e > s && (b[e-1] == ' ' || b[e-1] == '\r') {
			e--
		}
		return span{s, e}
	}
	for t := len(groups); t > 0; t-- {
		r := restOf(t)
		if r.start == r.end || r.start-groups[t-1].end < 2 {
			// No column after these groups (none at all, as od prints,
			// or too close): fewer groups, in case words of a column that
			// looks like hex were taken for groups.
			continue
		}
		rest, want := b[r.start:r.end], shown[:ends[t]]
		if len(rest) >= 2 && rest[0] == '|' && rest[len(rest)-1] == '|' {
			rest = rest[1 : len(rest)-1]
		} else {
			want = bytes.Trim(want, " ")
		}
		if bytes.Equal(rest, want) {
			return hexdump{groups: groups[:t], col: r}, true
		}
	}
	if strict && (len(groups) == 0 || restOf(len(groups)).start != restOf(len(groups)).end) {
		return hexdump{}, false
	}
	return hexdump{groups: groups}, true
}

// spans maps the view's matches back to spans of the text, with the
// printable column of a hexdump line a match ends on.
func (vw *view) spans(m *matcher) []span {
	var out []span
	m.find(vw.v, func(s, e int) {
		out = append(out, span{int(vw.pos[s]), int(vw.pos[e-1]) + 1})
		for _, a := range vw.ascii {
			if a.digits.start < e && e <= a.digits.end {
				out = append(out, a.col)
				break
			}
		}
	})
	return out
}
