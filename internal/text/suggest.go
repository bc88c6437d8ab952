package text

import (
	"sort"
	"strings"
)

// Suggest is what a person most likely meant by s among known, best
// first, at most n of them (none when nothing is near). Names that s is a
// whole word or a word-aligned prefix of come first — "H100" means one of
// the H100 family ("H100 NVL", "H100 SXM"), not "H200", which is only one
// edit away — then names within a few edits, nearest first. Case and the
// separators people swap (space, '_', '-') do not count.
func Suggest(s string, known []string, n int) []string {
	want := fold(s)
	if want == "" || n <= 0 {
		return nil
	}
	type cand struct {
		name string
		rank int // 0: word or prefix match; then 1+edit distance
	}
	var cands []cand
	limit := max(2, len(want)/3)
	for _, k := range known {
		have := fold(k)
		switch {
		case have == want:
			return []string{k} // the same name, spelt another way
		case wordPrefix(want, have):
			cands = append(cands, cand{k, 0})
		default:
			if d := Distance(want, have); d <= limit {
				cands = append(cands, cand{k, 1 + d})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].rank != cands[j].rank {
			return cands[i].rank < cands[j].rank
		}
		return cands[i].name < cands[j].name
	})
	var out []string
	for _, c := range cands {
		if len(out) == n || (len(out) > 0 && c.rank > 0 && cands[0].rank == 0) {
			break // family matches, when there are any, are the answer
		}
		out = append(out, c.name)
	}
	return out
}

// OneOf joins names as a person says a choice: "a", "a or b", "a, b or c".
func OneOf(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// fold lower-cases s and writes every separator as one space.
func fold(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return r == ' ' || r == '_' || r == '-' }), " ")
}

// wordPrefix reports whether want is have's first words ("h100" of
// "h100 sxm") or one of its words ("4090" of "rtx 4090").
func wordPrefix(want, have string) bool {
	if strings.HasPrefix(have, want+" ") {
		return true
	}
	for _, w := range strings.Fields(have) {
		if w == want {
			return true
		}
	}
	return false
}
