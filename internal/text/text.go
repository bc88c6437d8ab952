// Package text holds the few string helpers that several rooms show people
// the same way: the last lines of an output, a dash for nothing, and how
// far a misspelt name is from a known one. It imports nothing of vastrun's,
// so any package may use it.
package text

import "strings"

// LastLines is the last n lines of s, without its trailing newlines.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// OrDash is s, or "-" when s is empty, so an empty column still shows.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Distance is the Levenshtein edit distance between a and b, in bytes:
// what "did you mean" suggestions rank names by.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
