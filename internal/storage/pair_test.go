package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

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

// countingWriter counts the body bytes a server handler writes.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.ResponseWriter.Write(p)
}

// TestMismatchStopsTheDownload: a part that fails verification ends the
// download there (the rest of the object is not fetched only to be thrown
// away), though held parts are checked a part later than they arrive.
func TestMismatchStopsTheDownload(t *testing.T) {
	var served atomic.Int64
	backend := s3mem.New()
	fake := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w = countingWriter{w, &served}
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if err := backend.CreateBucket("abort"); err != nil {
		t.Fatal(err)
	}
	s := s3Store(t, srv.URL, "abort")
	ctx := context.Background()
	dir := t.TempDir()
	data := make([]byte, 16*5<<20) // sixteen parts of 5 MiB
	rand.Read(data)
	src := filepath.Join(dir, "src")
	os.WriteFile(src, data, 0o600)
	put, err := storage.PutFile(ctx, s, "big", src)
	if err != nil || put.Parts == nil || len(put.Parts.SHA256) != 16 {
		t.Fatalf("PutFile: %+v %v", put, err)
	}
	defer storage.ForceRangedStreams(false)()
	for _, i := range []int{0, 1} { // a held part, the part paired with it
		bad := *put.Parts
		bad.SHA256 = append([]string(nil), put.Parts.SHA256...)
		bad.SHA256[i] = strings.Repeat("0", 64)
		served.Store(0)
		_, err := storage.GetFiles(ctx, s, []storage.FileTransfer{{Key: "big", Path: filepath.Join(dir, "dst"), Size: int64(len(data)), Parts: &bad}})
		if !errors.Is(err, storage.ErrDigestMismatch) {
			t.Fatalf("a wrong digest for part %d: %v, want ErrDigestMismatch", i+1, err)
		}
		if n := served.Load(); n > int64(len(data))/2 {
			t.Errorf("a wrong digest for part %d: the server sent %d of %d bytes before the download stopped", i+1, n, len(data))
		}
	}
	if !storage.ChunksFree() || !storage.HoldFree() {
		t.Fatal("a stopped download kept receive chunks or hold budget")
	}
}

// TestWriteFailureFailsTheDownload: a file that cannot be written (here
// /dev/full, whose writes fail with ENOSPC) fails the download with that
// error, whichever goroutine writes, and every chunk comes back.
func TestWriteFailureFailsTheDownload(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	for _, size := range []int{3*part + 5, 3 << 20} { // several parts (the stream hasher writes), one (downloadOne)
		data := make([]byte, size)
		rand.Read(data)
		src := filepath.Join(dir, "src")
		os.WriteFile(src, data, 0o600)
		put, err := storage.PutFile(ctx, s, "obj", src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = storage.GetFiles(ctx, s, []storage.FileTransfer{{Key: "obj", Path: "/dev/full", Size: int64(size), Parts: put.Parts}})
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%d bytes into /dev/full: %v, want ENOSPC", size, err)
		}
	}
	if !storage.ChunksFree() || !storage.HoldFree() {
		t.Fatal("a failed write kept receive chunks or hold budget")
	}
}
