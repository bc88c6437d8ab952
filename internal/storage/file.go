package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vastrun/vastrun/internal/s3client"
)

// FileStore keeps objects as files under a root directory. Writes go to a
// temporary file and are renamed (Put) or hard-linked (PutIfAbsent) into
// place, so a reader never sees a partial object.
type FileStore struct{ root string }

var _ Store = (*FileStore)(nil)

// NewFileStore roots a store at dir (created if missing).
func NewFileStore(dir string) (*FileStore, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("file store %q: the path must be absolute", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &FileStore{root: dir}, nil
}

// URI names the store.
func (s *FileStore) URI() string { return "file://" + s.root }

func (s *FileStore) path(key string) (string, error) {
	k, err := s3client.CleanKey(key)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(k)), nil
}

func (s *FileStore) temp(p string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	return os.CreateTemp(filepath.Dir(p), ".vastrun-tmp-*")
}

// Put writes r to key, hashing as it goes.
func (s *FileStore) Put(ctx context.Context, key string, r io.Reader) (Object, error) {
	p, err := s.path(key)
	if err != nil {
		return Object{}, err
	}
	f, err := s.temp(p)
	if err != nil {
		return Object{}, err
	}
	defer os.Remove(f.Name()) //nolint:errcheck // after the rename nothing is left to remove; a leftover is a hidden temp file
	h := sha256.New()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	n, err := io.CopyBuffer(io.MultiWriter(f, h), ctxReader{ctx, r}, *bp)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(f.Name(), p); err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	// A hint for Stat; Get never trusts it. One that could not be written
	// may be cut, or the previous object's: it must not stay.
	if err := os.WriteFile(p+".sha256", []byte(sum), 0o600); err != nil {
		if rerr := os.Remove(p + ".sha256"); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return Object{}, fmt.Errorf("put %s: its sha256 hint is stale: %w", key, errors.Join(err, rerr))
		}
	}
	return Object{Key: key, Size: n, SHA256: sum}, nil
}

// PutIfAbsent creates key atomically, failing with ErrExists if present.
func (s *FileStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	f, err := s.temp(p)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) //nolint:errcheck // after the link the temp name is removed; a leftover is a hidden temp file
	if _, err := f.Write(data); err != nil {
		f.Close() //nolint:errcheck // the write error is the one to report
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close() //nolint:errcheck // the sync error is the one to report
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(f.Name(), p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", key, ErrExists)
		}
		return fmt.Errorf("create %s: %w", key, err)
	}
	return nil
}

// Get opens key.
func (s *FileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotExist)
	}
	return f, err
}

// Stat describes key.
func (s *FileStore) Stat(ctx context.Context, key string) (Object, error) {
	p, err := s.path(key)
	if err != nil {
		return Object{}, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Object{}, fmt.Errorf("stat %s: %w", key, ErrNotExist)
	}
	if err != nil {
		return Object{}, err
	}
	o := Object{Key: key, Size: fi.Size()}
	if b, err := os.ReadFile(p + ".sha256"); err == nil {
		o.SHA256 = strings.TrimSpace(string(b))
	}
	return o, nil
}

// List returns objects under prefix, sorted.
func (s *FileStore) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || strings.HasPrefix(name, ".vastrun-tmp-") || strings.HasSuffix(name, ".sha256") {
			return nil
		}
		rel, _ := filepath.Rel(s.root, p)
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		o, err := s.Stat(ctx, key)
		if err != nil {
			return err
		}
		out = append(out, o)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// Delete removes key; a missing key is fine.
func (s *FileStore) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	os.Remove(p + ".sha256") //nolint:errcheck // a hint left behind is only read beside its object, and the next Put rewrites it
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *FileStore) putFile(ctx context.Context, key string, f *os.File, fi os.FileInfo) (Object, error) {
	o, err := s.Put(ctx, key, f)
	if err != nil || !fi.Mode().IsRegular() {
		return o, err
	}
	if o.Parts, err = hashParts(ctx, f, o.Size, s.partSize(o.Size)); err != nil {
		return Object{}, fmt.Errorf("put %s: hash the parts of %s: %w", key, f.Name(), err)
	}
	return o, nil
}

func (s *FileStore) getRange(ctx context.Context, key string, off, end int64) (io.ReadCloser, string, error) {
	f, err := s.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	if end < 0 {
		end = 1<<63 - 1
	}
	return struct {
		io.Reader
		io.Closer
	}{ctxReader{ctx, io.NewSectionReader(f.(*os.File), off, end-off)}, f}, "", nil
}

func (*FileStore) slot(context.Context) (func(), error) { return func() {}, nil }
func (*FileStore) threads() int                         { return 4 }
func (*FileStore) partSize(size int64) int64            { return PartSize(size, 0) }
func (*FileStore) sameHost() bool                       { return true }

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
