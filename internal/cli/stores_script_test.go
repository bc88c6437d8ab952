package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/rogpeppe/go-internal/testscript"
)

// fakeS3s holds each script's in-process S3 fake.
var fakeS3s sync.Map // *testscript.TestScript -> *fakeS3

type fakeS3 struct {
	backend *s3mem.Backend
	bucket  string
	dropped atomic.Bool
}

// cmdFakeS3 gives a script an S3 store that needs no server (an
// in-process gofakes3: the wire protocol, not auth), so the preflight's
// store probe and a store lost mid-run are tested everywhere; the
// scenarios marked [s3] cover a real server:
//
//	fakes3 start BUCKET  start it with BUCKET; sets AWS_ENDPOINT_URL, the
//	                     AWS_* credentials and $BUCKET
//	fakes3 drop          from now on, reset every connection
//	fakes3 heal          answer again
//	fakes3 objects       print the bucket's keys, one a line
func cmdFakeS3(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: fakes3 start BUCKET | drop | heal | objects")
	}
	get := func() *fakeS3 {
		v, ok := fakeS3s.Load(ts)
		if !ok {
			ts.Fatalf("fakes3: not started")
		}
		return v.(*fakeS3)
	}
	switch args[0] {
	case "start":
		if len(args) != 2 {
			ts.Fatalf("usage: fakes3 start BUCKET")
		}
		f := &fakeS3{backend: s3mem.New(), bucket: args[1]}
		ts.Check(f.backend.CreateBucket(f.bucket))
		s3 := gofakes3.New(f.backend).Server()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f.dropped.Load() {
				if hj, ok := w.(http.Hijacker); ok {
					if c, _, err := hj.Hijack(); err == nil {
						c.Close()
						return
					}
				}
				panic(http.ErrAbortHandler)
			}
			s3.ServeHTTP(w, r)
		}))
		ts.Defer(func() { srv.Close(); fakeS3s.Delete(ts) })
		fakeS3s.Store(ts, f)
		for k, v := range map[string]string{"AWS_ENDPOINT_URL": srv.URL, "AWS_ACCESS_KEY_ID": "fakekey", "AWS_SECRET_ACCESS_KEY": "fakesecret-probe",
			"AWS_DEFAULT_REGION": "us-east-1", "AWS_S3_FORCE_PATH_STYLE": "true", "BUCKET": f.bucket} {
			ts.Setenv(k, v)
		}
	case "drop", "heal":
		get().dropped.Store(args[0] == "drop")
	case "objects":
		f := get()
		list, err := f.backend.ListBucket(f.bucket, nil, gofakes3.ListBucketPage{})
		ts.Check(err)
		var keys []string
		for _, o := range list.Contents {
			keys = append(keys, o.Key)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintln(ts.Stdout(), k)
		}
	default:
		ts.Fatalf("unknown fakes3 subcommand %q", args[0])
	}
}
