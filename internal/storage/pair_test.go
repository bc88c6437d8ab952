package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/sha256x2"
	"github.com/vastrun/vastrun/internal/storage"
)

const part = 8 << 20 // the file store's part size for these objects

// TestVerifiedDownloadPairsItsParts: a stream holds every other part to
// hash it together with the next one (recv.go). A changed byte in any part
// (one held, one hashed beside a held one, one hashed alone, the short last
// one) still fails the download with ErrDigestMismatch naming that part,
// with the head stream alone and with ranged streams joining, and no
// receive chunk or hold budget stays taken.
func TestVerifiedDownloadPairsItsParts(t *testing.T) {
	s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	// Five parts (two pairs and a short last one), and four whose last,
	// shorter than the held part before it, leaves that part's tail to be
	// hashed alone.
	for _, size := range []int{4*part + 3<<20, 3*part + 1<<20 + 5} {
		data := make([]byte, size)
		rand.Read(data)
		src := filepath.Join(dir, "src")
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		put, err := storage.PutFile(ctx, s, "big", src)
		if err != nil || put.Parts == nil || put.Parts.Size != part {
			t.Fatalf("PutFile: %+v %v", put, err)
		}
		nparts := len(put.Parts.SHA256)
		dst := filepath.Join(dir, "dst")
		get := func() error {
			_, err := storage.GetFiles(ctx, s, []storage.FileTransfer{{Key: "big", Path: dst, Size: int64(size), Parts: put.Parts}})
			return err
		}
		for _, join := range []bool{false, true} {
			restore := storage.ForceRangedStreams(join)
			held := storage.HeldParts()
			if err := get(); err != nil {
				t.Fatalf("%d bytes, join=%v: %v", size, join, err)
			}
			if b, _ := os.ReadFile(dst); !bytes.Equal(b, data) {
				t.Fatalf("%d bytes, join=%v: downloaded bytes differ", size, join)
			}
			if !join && sha256x2.Interleaved() && storage.HeldParts() == held {
				t.Errorf("%d bytes: the head stream held no part to hash with the next", size)
			}
			for i := range nparts {
				bad := bytes.Clone(data)
				bad[min(i*part+12345, size-1)] ^= 0x40
				if _, err := s.Put(ctx, "big", bytes.NewReader(bad)); err != nil {
					t.Fatal(err)
				}
				err := get()
				if !errors.Is(err, storage.ErrDigestMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("part %d (", i+1)) {
					t.Errorf("%d bytes, join=%v, a changed byte in part %d of %d: %v, want ErrDigestMismatch for that part", size, join, i+1, nparts, err)
				}
			}
			if _, err := s.Put(ctx, "big", bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			restore()
		}
	}
	if !storage.ChunksFree() || !storage.HoldFree() {
		t.Fatalf("downloads kept receive chunks (%v free) or hold budget (%v free)", storage.ChunksFree(), storage.HoldFree())
	}
}

// TestManyFilesPairingAtOnce: several multi-part files downloaded at once
// compete for the hold budget (one part's worth); those that get none are
// hashed as they arrive. All verify, and one changed byte in one of them
// fails the batch with ErrDigestMismatch.
func TestManyFilesPairingAtOnce(t *testing.T) {
	s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	var files []storage.FileTransfer
	var datas [][]byte
	for i := range 5 {
		data := make([]byte, 2*part+(i+1)<<19)
		if i == 4 {
			data = data[:3<<20] // and a single-part file among them
		}
		rand.Read(data)
		src := filepath.Join(dir, fmt.Sprint("src-", i))
		os.WriteFile(src, data, 0o600)
		put, err := storage.PutFile(ctx, s, fmt.Sprint("f", i), src)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, storage.FileTransfer{Key: fmt.Sprint("f", i), Path: filepath.Join(dir, fmt.Sprint("dst-", i)), Size: int64(len(data)), Parts: put.Parts})
		datas = append(datas, data)
	}
	if _, err := storage.GetFiles(ctx, s, files); err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		if b, _ := os.ReadFile(f.Path); !bytes.Equal(b, datas[i]) {
			t.Fatalf("file %d differs", i)
		}
	}
	bad := bytes.Clone(datas[2])
	bad[part-1] ^= 1 // the last byte of a held part
	if _, err := s.Put(ctx, "f2", bytes.NewReader(bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := storage.GetFiles(ctx, s, files); !errors.Is(err, storage.ErrDigestMismatch) {
		t.Fatalf("a changed byte in one of five files: %v, want ErrDigestMismatch", err)
	}
	if !storage.ChunksFree() || !storage.HoldFree() {
		t.Fatal("a failed batch kept receive chunks or hold budget")
	}
}
