package cli

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/vastrun/vastrun/internal/teamstate"
)

var scriptBuckets atomic.Int64

// cmdS3 gives a script a fresh bucket on the real S3 server .ci/run starts
// (VASTRUN_TEST_S3_ENDPOINT, moto):
//
//	s3 bucket                  create a bucket; sets $BUCKET, $S3ENDPOINT and the AWS_* variables
//	s3 wait-expired PREFIX RUN wait until RUN's lease is expired on the server's clock
//
// Scripts start with `[!s3] skip`: without the endpoint the condition is
// false, unless VASTRUN_TEST_S3_REQUIRED is set, when it is an error: team
// state is only ever tested on a real server.
func cmdTeamS3(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 3 && args[0] == "wait-expired" {
		waitLeaseExpired(ts, args[1], args[2])
		return
	}
	if len(args) != 1 || args[0] != "bucket" {
		ts.Fatalf("usage: teams3 bucket | teams3 wait-expired PREFIX RUN")
	}
	ep := os.Getenv("VASTRUN_TEST_S3_ENDPOINT")
	if ep == "" {
		ts.Fatalf("no S3 endpoint: start the script with [!s3] skip")
	}
	ep = atomicWrites(ts, ep)
	bucket := fmt.Sprintf("vastrun-script-%d-%d", os.Getpid(), scriptBuckets.Add(1))
	key, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if key == "" {
		key, secret = "testkey", "testsecret"
	}
	b, err := teamstate.NewS3(bucket, "", teamstate.S3Options{Endpoint: ep, AccessKey: key, SecretKey: secret})
	ts.Check(err)
	ts.Check(b.EnsureBucket(context.Background()))
	ts.Setenv("BUCKET", bucket)
	ts.Setenv("S3ENDPOINT", ep)
	ts.Setenv("AWS_ENDPOINT_URL_S3", ep)
	ts.Setenv("AWS_ACCESS_KEY_ID", key)
	ts.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	ts.Setenv("AWS_DEFAULT_REGION", "us-east-1")
}

// atomicWrites is moto behind a proxy that lets one writing request
// through at a time. moto checks If-None-Match and If-Match, then writes,
// in two steps a concurrent write can fall between (under the load of
// eight scenarios at once its parallel-create probe once let two of eight
// creates win, and the controller rightly refused the bucket): real S3 is
// atomic there, and team state is tested against S3's semantics, not
// moto's race. Reads pass freely; moto does not check the signature of the
// Host the proxy rewrites.
func atomicWrites(ts *testscript.TestScript, target string) string {
	atomicProxy.once.Do(func() {
		u, err := url.Parse(target)
		if err != nil {
			atomicProxy.err = err
			return
		}
		proxy := httputil.NewSingleHostReverseProxy(u)
		var mu sync.Mutex
		atomicProxy.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				mu.Lock()
				defer mu.Unlock()
			}
			proxy.ServeHTTP(w, r)
		}))
	})
	ts.Check(atomicProxy.err)
	return atomicProxy.srv.URL
}

// atomicProxy is the one proxy in front of moto for every scenario of
// the test process (it lives as long as the process).
var atomicProxy struct {
	once sync.Once
	srv  *httptest.Server
	err  error
}

// waitLeaseExpired waits (up to waitLimit) until the server's clock says the
// run's lease in $BUCKET/prefix is expired or released.
func waitLeaseExpired(ts *testscript.TestScript, prefix, run string) {
	b, err := teamstate.NewS3(ts.Getenv("BUCKET"), prefix, teamstate.S3Options{Endpoint: ts.Getenv("S3ENDPOINT"),
		AccessKey: ts.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: ts.Getenv("AWS_SECRET_ACCESS_KEY")})
	ts.Check(err)
	waitFor(ts, func() bool {
		_, live, _, err := teamstate.ReadLease(context.Background(), b, run)
		return err == nil && !live
	}, "the lease of run "+run+" to expire")
}

// cmdSimTouch creates a file in every live instance's workspace, so that
// a workload waiting for it goes on when the script says so:
//
//	simtouch NAME
func cmdSimTouch(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: simtouch NAME")
	}
	live := scriptSim(ts).Snapshot().Live
	if len(live) == 0 {
		ts.Fatalf("simtouch: no live instance")
	}
	for _, in := range live {
		ts.Check(os.WriteFile(filepath.Join(in.Sandbox, "workspace", args[0]), nil, 0o644))
	}
}

// s3Proxies holds each script's proxy switch.
var s3Proxies sync.Map // *testscript.TestScript -> *atomic.Bool

// cmdS3Proxy puts a loopback HTTP proxy in front of the S3 server, so that
// one controller's S3 traffic can be cut (a network partition) while the
// others' goes on:
//
//	s3proxy start VAR   start it; sets $VAR to its URL
//	s3proxy drop        from now on, reset every connection
//	s3proxy heal        pass traffic again
func cmdS3Proxy(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: s3proxy start VAR | drop | heal")
	}
	switch args[0] {
	case "start":
		u, err := url.Parse(atomicWrites(ts, os.Getenv("VASTRUN_TEST_S3_ENDPOINT")))
		ts.Check(err)
		var dropped atomic.Bool
		proxy := httputil.NewSingleHostReverseProxy(u)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if dropped.Load() {
				if hj, ok := w.(http.Hijacker); ok {
					if c, _, err := hj.Hijack(); err == nil {
						c.Close()
						return
					}
				}
				panic(http.ErrAbortHandler)
			}
			proxy.ServeHTTP(w, r)
		}))
		ts.Defer(func() { srv.Close(); s3Proxies.Delete(ts) })
		ts.Setenv(args[1], srv.URL)
		s3Proxies.Store(ts, &dropped)
	case "drop", "heal":
		v, ok := s3Proxies.Load(ts)
		if !ok {
			ts.Fatalf("s3proxy: not started")
		}
		v.(*atomic.Bool).Store(args[0] == "drop")
	default:
		ts.Fatalf("unknown s3proxy subcommand %q", args[0])
	}
}
