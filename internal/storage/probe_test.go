package storage_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/vastrun/vastrun/internal/storage"
)

// TestProbe: a probe that passes leaves nothing in the store; each way a
// store refuses it is classified by type, so the preflight names the fix.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	if err := backend.CreateBucket("there"); err != nil {
		t.Fatal(err)
	}
	// A port nobody listens on: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	yes := true
	s3 := func(endpoint, uri string) storage.Store {
		s, err := storage.Open(uri, storage.Options{Endpoint: endpoint, PathStyle: &yes, AccessKey: "k", SecretKey: "s", MaxRetries: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	file, err := storage.Open("file://"+t.TempDir()+"/ck", storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		s    storage.Store
		want error // nil: passes
	}{
		{"file store", file, nil},
		{"s3 store", s3(srv.URL, "s3://there/runs"), nil},
		{"missing bucket", s3(srv.URL, "s3://missing/runs"), storage.ErrNoBucket},
		{"nobody listening", s3(closed, "s3://there/runs"), storage.ErrUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := storage.Probe(ctx, c.s)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				left, err := c.s.List(ctx, "")
				if err != nil || len(left) != 0 {
					t.Fatalf("the probe left %v (%v)", left, err)
				}
				return
			}
			var pe *storage.ProbeError
			if !errors.As(err, &pe) || pe.Op != "write" || !strings.HasPrefix(pe.Key, storage.ProbePrefix) || !errors.Is(err, c.want) {
				t.Fatalf("err = %v (%T), want a write *ProbeError that is %v", err, err, c.want)
			}
		})
	}
}

func TestClassifyFileErrors(t *testing.T) {
	dir := t.TempDir()
	// A directory under a regular file cannot be made.
	if err := os.WriteFile(dir+"/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := storage.Open("file://"+dir+"/f/ck", storage.Options{})
	if !errors.Is(storage.Classify(err), storage.ErrNotWritable) {
		t.Fatalf("Classify(%v) = %v, want ErrNotWritable", err, storage.Classify(err))
	}
	if c := storage.Classify(errors.New("something else")); c != nil {
		t.Fatalf("an unknown error classified as %v", c)
	}
}
