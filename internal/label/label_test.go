package label

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRoundTripAndCheck(t *testing.T) {
	exp := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l, err := New("", NewRunID(time.Unix(1785200000, 0)), exp)
	if err != nil {
		t.Fatal(err)
	}
	s := l.String()
	if !strings.HasPrefix(s, "vastrun-") || len(s) > MaxLen {
		t.Fatalf("label %q", s)
	}
	got, err := Parse(s)
	if err != nil || got != l {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", s, got, err, l)
	}
	if got.Expired(exp.Add(-time.Second)) || !got.Expired(exp) {
		t.Fatal("expiry comparison wrong")
	}
	// Any edit breaks the check.
	for _, bad := range []string{
		strings.Replace(s, "vastrun", "vastrum", 1),
		s[:len(s)-1] + "0",
		"ci-run-8842-train",
		"",
		"vastrun-abc-zz-12345678",
	} {
		if bad == s {
			continue
		}
		if _, err := Parse(bad); !errors.Is(err, ErrNotOurs) {
			t.Errorf("Parse(%q) = %v, want ErrNotOurs", bad, err)
		}
	}
}

func TestPrefixWithDashes(t *testing.T) {
	l, err := New("vastrun-acme-ml", "abc123", time.Unix(2000000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(l.String())
	if err != nil || got.Prefix != "vastrun-acme-ml" || got.RunID != "abc123" {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestNewRejectsBadParts(t *testing.T) {
	for _, c := range []struct{ prefix, run string }{
		{"Vast", "abc"}, {"vastrun", "a-b"}, {"vastrun", ""}, {"-x", "abc"},
		{strings.Repeat("p", 50), "abc"},
	} {
		if _, err := New(c.prefix, c.run, time.Unix(2e9, 0)); err == nil {
			t.Errorf("New(%q, %q) accepted", c.prefix, c.run)
		}
	}
}

func TestRunIDsAreSortableAndDistinct(t *testing.T) {
	a := NewRunID(time.UnixMilli(1000))
	b := NewRunID(time.UnixMilli(2000000))
	if a == b || len(a) < 6 {
		t.Fatalf("%q %q", a, b)
	}
}

func FuzzParse(f *testing.F) {
	l, _ := New("", "abc123", time.Unix(2e9, 0))
	for _, s := range []string{l.String(), "vastrun-a-b-c", "----", "ci-run-8842-train"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrNotOurs) {
				t.Fatalf("error not classified: %v", err)
			}
			return
		}
		if got.String() != s {
			t.Fatalf("Parse accepted %q but renders %q", s, got.String())
		}
	})
}

func TestCheckPrefixBoundaries(t *testing.T) {
	for _, c := range []struct {
		prefix string
		ok     bool
	}{
		{"vastrun", true}, {"a", true}, {"ci-2", true}, {"vastrun-acme-ml", true},
		{strings.Repeat("p", MaxPrefixLen), true},
		{strings.Repeat("p", MaxPrefixLen+1), false},
		{"", false}, {"bad prefix!", false}, {"vastrün", false}, {"Vast", false},
		{"-ci", false}, {"ci-", false}, {"ci_x", false}, {"ci.x", false},
	} {
		err := CheckPrefix(c.prefix)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadPrefix)) {
			t.Errorf("CheckPrefix(%q) = %v, want ok=%v", c.prefix, err, c.ok)
		}
	}
	// The longest accepted prefix keeps the longest label within MaxLen:
	// a 13-character run id and a 7-digit expiry (after 2038).
	l, err := New(strings.Repeat("p", MaxPrefixLen), "abcdefghijklm", time.Unix(1<<36, 0))
	if err != nil || len(l.String()) > MaxLen {
		t.Fatalf("%q (%d) %v", l.String(), len(l.String()), err)
	}
}
