// Package workdir packs a working directory for the instance: the files
// git would keep (tracked, plus untracked ones .gitignore does not exclude),
// plus explicit extras, into one gzip-compressed tar with a SHA-256
// manifest.
//
// Contract:
//   - The file list comes from git (ls-files --cached --others
//     --exclude-standard), so .gitignore, .git/info/exclude and the global
//     excludes file are honoured exactly as git honours them. Tracked files
//     deleted from the work tree are skipped.
//   - Extras (the config's upload: list) are added even when ignored;
//     directories are walked. A path may not leave the directory.
//   - Paths under Options.Exclude (vastrun's own state and evidence, which
//     hold the run's private SSH key and journal) are never packed, even
//     when git does not ignore them.
//   - The limit bounds the uncompressed bytes and is checked before any
//     archive is written; over it, Collect fails with ErrTooLarge.
//   - Regular files keep their executable bit; symlinks stay symlinks;
//     nothing else (devices, sockets, submodule directories) is packed.
//   - Pack writes the files named in the manifest and fails if any changed
//     size since Collect hashed it.
package workdir

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ManifestSchema versions the manifest written to the evidence.
const ManifestSchema = "vastrun.workdir/v1"

// DefaultLimit bounds a workdir's uncompressed size when the config sets none.
const DefaultLimit = 256 << 20

// ErrTooLarge means the files exceed the limit.
var ErrTooLarge = errors.New("workdir is larger than its limit")

// ErrNotGit means the directory is not inside a git work tree.
var ErrNotGit = errors.New("workdir is not in a git work tree")

// File is one packed file.
type File struct {
	Path   string `json:"path"` // slash-separated, relative to the directory
	Size   int64  `json:"size"`
	Mode   string `json:"mode"`             // "file", "exec" or "symlink"
	SHA256 string `json:"sha256"`           // of the content (of the target text for a symlink)
	Source string `json:"source"`           // "git" or "upload"
	Target string `json:"target,omitempty"` // symlink target
}

// Manifest lists what was packed.
type Manifest struct {
	Schema          string `json:"schema"`
	Dir             string `json:"dir"` // as configured, e.g. "."
	Files           []File `json:"files"`
	TotalBytes      int64  `json:"total_bytes"`
	LimitBytes      int64  `json:"limit_bytes"`
	CompressedBytes int64  `json:"compressed_bytes,omitempty"` // set by Pack
	SHA256          string `json:"archive_sha256,omitempty"`   // of the .tar.gz, set by Pack
}

// Options tune Collect.
type Options struct {
	Extras  []string // paths relative to the directory, sent even if ignored
	Exclude []string // paths (absolute, or relative to the directory) never sent
	Limit   int64    // uncompressed bytes; DefaultLimit when 0
}

// Collect lists and hashes root/dir's files (git's view) plus extras.
// dir is recorded as given.
func Collect(ctx context.Context, root, dir string, o Options) (*Manifest, error) {
	return collect(ctx, root, dir, o, true)
}

// Measure is Collect without reading the files: the uncompressed bytes
// Collect would count, failing as Collect would (ErrTooLarge, ErrNotGit),
// cheaply enough for a preflight that must not hash a large tree twice.
func Measure(ctx context.Context, root, dir string, o Options) (int64, error) {
	m, err := collect(ctx, root, dir, o, false)
	if err != nil {
		return 0, err
	}
	return m.TotalBytes, nil
}

func collect(ctx context.Context, root, dir string, o Options, hash bool) (*Manifest, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	extras := o.Extras
	base := filepath.Join(root, dir)
	var excluded []string
	for _, x := range o.Exclude {
		if !filepath.IsAbs(x) {
			x = filepath.Join(base, x)
		}
		if r, err := filepath.Rel(base, x); err == nil && r != "." && !strings.HasPrefix(r, "..") {
			excluded = append(excluded, filepath.ToSlash(r))
		}
	}
	skip := func(rel string) bool {
		for _, x := range excluded {
			if rel == x || strings.HasPrefix(rel, x+"/") {
				return true
			}
		}
		return false
	}
	m := &Manifest{Schema: ManifestSchema, Dir: dir, LimitBytes: limit}
	paths, err := gitFiles(ctx, base)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	add := func(rel, source string) error {
		if seen[rel] || skip(rel) {
			return nil
		}
		f, ok, err := stat(base, rel, source, hash)
		if err != nil || !ok {
			return err
		}
		seen[rel] = true
		m.TotalBytes += f.Size
		if m.TotalBytes > limit {
			return fmt.Errorf("%w: %s holds more than %d bytes (at %s); raise workdir_max_mb or ignore large files in .gitignore", ErrTooLarge, dir, limit, rel)
		}
		m.Files = append(m.Files, f)
		return nil
	}
	for _, p := range paths {
		if err := add(p, "git"); err != nil {
			return nil, err
		}
	}
	for _, x := range extras {
		rel, err := inside(x)
		if err != nil {
			return nil, err
		}
		full := filepath.Join(base, filepath.FromSlash(rel))
		info, err := os.Lstat(full)
		if err != nil {
			return nil, fmt.Errorf("upload %s: %w", x, err)
		}
		if !info.IsDir() {
			if err := add(rel, "upload"); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(full, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			r, _ := filepath.Rel(base, p)
			return add(filepath.ToSlash(r), "upload")
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

// inside cleans a relative path and refuses one that leaves the directory.
func inside(p string) (string, error) {
	c := path.Clean(filepath.ToSlash(p))
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("upload %s: the path leaves the workdir", p)
	}
	return c, nil
}

// gitFiles asks git which files the work tree keeps under base.
func gitFiles(ctx context.Context, base string) ([]string, error) {
	// Paths come out relative to base (git's default for -C base).
	cmd := exec.CommandContext(ctx, "git", "-C", base, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: git ls-files in %s: %v: %s", ErrNotGit, base, err, strings.TrimSpace(stderr.String())) //nolint:errorlint // the class is ErrNotGit; the cause is context only
	}
	var paths []string
	for _, p := range strings.Split(string(out), "\x00") {
		if p != "" {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// stat hashes one file (sizes it only, without hash); ok is false for
// what is not packed (a deleted tracked file, a directory such as a
// submodule, a device).
func stat(base, rel, source string, hash bool) (File, bool, error) {
	full := filepath.Join(base, filepath.FromSlash(rel))
	info, err := os.Lstat(full)
	if errors.Is(err, fs.ErrNotExist) {
		return File{}, false, nil
	}
	if err != nil {
		return File{}, false, fmt.Errorf("workdir %s: %w", rel, err)
	}
	f := File{Path: rel, Source: source}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(full)
		if err != nil {
			return File{}, false, fmt.Errorf("workdir %s: %w", rel, err)
		}
		sum := sha256.Sum256([]byte(t))
		f.Mode, f.Target, f.SHA256, f.Size = "symlink", t, hex.EncodeToString(sum[:]), int64(len(t))
		return f, true, nil
	case !info.Mode().IsRegular():
		return File{}, false, nil
	case !hash:
		f.Size, f.Mode = info.Size(), "file"
		return f, true, nil
	}
	fh, err := os.Open(full)
	if err != nil {
		return File{}, false, fmt.Errorf("workdir %s: %w", rel, err)
	}
	defer fh.Close() //nolint:errcheck // read-only file
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return File{}, false, fmt.Errorf("workdir %s: %w", rel, err)
	}
	f.Size, f.SHA256, f.Mode = n, hex.EncodeToString(h.Sum(nil)), "file"
	if info.Mode()&0o111 != 0 {
		f.Mode = "exec"
	}
	return f, true, nil
}

// Pack writes the manifest's files from root/m.Dir to w as a gzip tar and
// records the compressed size and the archive's SHA-256 in m.
func Pack(root string, m *Manifest, w io.Writer) error {
	base := filepath.Join(root, m.Dir)
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	gz := gzip.NewWriter(cw)
	tw := tar.NewWriter(gz)
	// Fixed times and owners: the archive depends only on the contents.
	epoch := time.Unix(0, 0)
	for _, f := range m.Files {
		hdr := &tar.Header{Name: f.Path, ModTime: epoch, Uid: 0, Gid: 0, Format: tar.FormatPAX}
		switch f.Mode {
		case "symlink":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Target, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		case "exec":
			hdr.Mode = 0o755
		default:
			hdr.Mode = 0o644
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, f.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		fh, err := os.Open(filepath.Join(base, filepath.FromSlash(f.Path)))
		if err != nil {
			return fmt.Errorf("pack %s: %w", f.Path, err)
		}
		n, err := io.Copy(tw, io.LimitReader(fh, f.Size+1))
		fh.Close() //nolint:errcheck // read-only; the copy's error is checked
		if err != nil {
			return fmt.Errorf("pack %s: %w", f.Path, err)
		}
		if n != f.Size {
			return fmt.Errorf("pack %s: the file changed while packing (%d bytes, hashed %d)", f.Path, n, f.Size)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	m.CompressedBytes, m.SHA256 = cw.n, hex.EncodeToString(h.Sum(nil))
	return nil
}

// Checksums is the manifest in sha256sum -c format (regular files only).
func (m *Manifest) Checksums() string {
	var b strings.Builder
	for _, f := range m.Files {
		if f.Mode != "symlink" {
			fmt.Fprintf(&b, "%s  %s\n", f.SHA256, f.Path)
		}
	}
	return b.String()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
