package workdir

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, dir, rel, text string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// repo makes a work tree with tracked, untracked, ignored and deleted files.
func repo(t *testing.T) string {
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	write(t, dir, ".gitignore", "*.log\nbuild/\n.env\n", 0o644)
	write(t, dir, "train.py", "print('hi')\n", 0o644)
	write(t, dir, "run.sh", "#!/bin/sh\necho run\n", 0o755)
	write(t, dir, "pkg/model.py", "W = 1\n", 0o644)
	write(t, dir, "gone.txt", "deleted later\n", 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "init")
	os.Remove(filepath.Join(dir, "gone.txt"))
	write(t, dir, "new.py", "untracked, not ignored\n", 0o644)
	write(t, dir, "debug.log", "ignored\n", 0o644)
	write(t, dir, ".env", "SECRET=nope\n", 0o644)
	write(t, dir, "build/weights.bin", "ignored dir\n", 0o644)
	write(t, dir, "build/keep.bin", "an ignored extra\n", 0o644)
	if err := os.Symlink("train.py", filepath.Join(dir, "link.py")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCollectHonoursGitignoreAndAddsExtras(t *testing.T) {
	dir := repo(t)
	write(t, dir, ".vastrun/runs/r1/id_ed25519", "PRIVATE KEY", 0o600)
	write(t, dir, "vastrun-evidence/r1/receipt.json", "{}", 0o644)
	m, err := Collect(context.Background(), dir, ".", Options{Extras: []string{"build/keep.bin"}, Exclude: []string{".vastrun", filepath.Join(dir, "vastrun-evidence")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	byPath := map[string]File{}
	for _, f := range m.Files {
		got = append(got, f.Path+":"+f.Mode+":"+f.Source)
		byPath[f.Path] = f
	}
	want := ".gitignore:file:git build/keep.bin:file:upload link.py:symlink:git new.py:file:git pkg/model.py:file:git run.sh:exec:git train.py:file:git"
	if strings.Join(got, " ") != want {
		t.Fatalf("files:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	sum := sha256.Sum256([]byte("print('hi')\n"))
	if byPath["train.py"].SHA256 != hex.EncodeToString(sum[:]) || byPath["link.py"].Target != "train.py" {
		t.Fatalf("hashes: %+v", byPath)
	}

	var buf bytes.Buffer
	if err := Pack(dir, m, &buf); err != nil {
		t.Fatal(err)
	}
	archive := sha256.Sum256(buf.Bytes())
	if m.CompressedBytes != int64(buf.Len()) || m.SHA256 != hex.EncodeToString(archive[:]) {
		t.Fatalf("archive facts: %d %s", m.CompressedBytes, m.SHA256)
	}
	// The archive holds exactly the manifest, with contents and modes.
	gz, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		f, ok := byPath[h.Name]
		if !ok {
			t.Fatalf("archive has %s, not in the manifest", h.Name)
		}
		n++
		switch f.Mode {
		case "symlink":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "train.py" {
				t.Fatalf("symlink: %+v", h)
			}
		default:
			b, _ := io.ReadAll(tr)
			s := sha256.Sum256(b)
			if hex.EncodeToString(s[:]) != f.SHA256 {
				t.Fatalf("%s: content differs from its manifest hash", h.Name)
			}
			if (f.Mode == "exec") != (h.Mode&0o111 != 0) {
				t.Fatalf("%s: mode %o", h.Name, h.Mode)
			}
		}
	}
	if n != len(m.Files) {
		t.Fatalf("archive has %d entries, manifest %d", n, len(m.Files))
	}
	if !strings.Contains(m.Checksums(), "  train.py\n") || strings.Contains(m.Checksums(), "link.py") {
		t.Fatalf("checksums:\n%s", m.Checksums())
	}
}

func TestCollectRefusesWhatItCannotSend(t *testing.T) {
	dir := repo(t)
	if _, err := Collect(context.Background(), dir, ".", Options{Limit: 10}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := Collect(context.Background(), dir, ".", Options{Extras: []string{"../outside"}}); err == nil || !strings.Contains(err.Error(), "leaves the workdir") {
		t.Fatalf("escaping extra: %v", err)
	}
	if _, err := Collect(context.Background(), t.TempDir(), ".", Options{}); !errors.Is(err, ErrNotGit) {
		t.Fatalf("not a git tree: %v", err)
	}
}

// Measure counts what Collect counts and fails where it fails.
func TestMeasureAgreesWithCollect(t *testing.T) {
	dir := repo(t)
	o := Options{Extras: []string{"build/keep.bin"}}
	m, err := Collect(context.Background(), dir, ".", o)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Measure(context.Background(), dir, ".", o)
	if err != nil || n != m.TotalBytes || n == 0 {
		t.Fatalf("Measure = %d, %v; Collect counted %d", n, err, m.TotalBytes)
	}
	o.Limit = m.TotalBytes
	if _, err := Measure(context.Background(), dir, ".", o); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	o.Limit = m.TotalBytes - 1
	if _, err := Measure(context.Background(), dir, ".", o); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	if _, err := Measure(context.Background(), t.TempDir(), ".", Options{}); !errors.Is(err, ErrNotGit) {
		t.Fatalf("not a git tree: %v", err)
	}
}
