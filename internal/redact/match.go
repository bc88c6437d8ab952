package redact

import (
	"bytes"
	"encoding/binary"
	"sort"
)

// matcher finds many fixed patterns (each at least keyLen bytes) in one
// pass: a 64 Kibit filter on each position's first four bytes rules out
// almost every position with one bit test, so the cost does not grow with
// the number of patterns, unlike one bytes.Contains per pattern.
type matcher struct {
	filter [1 << 16 / 64]uint64
	byKey  map[uint32][]int32
	pats   [][]byte
	// tails indexes every proper prefix of length >= holdLen by its last
	// holdLen bytes, for the streaming writer's question "could what ends
	// here be the start of a pattern?"; short holds the shorter prefixes.
	tails map[uint32][]prefixRef
	short map[string]bool
}

type prefixRef struct{ pat, n int32 }

const keyLen = 4

// holdLen is the shortest start of a pattern a streaming writer holds a
// line back for; a line ending in a shorter one goes on (ordinary lines
// end in one or two characters that begin some pattern all the time), and
// the rest of the pattern is a pattern of its own (see encodedForms).
const holdLen = 3

func key(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

func key3(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }

func slot(k uint32) uint32 { return (k * 0x9E3779B1) >> 16 }

func newMatcher(pats [][]byte, prefixes bool) *matcher {
	m := &matcher{byKey: map[uint32][]int32{}}
	for _, p := range pats {
		if len(p) < keyLen {
			continue
		}
		i := int32(len(m.pats))
		m.pats = append(m.pats, p)
		k := key(p)
		s := slot(k)
		m.filter[s>>6] |= 1 << (s & 63)
		m.byKey[k] = append(m.byKey[k], i)
	}
	if prefixes {
		m.tails = map[uint32][]prefixRef{}
		m.short = map[string]bool{}
		for i, p := range m.pats {
			for n := 1; n < len(p); n++ {
				if n < holdLen {
					m.short[string(p[:n])] = true
					continue
				}
				k := key3(p[n-holdLen : n])
				m.tails[k] = append(m.tails[k], prefixRef{int32(i), int32(n)})
			}
		}
	}
	return m
}

// find calls fn with the span of every match in b.
func (m *matcher) find(b []byte, fn func(start, end int)) {
	if m == nil || len(m.pats) == 0 {
		return
	}
	for i := 0; i+keyLen <= len(b); i++ {
		k := key(b[i:])
		if s := slot(k); m.filter[s>>6]&(1<<(s&63)) == 0 {
			continue
		}
		for _, pi := range m.byKey[k] {
			if p := m.pats[pi]; bytes.HasPrefix(b[i:], p) {
				fn(i, i+len(p))
			}
		}
	}
}

// any reports whether b holds a match.
func (m *matcher) any(b []byte) bool {
	if m == nil || len(m.pats) == 0 {
		return false
	}
	for i := 0; i+keyLen <= len(b); i++ {
		k := key(b[i:])
		if s := slot(k); m.filter[s>>6]&(1<<(s&63)) == 0 {
			continue
		}
		for _, pi := range m.byKey[k] {
			if bytes.HasPrefix(b[i:], m.pats[pi]) {
				return true
			}
		}
	}
	return false
}

// mayOpen is a quick openPrefix > 0 for the common case: v's last holdLen
// characters are inside no pattern.
func (m *matcher) mayOpen(v []byte) bool {
	if m == nil || m.tails == nil || len(v) == 0 {
		return false
	}
	if len(v) < holdLen {
		return true // too short to tell: look closer
	}
	return len(m.tails[key3(v[len(v)-holdLen:])]) > 0
}

// openPrefix is the length of the longest suffix of v that is a proper
// prefix of a pattern: the start of a match that later input may complete.
// Suffixes shorter than holdLen count only when they are the whole of v
// (a short piece is harmless on its own but must not start a chain of
// short pieces that are each let through).
func (m *matcher) openPrefix(v []byte) int {
	if m == nil || m.tails == nil || len(v) == 0 {
		return 0
	}
	if len(v) < holdLen {
		if m.short[string(v)] {
			return len(v)
		}
		return 0
	}
	best := 0
	for _, ref := range m.tails[key3(v[len(v)-holdLen:])] {
		n := int(ref.n)
		if n > best && n <= len(v) && bytes.Equal(m.pats[ref.pat][:n], v[len(v)-n:]) {
			best = n
		}
	}
	return best
}

// span is a half-open byte range to mask.
type span struct{ start, end int }

// merge sorts spans and joins overlapping ones.
func merge(s []span) []span {
	if len(s) < 2 {
		return s
	}
	sort.Slice(s, func(i, j int) bool { return s[i].start < s[j].start })
	out := s[:1]
	for _, x := range s[1:] {
		last := &out[len(out)-1]
		if x.start < last.end {
			last.end = max(last.end, x.end)
			continue
		}
		out = append(out, x)
	}
	return out
}

// replace masks each span of b whole.
func replace(b []byte, spans []span) []byte { return replaceMixed(b, spans, nil) }

// replaceLines masks each span line by line: every line a span touches
// keeps its line break and shows one mask for its part of the span, so a
// secret wrapped over lines leaves the layout of the output as it was.
func replaceLines(b []byte, spans []span) []byte { return replaceMixed(b, nil, spans) }

// replaceMixed masks the spans of whole each with one mask, and those of
// byLine line by line; no span of one overlaps a span of the other.
func replaceMixed(b []byte, whole, byLine []span) []byte {
	type marked struct {
		span
		lines bool
	}
	var all []marked
	for _, s := range merge(whole) {
		all = append(all, marked{s, false})
	}
	for _, s := range merge(byLine) {
		all = append(all, marked{s, true})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].start < all[j].start })
	out := make([]byte, 0, len(b))
	at := 0
	for _, s := range all {
		out = append(out, b[at:s.start]...)
		if !s.lines {
			out = append(out, Mask...)
			at = s.end
			continue
		}
		masked := false
		for i := s.start; i < s.end; i++ {
			switch c := b[i]; c {
			case '\n', '\r':
				out = append(out, c)
				masked = false
			default:
				if !masked {
					out = append(out, Mask...)
					masked = true
				}
			}
		}
		at = s.end
	}
	return append(out, b[at:]...)
}
