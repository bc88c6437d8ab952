package canary

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/smoke"
)

// slowHost is a server that answers its health URL 503 the first time and
// 200 from then on: ready only at the second probe, a poll interval later.
type slowHost struct{ target string }

func (h slowHost) Run(context.Context, string, map[string]string, io.Writer) (int, error) {
	return 0, nil
}

func (h slowHost) Start(context.Context, string, map[string]string, io.Writer) (smoke.Process, error) {
	return &quietProc{done: make(chan struct{})}, nil
}

func (h slowHost) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", h.target)
}

type quietProc struct{ done chan struct{} }

func (p *quietProc) Done() <-chan struct{}           { return p.done }
func (p *quietProc) ExitCode() int                   { return 143 }
func (p *quietProc) Terminate(context.Context) error { close(p.done); return nil }
func (p *quietProc) Kill(context.Context) error      { return nil }

// Under --sim the engine's clock runs fast, but a server starts and
// answers in real time: the server smoke's health_timeout and stop grace
// are wall time on both sides, and so are the local steps' bounds. Here
// the simulated clock runs 10^9 times faster than the wall (a minute lasts
// 60 ns), and the server is ready at its second probe, one poll interval
// (a wall second) after the first: on the scaled clock the 1-minute bound
// is over before the second probe; on the wall clock it is not.
func TestServerSmokeBoundsAreWallTimeUnderSim(t *testing.T) {
	var probes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if probes.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)

	e := newFlow(lifecycle.New(&lifecycle.Deps{Clock: clock.NewScaled(time.Now(), 1e9)}), false)
	spec := e.serverSpec(nil, io.Discard, io.Discard)
	if _, wall := spec.Clock.(clock.Real); !wall {
		t.Fatalf("the server smoke waits on %T under --sim, not the wall clock", spec.Clock)
	}
	spec.Command, spec.HealthURL = "serve", "http://localhost:8000/health"
	rep, _ := smoke.RunServer(context.Background(), slowHost{srv.Listener.Addr().String()}, spec, 0)
	if !rep.Ready || !rep.Passed || rep.Attempts != 2 || rep.Stopped != "term" {
		t.Fatalf("a server ready one wall second after it started, with a 1-minute health_timeout: %+v", rep)
	}

	// The local steps' bounds (canary.timeouts) are wall time too.
	if _, wall := e.wallClock().(clock.Real); !wall {
		t.Fatalf("local steps are bounded on %T under --sim", e.wallClock())
	}
	// A test's fake clock is kept, so that tests drive these waits.
	fake := clock.NewFake(time.Now())
	if got := newFlow(lifecycle.New(&lifecycle.Deps{Clock: fake}), false).serverSpec(nil, nil, nil).Clock; got != fake {
		t.Fatalf("a fake clock was replaced by %T", got)
	}
}
