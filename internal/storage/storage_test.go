package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/vastrun/vastrun/internal/storage"
	"github.com/vastrun/vastrun/internal/storage/storagetest"
)

func TestFileStore(t *testing.T) {
	suite(t, func(t *testing.T) storage.Store {
		s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// suite runs the conformance suite, then its file transfers again with
// ranged streams joining every verified download (as they do when the
// head stream waits on the network), so both paths meet every server.
func suite(t *testing.T, newStore func(t *testing.T) storage.Store) {
	storagetest.Run(t, newStore)
	t.Run("RangedStreams", func(t *testing.T) {
		defer storage.ForceRangedStreams(true)()
		storagetest.RunTransfers(t, newStore)
	})
	if !storage.ChunksFree() {
		t.Fatal("a download kept receive chunks")
	}
}

// TestS3Fake runs the suite against an in-process S3 fake (gofakes3). It
// checks the client's wire behaviour, not integrity or auth, which only a
// real server enforces (see TestS3Real).
func TestS3Fake(t *testing.T) {
	var n atomic.Int64
	suite(t, func(t *testing.T) storage.Store {
		backend := s3mem.New()
		srv := httptest.NewServer(gofakes3.New(backend).Server())
		t.Cleanup(srv.Close)
		bucket := fmt.Sprintf("fake%d", n.Add(1))
		if err := backend.CreateBucket(bucket); err != nil {
			t.Fatal(err)
		}
		return s3Store(t, srv.URL, bucket)
	})
}

// TestS3Real runs the suite against a real S3 server. .ci/run starts
// moto_server and sets VASTRUN_TEST_S3_ENDPOINT; with VASTRUN_TEST_S3_REQUIRED
// set, a missing endpoint fails instead of skipping.
func TestS3Real(t *testing.T) {
	realSuite(t, "VASTRUN_TEST_S3_ENDPOINT", "VASTRUN_TEST_S3_REQUIRED")
}

// TestS3Versitygw runs the suite against a second, stricter real server:
// versitygw over a posix directory, started by .ci/run, which sets
// VASTRUN_TEST_S3_ENDPOINT_VERSITYGW and VASTRUN_TEST_S3_VERSITYGW_REQUIRED.
func TestS3Versitygw(t *testing.T) {
	realSuite(t, "VASTRUN_TEST_S3_ENDPOINT_VERSITYGW", "VASTRUN_TEST_S3_VERSITYGW_REQUIRED")
}

func realSuite(t *testing.T, endpointVar, requiredVar string) {
	endpoint := os.Getenv(endpointVar)
	if endpoint == "" {
		if os.Getenv(requiredVar) != "" {
			t.Fatalf("%s is set but %s is not", requiredVar, endpointVar)
		}
		t.Skipf("set %s (and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) to test against a real S3 server", endpointVar)
	}
	var n atomic.Int64
	suite(t, func(t *testing.T) storage.Store {
		bucket := fmt.Sprintf("vastrun-suite-%d-%d", os.Getpid(), n.Add(1))
		s := s3Store(t, endpoint, bucket)
		if err := s.(*storage.S3Store).EnsureBucket(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func s3Store(t *testing.T, endpoint, bucket string) storage.Store {
	t.Helper()
	yes := true
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" {
		key, secret = "testkey", "testsecret"
	}
	s, err := storage.Open("s3://"+bucket+"/prefix/run", storage.Options{
		Endpoint: endpoint, Region: "us-east-1", PathStyle: &yes, PartSize: 5 << 20, Threads: 3,
		AccessKey: key, SecretKey: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.URI(), "s3://"+bucket) {
		t.Fatalf("URI %s", s.URI())
	}
	return s
}

func TestOpenRejectsBadURIs(t *testing.T) {
	for _, u := range []string{"ftp://x/y", "file://host/path", "file://relative", "s3:///nobucket", "::"} {
		if _, err := storage.Open(u, storage.Options{}); err == nil {
			t.Errorf("Open(%q) accepted", u)
		}
	}
}

// plainStore hides the stores' fast paths, as a decorator would: PutFile,
// GetFile and the batches must still work, in one stream per file.
type plainStore struct{ storage.Store }

func TestFileTransfersThroughAPlainStore(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return plainStore{s}
	})
}

func TestTuningFromEnvironment(t *testing.T) {
	env := map[string]string{"VASTRUN_S3_THREADS": "0"}
	getenv := func(k string) string { return env[k] }
	if _, err := storage.Open("s3://b/p", storage.Options{Endpoint: "http://127.0.0.1:9", Getenv: getenv}); err == nil {
		t.Error("VASTRUN_S3_THREADS=0 accepted")
	}
	env = map[string]string{"VASTRUN_S3_PART_MIB": "4"}
	if _, err := storage.Open("s3://b/p", storage.Options{Endpoint: "http://127.0.0.1:9", Getenv: getenv}); err == nil {
		t.Error("VASTRUN_S3_PART_MIB=4 (below S3's 5 MiB minimum) accepted")
	}
}

func TestPartSize(t *testing.T) {
	for _, c := range []struct{ size, override, want int64 }{
		{0, 0, 8 << 20},
		{256 << 20, 0, 8 << 20},
		{-1, 0, 16 << 20},
		{256 << 20, 32 << 20, 32 << 20},
		{256 << 20, 1 << 20, 5 << 20},  // S3's minimum
		{100 << 30, 0, 11 << 20},       // 10,000 parts at most, whole MiB
		{10000 * 8 << 20, 0, 8 << 20},  // exactly 10,000 parts
		{10000*8<<20 + 1, 0, 9 << 20},  // one byte more
		{1 << 40, 64 << 20, 105 << 20}, // override grown to fit
	} {
		if got := storage.PartSize(c.size, c.override); got != c.want {
			t.Errorf("PartSize(%d, %d) = %d MiB, want %d MiB", c.size, c.override, got>>20, c.want>>20)
		}
	}
}

// TestS3StreamReusesPartBuffers streams more parts than Put may buffer
// (threads + 2), so buffers are recycled while parts are in flight; the
// object and its stored digest must still be exact.
func TestS3StreamReusesPartBuffers(t *testing.T) {
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	if err := backend.CreateBucket("stream"); err != nil {
		t.Fatal(err)
	}
	yes := true
	s, err := storage.Open("s3://stream/p", storage.Options{Endpoint: srv.URL, PathStyle: &yes, PartSize: 5 << 20, Threads: 1,
		AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 23<<20+7) // 5 parts, 3 buffers
	rand.Read(data)
	want := sha256.Sum256(data)
	o, err := s.Put(context.Background(), "obj", struct{ io.Reader }{bytes.NewReader(data)}) // not seekable
	if err != nil {
		t.Fatal(err)
	}
	if o.SHA256 != hex.EncodeToString(want[:]) || o.Size != int64(len(data)) {
		t.Fatalf("Put returned %+v", o)
	}
	st, err := s.Stat(context.Background(), "obj")
	if err != nil || st.SHA256 != o.SHA256 {
		t.Fatalf("Stat: %+v %v", st, err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	got, err := storage.GetFile(context.Background(), s, "obj", dst, int64(len(data)))
	if err != nil || got.SHA256 != o.SHA256 {
		t.Fatalf("GetFile: %+v %v", got, err)
	}
}

// TestPutFileRefusesAChangedFile: a file that changes between hashing and
// the end of its upload fails with ErrChanged instead of leaving an object
// whose stored digest does not match it.
func TestPutFileRefusesAChangedFile(t *testing.T) {
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	backend.CreateBucket("chg")
	yes := true
	s, err := storage.Open("s3://chg/p", storage.Options{Endpoint: srv.URL, PathStyle: &yes, AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("version one"), 0o600)
	// The hook runs after the bytes are sent and before the check, the
	// window a writer racing the upload would hit.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(p, old, old)
	defer storage.SetBeforeChangeCheck(func() { os.WriteFile(p, []byte("version two"), 0o600) })()
	if _, err := storage.PutFile(context.Background(), s, "k", p); !errors.Is(err, storage.ErrChanged) {
		t.Fatalf("upload of a file changed meanwhile: %v, want ErrChanged", err)
	}
	if _, err := s.Stat(context.Background(), "k"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("the mismatched object was left behind: %v", err)
	}
}

// TestRangedGetReleasesReceiveBuffers: every way a ranged download ends
// (success, a size mismatch, a cancelled context, concurrent files) gives
// its part buffers back to the process-wide budget; a leak would make later
// restores wait forever.
func TestRangedGetReleasesReceiveBuffers(t *testing.T) {
	s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	data := make([]byte, 40<<20+123) // 6 ranged parts
	rand.Read(data)
	if _, err := s.Put(ctx, "big", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	n := int64(len(data))
	o, err := storage.GetFile(ctx, s, "big", filepath.Join(dir, "ok"), n)
	if err != nil || o.SHA256 != hex.EncodeToString(sum[:]) || o.Size != n {
		t.Fatalf("GetFile: %+v %v", o, err)
	}
	for _, want := range []int64{n - 1, n + 1, n - 9<<20, n + 8<<20} {
		if _, err := storage.GetFile(ctx, s, "big", filepath.Join(dir, "mm"), want); !errors.Is(err, storage.ErrSizeMismatch) {
			t.Errorf("expecting %d of %d bytes: %v, want ErrSizeMismatch", want, n, err)
		}
	}
	if !storage.RecvBudgetFree() {
		t.Fatal("a failed download kept part buffers")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := storage.GetFile(cctx, s, "big", filepath.Join(dir, "cancelled"), n); !errors.Is(err, context.Canceled) {
		t.Errorf("GetFile with a cancelled context: %v, want context.Canceled", err)
	}
	var files []storage.FileTransfer
	for i := range 6 {
		files = append(files, storage.FileTransfer{Key: "big", Path: filepath.Join(dir, fmt.Sprint("many-", i)), Size: n})
	}
	got, err := storage.GetFiles(ctx, s, files)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range got {
		if o.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("file %d: digest %s", i, o.SHA256)
		}
	}
	if !storage.RecvBudgetFree() {
		t.Fatal("part buffers were not given back to the receive budget")
	}
}

// TestVerifiedDownloadStreams: a download verified against part digests
// is one plain GET while its reads find the bytes waiting (here, always:
// an in-process server), and is shared with ranged GETs from the end of
// the object when ranged streams join; the bytes and the verification are
// the same either way.
func TestVerifiedDownloadStreams(t *testing.T) {
	var gets, ranged atomic.Int64
	backend := s3mem.New()
	fake := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/big") {
			gets.Add(1)
			if r.Header.Get("Range") != "" {
				ranged.Add(1)
			}
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if err := backend.CreateBucket("streams"); err != nil {
		t.Fatal(err)
	}
	s := s3Store(t, srv.URL, "streams")
	ctx := context.Background()
	dir := t.TempDir()
	data := make([]byte, 26<<20+5) // six parts of 5 MiB, the last short
	rand.Read(data)
	src := filepath.Join(dir, "src")
	os.WriteFile(src, data, 0o600)
	put, err := storage.PutFile(ctx, s, "big", src)
	if err != nil || put.Parts == nil || len(put.Parts.SHA256) != 6 {
		t.Fatalf("PutFile: %+v %v", put, err)
	}
	get := func() error {
		ft := []storage.FileTransfer{{Key: "big", Path: filepath.Join(dir, "dst"), Size: int64(len(data)), Parts: put.Parts}}
		_, err := storage.GetFiles(ctx, s, ft)
		if err == nil {
			if b, _ := os.ReadFile(ft[0].Path); !bytes.Equal(b, data) {
				t.Fatal("downloaded bytes differ")
			}
		}
		return err
	}
	for _, join := range []bool{false, true} {
		restore := storage.ForceRangedStreams(join)
		gets.Store(0)
		ranged.Store(0)
		if err := get(); err != nil {
			t.Fatalf("join=%v: %v", join, err)
		}
		if !join && (gets.Load() != 1 || ranged.Load() != 0) {
			t.Errorf("alone, the head stream made %d GETs (%d ranged), want one plain GET", gets.Load(), ranged.Load())
		}
		if join && ranged.Load() == 0 {
			t.Errorf("with ranged streams joining, %d GETs and none ranged", gets.Load())
		}
		restore()
	}
	if !storage.ChunksFree() {
		t.Fatal("a download kept receive chunks")
	}
	for reads, short := range map[int]int{32: 0, 100: 25} {
		if storage.JoinRanged(false, reads, short) {
			t.Errorf("%d short reads of %d: ranged streams join, want the head stream alone", short, reads)
		}
	}
	if !storage.JoinRanged(false, 32, 9) || !storage.JoinRanged(false, 10, 10) {
		t.Error("a stream whose reads mostly come back short is left alone, want ranged streams to join")
	}
	if storage.JoinRanged(true, 10, 10) {
		t.Error("ranged streams join a stream from a server on this machine, want it alone")
	}
	for ep, want := range map[string]bool{"http://127.0.0.1:9000": true, "http://127.9.9.9": true, "http://[::1]:80": true,
		"http://LOCALHOST:9000": true, "https://s3.us-east-1.amazonaws.com": false, "http://10.0.0.5:9000": false, "http://[2001:db8::1]:9000": false, "::": false} {
		if got := storage.IsLoopback(ep); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", ep, got, want)
		}
	}
}
