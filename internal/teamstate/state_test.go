package teamstate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/teamstate"
	"github.com/vastrun/vastrun/internal/teamstate/statetest"
)

func TestMemory(t *testing.T) {
	statetest.Run(t, func(t *testing.T) teamstate.Backend { return teamstate.NewMemory(nil) })
}

func TestLocal(t *testing.T) {
	statetest.Run(t, func(t *testing.T) teamstate.Backend {
		b, err := teamstate.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

var buckets atomic.Int64

// s3Backend opens a fresh bucket on endpoint.
func s3Backend(t *testing.T, endpoint string, tr http.RoundTripper) *teamstate.S3 {
	t.Helper()
	bucket := fmt.Sprintf("vastrun-state-%d-%d", os.Getpid(), buckets.Add(1))
	b, err := teamstate.NewS3(bucket, "team/v1", teamstate.S3Options{Endpoint: endpoint, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func endpoint(t *testing.T, endpointVar, requiredVar string) string {
	e := os.Getenv(endpointVar)
	if e == "" {
		if os.Getenv(requiredVar) != "" {
			t.Fatalf("%s is set but %s is not", requiredVar, endpointVar)
		}
		t.Skipf("set %s (and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) to test against a real S3 server", endpointVar)
	}
	return e
}

// realServer probes the server first: one that passes runs the whole
// suite; one that fails must be refused by the probe, with the failing
// checks named, and then nothing else may trust it.
func realServer(t *testing.T, endpointVar, requiredVar string, tr http.RoundTripper) {
	ep := endpoint(t, endpointVar, requiredVar)
	v, err := teamstate.Probe(context.Background(), s3Backend(t, ep, tr))
	if err != nil {
		t.Fatalf("probe %s: %v", ep, err)
	}
	for _, c := range v.Checks {
		t.Logf("probe %s: %s: got %s (ok=%v)", ep, c.Name, c.Got, c.OK)
	}
	if !v.OK {
		if err := v.Err(); !errors.Is(err, teamstate.ErrNoConditionalWrites) {
			t.Fatalf("a failing verdict must be refused with ErrNoConditionalWrites, got %v", err)
		}
		t.Logf("server %s is refused by the probe; the suite does not run on it", ep)
		return
	}
	statetest.Run(t, func(t *testing.T) teamstate.Backend { return s3Backend(t, ep, tr) })
}

// oneWriteAtATime lets one writing request reach the server at a time.
// moto checks If-None-Match and If-Match, then writes, in two steps that
// a concurrent write can fall between: under load 2 of 8 racing creates
// (and swaps) won about once in 60 runs, where S3 is atomic. The suite
// holds this client to S3's semantics, so moto gets the atomicity it
// lacks; versitygw, which has it, is tested as it is.
type oneWriteAtATime struct {
	mu   sync.Mutex
	next http.RoundTripper
}

func (o *oneWriteAtATime) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	return o.next.RoundTrip(r)
}

// TestS3Moto: .ci/run starts moto_server and sets VASTRUN_TEST_S3_ENDPOINT.
func TestS3Moto(t *testing.T) {
	realServer(t, "VASTRUN_TEST_S3_ENDPOINT", "VASTRUN_TEST_S3_REQUIRED", &oneWriteAtATime{next: http.DefaultTransport})
}

// TestS3Versitygw: .ci/run starts versitygw (posix) and sets
// VASTRUN_TEST_S3_ENDPOINT_VERSITYGW.
func TestS3Versitygw(t *testing.T) {
	realServer(t, "VASTRUN_TEST_S3_ENDPOINT_VERSITYGW", "VASTRUN_TEST_S3_VERSITYGW_REQUIRED", nil)
}

// TestProbeRefusesServerIgnoringConditions puts a real HTTP proxy in front
// of moto that drops If-None-Match and If-Match, which is what the
// "S3-compatible" stores that ignore them amount to (B2, Incus): the probe
// must refuse that endpoint. moto does not check signatures, so the
// stripped headers reach it unsigned-for.
func TestProbeRefusesServerIgnoringConditions(t *testing.T) {
	ep := endpoint(t, "VASTRUN_TEST_S3_ENDPOINT", "VASTRUN_TEST_S3_REQUIRED")
	u, _ := url.Parse(ep)
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("If-None-Match")
		r.Header.Del("If-Match")
		proxy.ServeHTTP(w, r)
	})}
	ln := listen(t)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	b := s3Backend(t, "http://"+ln.Addr().String(), nil)
	cache := teamstate.ProbeCache{Dir: t.TempDir()}
	_, fresh, err := cache.Verify(context.Background(), b, "ignoring")
	if !errors.Is(err, teamstate.ErrNoConditionalWrites) || !fresh {
		t.Fatalf("probe of a server ignoring conditions: fresh %v, %v; want ErrNoConditionalWrites", fresh, err)
	}
	// The refusal is cached: the second use does not probe again.
	if _, fresh, err := cache.Verify(context.Background(), b, "ignoring"); fresh || !errors.Is(err, teamstate.ErrNoConditionalWrites) {
		t.Fatalf("second verify: fresh %v, %v; want the cached refusal", fresh, err)
	}
}

func TestProbeMemory(t *testing.T) {
	good := teamstate.NewMemory(nil)
	v, err := teamstate.Probe(context.Background(), good)
	if err != nil || !v.OK || v.Err() != nil {
		t.Fatalf("probe of a correct backend: %+v %v", v, err)
	}
	bad := teamstate.NewMemory(nil)
	bad.IgnoreConditions = true
	v, err = teamstate.Probe(context.Background(), bad)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK || !errors.Is(v.Err(), teamstate.ErrNoConditionalWrites) {
		t.Fatalf("probe of a backend ignoring conditions: %+v", v)
	}
	failed := 0
	for _, c := range v.Checks {
		if !c.OK {
			failed++
		}
	}
	if failed < 3 {
		t.Fatalf("only %d checks failed on a backend ignoring every condition: %+v", failed, v.Checks)
	}
	down := teamstate.NewMemory(nil)
	down.Fault = func(op, key string) error { return errors.New("connection refused") }
	if _, err := teamstate.Probe(context.Background(), down); !errors.Is(err, teamstate.ErrUnavailable) {
		t.Fatalf("probe of an unreachable backend: %v, want ErrUnavailable (no verdict)", err)
	}
}

func TestProbeCache(t *testing.T) {
	dir := t.TempDir()
	b := teamstate.NewMemory(nil)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c := teamstate.ProbeCache{Dir: dir, Now: func() time.Time { return now }}
	if _, fresh, err := c.Verify(context.Background(), b, "e1"); err != nil || !fresh {
		t.Fatalf("first verify: fresh %v %v", fresh, err)
	}
	if _, fresh, err := c.Verify(context.Background(), b, "e1"); err != nil || fresh {
		t.Fatalf("second verify: fresh %v %v, want the cached verdict", fresh, err)
	}
	now = now.Add(25 * time.Hour)
	if _, fresh, err := c.Verify(context.Background(), b, "e1"); err != nil || !fresh {
		t.Fatalf("after a day: fresh %v %v, want a new probe", fresh, err)
	}
}

func TestParseLocation(t *testing.T) {
	for in, want := range map[string]string{"": "local", "local": "local", "s3://b": "s3://b", "s3://b/p/q/": "s3://b/p/q"} {
		l, err := teamstate.ParseLocation(in)
		if err != nil || l.String() != want {
			t.Errorf("ParseLocation(%q) = %v %v, want %s", in, l, err, want)
		}
	}
	for _, in := range []string{"s3://", "gs://b", "/tmp/x"} {
		if _, err := teamstate.ParseLocation(in); err == nil {
			t.Errorf("ParseLocation(%q) succeeded", in)
		}
	}
}
