// Package storagetest is the conformance suite every storage.Store must
// pass: the file store and an in-process S3 fake on every `go test`, and
// two real S3 servers started by .ci/run: moto (VASTRUN_TEST_S3_ENDPOINT)
// and the stricter versitygw (VASTRUN_TEST_S3_ENDPOINT_VERSITYGW).
package storagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vastrun/vastrun/internal/storage"
)

// Run runs every case; newStore must return an empty store.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s storage.Store)
	}{
		{"PutGetRoundTrip", testRoundTrip},
		{"MultipartLargeObject", testLarge},
		{"Overwrite", testOverwrite},
		{"MissingIsErrNotExist", testMissing},
		{"ListSortedByPrefix", testList},
		{"DeleteIdempotent", testDelete},
		{"PutIfAbsentExactlyOnce", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"BadKeys", testBadKeys},
		{"StatReportsDigestOfMultipart", testStatDigest},
		{"FileRoundTripParallel", testFileRoundTrip},
		{"GetFileSizeMismatch", testGetFileMismatch},
		{"PutFilesGetFilesBatch", testBatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

// RunTransfers runs only the file-transfer cases (PutFile/GetFile(s),
// with part digests and without), for a second pass under another
// transfer setting (storage_test.go runs it with ranged streams forced to
// join every download).
func RunTransfers(t *testing.T, newStore func(t *testing.T) storage.Store) {
	for name, fn := range map[string]func(*testing.T, storage.Store){
		"FileRoundTripParallel": testFileRoundTrip,
		"GetFileSizeMismatch":   testGetFileMismatch,
		"PutFilesGetFilesBatch": testBatch,
	} {
		t.Run(name, func(t *testing.T) { fn(t, newStore(t)) })
	}
}

var ctx = context.Background()

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func get(t *testing.T, s storage.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close() //nolint:errcheck // read-only; the read's error is checked
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func testRoundTrip(t *testing.T, s storage.Store) {
	data := []byte("checkpoint bytes\x00\x01\x02")
	o, err := s.Put(ctx, "run/ckpt/000001/model.bin", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != int64(len(data)) || o.SHA256 != sum(data) {
		t.Fatalf("put returned %+v", o)
	}
	if got := get(t, s, "run/ckpt/000001/model.bin"); !bytes.Equal(got, data) {
		t.Fatalf("got %q", got)
	}
	st, err := s.Stat(ctx, "run/ckpt/000001/model.bin")
	if err != nil || st.Size != int64(len(data)) {
		t.Fatalf("stat %+v %v", st, err)
	}
	if st.SHA256 != "" && st.SHA256 != sum(data) {
		t.Fatalf("stat reports a wrong digest %s", st.SHA256)
	}
}

func testLarge(t *testing.T, s storage.Store) {
	data := make([]byte, 13<<20) // three 5 MiB-ish parts with the suite's part size
	rand.Read(data)
	o, err := s.Put(ctx, "big/blob", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != int64(len(data)) || o.SHA256 != sum(data) {
		t.Fatalf("put: %d bytes, %s", o.Size, o.SHA256)
	}
	if got := get(t, s, "big/blob"); sum(got) != sum(data) || len(got) != len(data) {
		t.Fatalf("read back %d bytes with a different digest", len(got))
	}
}

func testOverwrite(t *testing.T, s storage.Store) {
	for _, v := range []string{"one", "two"} {
		if _, err := s.Put(ctx, "k", bytes.NewReader([]byte(v))); err != nil {
			t.Fatalf("put k=%s: %v", v, err)
		}
	}
	if got := get(t, s, "k"); string(got) != "two" {
		t.Fatalf("got %q", got)
	}
}

func testMissing(t *testing.T, s storage.Store) {
	if _, err := s.Get(ctx, "nope/x"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := s.Stat(ctx, "nope/x"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("stat missing: %v", err)
	}
}

func testList(t *testing.T, s storage.Store) {
	for _, k := range []string{"a/2", "a/1", "a/sub/3", "b/1"} {
		if _, err := s.Put(ctx, k, bytes.NewReader([]byte(k))); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range list {
		keys = append(keys, o.Key)
	}
	if len(keys) != 3 || keys[0] != "a/1" || keys[1] != "a/2" || keys[2] != "a/sub/3" || list[0].Size != 3 {
		t.Fatalf("list: %+v", list)
	}
}

func testDelete(t *testing.T, s storage.Store) {
	if _, err := s.Put(ctx, "d", bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "d"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.Delete(ctx, "d"); err != nil {
		t.Fatalf("delete of a missing key must succeed: %v", err)
	}
}

func testPutIfAbsent(t *testing.T, s storage.Store) {
	if err := s.PutIfAbsent(ctx, "commit/COMMITTED", []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "commit/COMMITTED", []byte("second")); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if got := get(t, s, "commit/COMMITTED"); string(got) != "first" {
		t.Fatalf("the loser overwrote the marker: %q", got)
	}
}

func testPutIfAbsentRace(t *testing.T, s storage.Store) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, exists := 0, 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := s.PutIfAbsent(ctx, "race/marker", []byte{byte('a' + i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, storage.ErrExists):
				exists++
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if wins != 1 || exists != 7 {
		t.Fatalf("%d winners and %d ErrExists; want exactly one winner", wins, exists)
	}
}

func testBadKeys(t *testing.T, s storage.Store) {
	for _, k := range []string{"", "../escape", "a/../../b", "a//b"} {
		if _, err := s.Put(ctx, k, bytes.NewReader(nil)); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
}

// testStatDigest: every object vastrun writes carries its SHA-256, multipart
// ones (stream and file) too, and Stat reports it.
func testStatDigest(t *testing.T, s storage.Store) {
	data := make([]byte, 13<<20) // multipart with any part size up to 8 MiB
	rand.Read(data)
	if _, err := s.Put(ctx, "digest/stream", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if o, err := storage.PutFile(ctx, s, "digest/file", p); err != nil || o.SHA256 != sum(data) || o.Size != int64(len(data)) {
		t.Fatalf("PutFile: %+v %v", o, err)
	}
	small := []byte("small")
	if _, err := s.Put(ctx, "digest/small", bytes.NewReader(small)); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"digest/stream": sum(data), "digest/file": sum(data), "digest/small": sum(small)} {
		st, err := s.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if st.SHA256 != want {
			t.Errorf("Stat(%s).SHA256 = %q, want %s", key, st.SHA256, want)
		}
	}
	if got := get(t, s, "digest/stream"); sum(got) != sum(data) {
		t.Fatal("the stream object's content changed when its digest was stored")
	}
}

func testFileRoundTrip(t *testing.T, s storage.Store) {
	dir := t.TempDir()
	data := make([]byte, 21<<20+12345) // several ranges, a short last one
	rand.Read(data)
	src := filepath.Join(dir, "src.bin")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	put, err := storage.PutFile(ctx, s, "files/big", src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst.bin")
	checkParts(t, s, put, data, dst)
	o, err := storage.GetFile(ctx, s, "files/big", dst, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != int64(len(data)) || o.SHA256 != sum(data) {
		t.Fatalf("GetFile returned %d bytes with %s", o.Size, o.SHA256)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, data) {
		t.Fatal("the downloaded file differs from the uploaded one")
	}
	// Unknown size: one stream, same result.
	if o, err := storage.GetFile(ctx, s, "files/big", dst, -1); err != nil || o.SHA256 != sum(data) {
		t.Fatalf("GetFile of unknown size: %+v %v", o, err)
	}
	if _, err := storage.GetFile(ctx, s, "files/missing", dst, 10); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("GetFile of a missing key: %v, want ErrNotExist", err)
	}
}

// checkParts: PutFile's part digests are those of the file's consecutive
// pieces; GetFiles given them verifies every range against them, and a
// wrong digest or count fails with ErrDigestMismatch.
func checkParts(t *testing.T, s storage.Store, put storage.Object, data []byte, dst string) {
	t.Helper()
	pd := put.Parts
	if pd == nil {
		t.Logf("%T returned no part digests (a store without ranged transfers)", s)
		return
	}
	if pd.Size <= 0 || len(pd.SHA256) != int((int64(len(data))+pd.Size-1)/pd.Size) || len(pd.SHA256) < 2 {
		t.Fatalf("PutFile of %d bytes: part digests %d x %d bytes", len(data), len(pd.SHA256), pd.Size)
	}
	for i, d := range pd.SHA256 {
		lo := int64(i) * pd.Size
		if want := sum(data[lo:min(lo+pd.Size, int64(len(data)))]); d != want {
			t.Fatalf("part %d digest %s, want %s", i, d, want)
		}
	}
	ft := []storage.FileTransfer{{Key: "files/big", Path: dst, Size: int64(len(data)), Parts: pd}}
	got, err := storage.GetFiles(ctx, s, ft)
	if err != nil {
		t.Fatalf("GetFiles verifying parts: %v", err)
	}
	if got[0].Parts != pd || got[0].SHA256 != "" || got[0].Size != int64(len(data)) {
		t.Fatalf("GetFiles verifying parts returned %+v", got[0])
	}
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, data) {
		t.Fatal("the file downloaded part by part differs from the uploaded one")
	}
	bad := *pd
	bad.SHA256 = append([]string(nil), pd.SHA256...)
	bad.SHA256[1] = sum([]byte("not this part"))
	ft[0].Parts = &bad
	if _, err := storage.GetFiles(ctx, s, ft); !errors.Is(err, storage.ErrDigestMismatch) {
		t.Fatalf("GetFiles with a wrong part digest: %v, want ErrDigestMismatch", err)
	}
	ft[0].Parts, ft[0].Size = pd, int64(len(data))-1
	if _, err := storage.GetFiles(ctx, s, ft); !errors.Is(err, storage.ErrSizeMismatch) {
		t.Fatalf("GetFiles verifying parts of an object one byte longer than expected: %v, want ErrSizeMismatch", err)
	}
	ft[0].Size = int64(len(data))
	short := storage.PartDigests{Size: pd.Size, SHA256: pd.SHA256[1:]}
	ft[0].Parts = &short
	if _, err := storage.GetFiles(ctx, s, ft); !errors.Is(err, storage.ErrDigestMismatch) {
		t.Fatalf("GetFiles with too few part digests: %v, want ErrDigestMismatch", err)
	}
}

func testGetFileMismatch(t *testing.T, s storage.Store) {
	dir := t.TempDir()
	data := make([]byte, 9<<20)
	rand.Read(data)
	if _, err := s.Put(ctx, "mm/obj", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	n := int64(len(data))
	for _, want := range []int64{n - 1, n + 1, n - 3<<20, n + 8<<20, 0, 1} {
		_, err := storage.GetFile(ctx, s, "mm/obj", filepath.Join(dir, "x"), want)
		if !errors.Is(err, storage.ErrSizeMismatch) {
			t.Errorf("expecting %d bytes of a %d-byte object: %v, want ErrSizeMismatch", want, n, err)
		}
	}
}

func testBatch(t *testing.T, s storage.Store) {
	dir := t.TempDir()
	var files []storage.FileTransfer
	var want []string
	for i := 0; i < 12; i++ {
		data := make([]byte, i*i*40000) // 0 bytes to 4.8 MB
		rand.Read(data)
		p := filepath.Join(dir, fmt.Sprintf("in-%d", i))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, storage.FileTransfer{Key: fmt.Sprintf("batch/%02d", i), Path: p, Size: int64(len(data))})
		want = append(want, sum(data))
	}
	put, err := storage.PutFiles(ctx, s, files)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if put[i].SHA256 != want[i] || put[i].Size != files[i].Size || put[i].Key != files[i].Key {
			t.Fatalf("PutFiles[%d] = %+v", i, put[i])
		}
		files[i].Path = filepath.Join(dir, fmt.Sprintf("out-%d", i))
	}
	got, err := storage.GetFiles(ctx, s, files)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		b, _ := os.ReadFile(files[i].Path)
		if got[i].SHA256 != want[i] || sum(b) != want[i] {
			t.Fatalf("GetFiles[%d]: reported %s, file has %s, want %s", i, got[i].SHA256, sum(b), want[i])
		}
	}
}
