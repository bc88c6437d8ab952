package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// SumTree lists every regular file under the given paths (relative to
// root) with its size and SHA-256, keyed by slash-separated path relative
// to root. Missing paths are left out: the caller compares whole maps.
func SumTree(root string, paths []string) (map[string]FileSum, error) {
	out := map[string]FileSum{}
	for _, p := range paths {
		err := filepath.WalkDir(filepath.Join(root, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }() // only read: io.Copy reports a failed read
			h := sha256.New()
			n, err := io.Copy(h, f)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = FileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
