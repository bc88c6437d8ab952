package teamstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/s3client"
)

// Local is a Backend in a directory on one machine (state: local). Writes
// are serialized across processes by an exclusive lock on Dir/.lock and
// land by rename, so a reader never sees half an object. The ETag names
// the content and the file (inode), so that rewriting equal bytes still
// changes it. The server clock is this machine's.
type Local struct {
	Dir string
}

var _ Backend = (*Local)(nil)

// NewLocal opens (creating 0700) dir.
func NewLocal(dir string) (*Local, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", dir, err)
	}
	return &Local{Dir: dir}, nil
}

func (l *Local) URI() string { return "file://" + l.Dir }

func (l *Local) path(key string) (string, error) {
	k, err := s3client.CleanKey(key)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(k, ".lock") || strings.Contains(k, "/.tmp-") || strings.HasPrefix(k, ".tmp-") {
		return "", fmt.Errorf("state key %q: reserved name", key)
	}
	return filepath.Join(l.Dir, filepath.FromSlash(k)), nil
}

func etagOf(data []byte, fi os.FileInfo) string {
	sum := sha256.Sum256(data)
	ino := uint64(0)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%s-%x-%x", hex.EncodeToString(sum[:12]), ino, fi.ModTime().UnixNano())
}

func (l *Local) read(p string) (Object, error) {
	f, err := os.Open(p)
	if err != nil {
		return Object{}, err
	}
	defer f.Close() //nolint:errcheck // read-only file
	fi, err := f.Stat()
	if err != nil {
		return Object{}, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return Object{}, err
	}
	return Object{Data: data, ETag: etagOf(data, fi), LastModified: fi.ModTime()}, nil
}

func (l *Local) Get(ctx context.Context, key string) (Object, time.Time, error) {
	p, err := l.path(key)
	if err != nil {
		return Object{}, time.Time{}, err
	}
	o, err := l.read(p)
	now := time.Now()
	if errors.Is(err, fs.ErrNotExist) {
		return Object{}, now, fmt.Errorf("get %s: %w", key, ErrNotExist)
	}
	if err != nil {
		return Object{}, now, fmt.Errorf("get %s: %w", key, err)
	}
	o.Key = key
	return o, now, nil
}

// locked runs f holding the directory's write lock.
func (l *Local) locked(f func() error) error {
	lf, err := os.OpenFile(filepath.Join(l.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close() //nolint:errcheck // closing releases the lock; the lock file is never written
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	return f()
}

func (l *Local) write(p string, data []byte) (string, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), p)
	}
	if werr != nil {
		os.Remove(tmp.Name()) //nolint:errcheck // the write error is the one to report
		return "", werr
	}
	o, err := l.read(p)
	return o.ETag, err
}

func (l *Local) PutIfAbsent(ctx context.Context, key string, data []byte) (string, error) {
	p, err := l.path(key)
	if err != nil {
		return "", err
	}
	var etag string
	err = l.locked(func() error {
		if _, err := os.Lstat(p); err == nil {
			return ErrPrecondition
		}
		etag, err = l.write(p, data)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", key, err)
	}
	return etag, nil
}

func (l *Local) PutIfMatch(ctx context.Context, key string, data []byte, etag string) (string, error) {
	p, err := l.path(key)
	if err != nil {
		return "", err
	}
	var newETag string
	err = l.locked(func() error {
		o, err := l.read(p)
		if err != nil || o.ETag != etag {
			return ErrPrecondition
		}
		newETag, err = l.write(p, data)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("replace %s: %w", key, err)
	}
	return newETag, nil
}

func (l *Local) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(l.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") || d.Name() == ".lock" {
			return nil
		}
		rel, err := filepath.Rel(l.Dir, p)
		if err != nil {
			return err
		}
		k := filepath.ToSlash(rel)
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}
