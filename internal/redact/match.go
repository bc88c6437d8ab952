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
	// tails indexes every proper prefix of length >= keyLen by its last
	// keyLen bytes, for the streaming writer's question "could what ends
	// here be the start of a pattern?"; short holds the shorter prefixes.
	tails map[uint32][]prefixRef
	short map[string]bool
}

type prefixRef struct{ pat, n int32 }

const keyLen = 4

func key(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

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
				if n < keyLen {
					m.short[string(p[:n])] = true
					continue
				}
				k := key(p[n-keyLen : n])
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

// openPrefix is the length of the longest suffix of v that is a proper
// prefix of a pattern: the start of a match that later input may complete.
// Suffixes shorter than keyLen count only when they are the whole of v
// (a short piece is harmless on its own but must not start a chain of
// short pieces that are each let through).
func (m *matcher) openPrefix(v []byte) int {
	if m == nil || m.tails == nil || len(v) == 0 {
		return 0
	}
	if len(v) < keyLen {
		if m.short[string(v)] {
			return len(v)
		}
		return 0
	}
	best := 0
	for _, ref := range m.tails[key(v[len(v)-keyLen:])] {
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
func replace(b []byte, spans []span) []byte {
	spans = merge(spans)
	out := make([]byte, 0, len(b))
	at := 0
	for _, s := range spans {
		out = append(out, b[at:s.start]...)
		out = append(out, Mask...)
		at = s.end
	}
	return append(out, b[at:]...)
}

// replaceLines masks each span line by line: every line a span touches
// keeps its line break and shows one mask for its part of the span, so a
// secret wrapped over lines leaves the layout of the output as it was.
func replaceLines(b []byte, spans []span) []byte {
	spans = merge(spans)
	out := make([]byte, 0, len(b))
	at := 0
	for _, s := range spans {
		out = append(out, b[at:s.start]...)
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
