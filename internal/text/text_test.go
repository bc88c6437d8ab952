package text

import "testing"

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
