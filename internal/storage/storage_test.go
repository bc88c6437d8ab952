package storage_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/vastrun/vastrun/internal/storage"
	"github.com/vastrun/vastrun/internal/storage/storagetest"
)

func TestFileStore(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, err := storage.Open("file://"+t.TempDir(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestS3Fake runs the suite against an in-process S3 fake (gofakes3). It
// checks the client's wire behaviour, not integrity or auth, which only a
// real server enforces (see TestS3Real).
func TestS3Fake(t *testing.T) {
	var n atomic.Int64
	storagetest.Run(t, func(t *testing.T) storage.Store {
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
	storagetest.Run(t, func(t *testing.T) storage.Store {
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
