package redact

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSinkMasksEveryFile: whole files (text and JSON) and streams are
// masked on their way to disk; a stream's mirror gets the same bytes; a
// secret one stream writes in two pieces around the other's line is
// masked; nothing temporary is left.
func TestSinkMasksEveryFile(t *testing.T) {
	const secret = `tok-"q'/\ é☃-0123`
	dir := t.TempDir()
	s := NewSink(New(secret))
	if err := s.WriteFile(filepath.Join(dir, "a.txt"), []byte("hex "+hexOf(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]string{"k": secret, secret: "v"})
	if err := s.WriteJSON(filepath.Join(dir, "b.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	var mirror bytes.Buffer
	f, err := s.Create(filepath.Join(dir, "c.log"), 0o644, &mirror, nil)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := f.Stream(), f.Stream()
	stdout.Write([]byte("value " + secret[:7]))
	stderr.Write([]byte("a line of the other stream\n"))
	stdout.Write([]byte(secret[7:] + " end\n"))
	f.Write([]byte("last, unfinished"))
	if err := f.Close(); err != nil || f.Close() != nil {
		t.Fatalf("close: %v", err)
	}
	g, err := s.Append(filepath.Join(dir, "c.log"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("\nappended " + secret + "\n"))
	g.Close()

	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("files: %v", entries)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(b), "0123") || strings.Contains(string(b), "2d30313233") {
			t.Errorf("%s holds the secret: %q", e.Name(), b)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "b.json"))
	var back map[string]string
	if json.Unmarshal(b, &back) != nil || back["k"] != Mask || back[Mask] != "v" {
		t.Errorf("b.json: %s", b)
	}
	c, _ := os.ReadFile(filepath.Join(dir, "c.log"))
	if want := "a line of the other stream\nvalue *** end\nlast, unfinished\nappended ***\n"; string(c) != want {
		t.Errorf("c.log: %q, want %q", c, want)
	}
	if !strings.HasPrefix(string(c), mirror.String()) || mirror.Len() == 0 {
		t.Errorf("mirror %q is not the log's first bytes %q", mirror.String(), c)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a.txt")); fi.Mode().Perm() != 0o600 {
		t.Errorf("a.txt mode %v", fi.Mode().Perm())
	}
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(digits[s[i]>>4])
		b.WriteByte(digits[s[i]&15])
	}
	return b.String()
}
