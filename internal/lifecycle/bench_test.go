package lifecycle_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// realEngine runs on the wall clock against a simulator whose boot is short,
// so the figures are real seconds of vastrun's own work.
func realEngine(b *testing.B, test string, counter *atomic.Int64) (*lifecycle.Scope, *sim.Server) {
	s, err := sim.New(sim.Config{ScheduleDelay: 50 * time.Millisecond, LoadDuration: 200 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	var h http.Handler = s
	if counter != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				counter.Add(1)
			}
			s.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	b.Cleanup(func() { srv.Close(); s.Close() })
	clientRaw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey()})
	client := retry.Wrap(clientRaw, retry.Policy{}) // as vastrun wraps it
	cfg, err := config.Parse([]byte(strings.Replace(baseConfig, "test: sh scripts/gpu-test.sh", "test: "+test, 1)))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Secrets = nil
	root := b.TempDir()
	os.MkdirAll(filepath.Join(root, "scripts"), 0o755)
	os.WriteFile(filepath.Join(root, "scripts", "gpu-test.sh"), []byte("true\n"), 0o755)
	return lifecycle.New(&lifecycle.Deps{
		Market: client, Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" },
		CI: cienv.Env{}, Redactor: redact.New(), Approve: func(lifecycle.Plan) (bool, error) { return true, nil },
		Annotations: &strings.Builder{}, Config: cfg, RepoDir: root, StateRoot: filepath.Join(root, "state"),
		EvidenceDir: filepath.Join(root, "ev"), Simulated: true, Switch: &fakeSwitch{},
	}), s
}

// BenchmarkBillableOverhead: seconds vastrun adds to the billable time
// around the test (running seen → test started; test ended → destroy sent).
func BenchmarkBillableOverhead(b *testing.B) {
	var before, after, fromRunning float64
	for i := 0; i < b.N; i++ {
		e, s := realEngine(b, "true", nil)
		r, err := ci.Run(context.Background(), e)
		if err != nil {
			b.Fatal(err)
		}
		before += r.Timings["overhead_before_test"]
		after += r.Timings["overhead_after_test"]
		// From the moment the simulator started the container (GPU billing
		// starts) to the test starting: includes the polling lag.
		recs, _ := journal.Read(e.RunDir())
		for _, rec := range recs {
			if rec.Step == "work" && rec.Type == "intent" {
				fromRunning += rec.Time.Sub(s.Snapshot().Gone[0].RunningSince).Seconds()
			}
		}
	}
	b.ReportMetric(before/float64(b.N), "s-seen-to-test")
	b.ReportMetric(fromRunning/float64(b.N), "s-running-to-test")
	b.ReportMetric(after/float64(b.N), "s-test-to-destroy")
}

// BenchmarkSIGINTToDestroy: cancellation during the test → destroy request
// sent (the journal's destroy intent is written just before the request).
func BenchmarkSIGINTToDestroy(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		e, s := realEngine(b, "touch started; sleep 60", nil)
		ctx, cancel := context.WithCancel(context.Background())
		var cancelledAt time.Time
		go func() {
			for {
				for _, in := range s.Snapshot().Live {
					if _, err := os.Stat(filepath.Join(in.Sandbox, "workspace", "started")); err == nil {
						cancelledAt = time.Now()
						cancel()
						return
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		ci.Run(ctx, e)
		recs, _ := journal.Read(e.RunDir())
		for _, rec := range recs {
			if rec.Step == "destroy" && rec.Type == "intent" {
				total += rec.Time.Sub(cancelledAt)
				break
			}
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-sigint-to-destroy")
}

// BenchmarkAPICallsWhileWaiting: API calls per minute of waiting for a
// slow instance (simulated time: a 30-minute load on a fake clock).
func BenchmarkAPICallsWhileWaiting(b *testing.B) {
	var perMin float64
	for i := 0; i < b.N; i++ {
		clk := clock.NewFake(time.Unix(1785200000, 0))
		s, _ := sim.New(sim.Config{Clock: clk, DisableSSH: true, LoadDuration: 30 * time.Minute})
		var calls atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v0/instances/") {
				calls.Add(1)
			}
			s.ServeHTTP(w, r)
		}))
		clientRaw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: autoClock{clk}})
		client := retry.Wrap(clientRaw, retry.Policy{Clock: autoClock{clk}}) // as vastrun wraps it
		cfg, _ := config.Parse([]byte(strings.Replace(baseConfig, "ready: 10m", "ready: 31m", 1)))
		cfg.Secrets = nil
		root := b.TempDir()
		e := lifecycle.New(&lifecycle.Deps{Market: client, Clock: autoClock{clk}, Log: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" },
			Redactor: redact.New(), Approve: func(lifecycle.Plan) (bool, error) { return true, nil }, Annotations: &strings.Builder{},
			Config: cfg, RepoDir: root, StateRoot: filepath.Join(root, "state"), EvidenceDir: filepath.Join(root, "ev"), Switch: &fakeSwitch{}})
		start := clk.Now()
		ci.Run(context.Background(), e) // SSH is disabled: it waits the load out, then fails to connect
		waited := clk.Now().Sub(start).Minutes()
		perMin += float64(calls.Load()) / waited
		srv.Close()
		s.Close()
	}
	b.ReportMetric(perMin/float64(b.N), "calls/min")
}
