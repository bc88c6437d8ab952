package text

import (
	"strings"
	"testing"
)

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\n\n\n", 5, "a\nb"},
		{"only", 3, "only"},
		{"", 3, ""},
	} {
		if got := LastLines(c.in, c.n); got != c.want {
			t.Errorf("LastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestOrDash(t *testing.T) {
	if OrDash("") != "-" || OrDash("x") != "x" {
		t.Fatalf("OrDash: %q %q", OrDash(""), OrDash("x"))
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"kitten", "sitting", 3},
		{"gpu_name", "gpu_nmae", 2}, {"num_gpus", "num_gpus", 0},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	gpus := []string{"A100 PCIE", "A100 SXM4", "H100 NVL", "H100 SXM", "H200", "RTX 3090", "RTX 4090", "RTX A6000"}
	keys := []string{"alert", "budget", "canary", "env", "gpu", "image", "notify", "test", "timeouts"}
	gpuKeys := []string{"bid", "count", "max_bid", "max_dph", "min_cuda", "min_vram_gb", "models"}
	for _, c := range []struct {
		s     string
		known []string
		want  []string
	}{
		{"H100", gpus, []string{"H100 NVL", "H100 SXM"}}, // the family, not H200 one edit away
		{"h100_sxm", gpus, []string{"H100 SXM"}},         // the same name spelt another way
		{"4090", gpus, []string{"RTX 4090"}},             // a whole word of the name
		{"RTX_4009", gpus, []string{"RTX 4090"}},
		{"A100", gpus, []string{"A100 PCIE", "A100 SXM4"}},
		{"bugdet", keys, []string{"budget"}},
		{"max_dhp", gpuKeys, []string{"max_dph"}},
		{"modles", gpuKeys, []string{"models"}},
		{"zzz", keys, nil},
		{"", keys, nil},
	} {
		got := Suggest(c.s, c.known, 2)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("Suggest(%q) = %q, want %q", c.s, got, c.want)
		}
	}
	if got := OneOf([]string{"a", "b", "c"}); got != "a, b or c" {
		t.Errorf("OneOf = %q", got)
	}
}

func TestValue(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{3.338335e+08, "333833500"},
		{333833501.0, "333833501"},
		{0.0000001, "0.0000001"},
		{1.5, "1.5"},
		{"fp32", "fp32"},
		{true, "true"},
		{nil, "null"},
		{[]any{"cpu", 2.0, 1e21}, `["cpu",2,1000000000000000000000]`},
		{map[string]any{"loss": 0.25, "gpus": []any{"A", "B"}, "a": map[string]any{}}, `{"a":{},"gpus":["A","B"],"loss":0.25}`},
		{[]int{1, 2}, "[1,2]"},
	} {
		if got := Value(c.in); got != c.want {
			t.Errorf("Value(%#v) = %s, want %s", c.in, got, c.want)
		}
	}
}
