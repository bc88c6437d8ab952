package smoke

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
)

// fakeHost is a server that starts listening after `after` dials, and
// that ignores SIGTERM when stubborn.
type fakeHost struct {
	mu        sync.Mutex
	dials     int
	after     int
	target    string // the real listener dials are sent to, once up
	stubborn  bool
	exitEarly bool
	proc      *fakeProc
	ran       []string
	runCode   int
}

type fakeProc struct {
	done    chan struct{}
	once    sync.Once
	code    int
	signals []string
}

func (p *fakeProc) Done() <-chan struct{} { return p.done }
func (p *fakeProc) ExitCode() int         { return p.code }
func (p *fakeProc) exit(code int)         { p.once.Do(func() { p.code = code; close(p.done) }) }

func (h *fakeHost) Run(ctx context.Context, script string, env map[string]string, log io.Writer) (int, error) {
	h.ran = append(h.ran, script)
	return h.runCode, nil
}

func (h *fakeHost) Start(ctx context.Context, script string, env map[string]string, log io.Writer) (Process, error) {
	h.proc = &fakeProc{done: make(chan struct{})}
	if h.exitEarly {
		h.proc.exit(3)
	}
	return &signalled{h.proc, h.stubborn}, nil
}

type signalled struct {
	*fakeProc
	stubborn bool
}

func (s *signalled) Terminate(context.Context) error {
	s.signals = append(s.signals, "TERM")
	if !s.stubborn {
		s.exit(143)
	}
	return nil
}

func (s *signalled) Kill(context.Context) error {
	s.signals = append(s.signals, "KILL")
	s.exit(137)
	return nil
}

func (h *fakeHost) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	h.mu.Lock()
	h.dials++
	up := h.dials > h.after
	h.mu.Unlock()
	if !up {
		return nil, errors.New("connection refused")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", h.target)
}

// autoClock is a fake clock that moves as soon as the code waits, so no
// test depends on how fast this machine is.
func autoClock() *clock.Fake {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c.OnWait = func(d time.Duration) { c.Advance(d) }
	return c
}

func testServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(200)
		case "/v1/x":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"echo": `+string(b)+`, "method": "`+r.Method+`"}`)
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRunServerWaitsProbesAndStops(t *testing.T) {
	srv := testServer(t)
	h := &fakeHost{after: 3, target: srv.Listener.Addr().String()}
	rep, result := RunServer(context.Background(), h, Server{
		Command: "serve", Ports: []int{8000}, HealthURL: "http://localhost:8000/health",
		Request: config.CanaryRequest{URL: "http://localhost:8000/v1/x", Body: `{"a":1}`},
		Clock:   autoClock(),
	}, 0)
	if !rep.Ready || !rep.Passed || rep.Attempts != 4 || rep.Stopped != "term" {
		t.Fatalf("report %+v", rep)
	}
	if rep.Request.Method != "POST" || rep.Request.Status != 200 {
		t.Fatalf("request %+v", rep.Request)
	}
	if result["method"] != "POST" || result["echo"].(map[string]any)["a"] != float64(1) {
		t.Fatalf("result %v", result)
	}
	if got := strings.Join(h.proc.signals, ","); got != "TERM" {
		t.Fatalf("signals %s", got)
	}
}

func TestRunServerNotReadyIsBoundedAndKillsAStubbornServer(t *testing.T) {
	h := &fakeHost{after: 1 << 30, stubborn: true}
	rep, _ := RunServer(context.Background(), h, Server{Command: "serve", Ports: []int{8000}, Ready: 30 * time.Second, Clock: autoClock()}, 0)
	if rep.Ready || rep.Passed || !strings.Contains(rep.Error, "not ready within 30s") {
		t.Fatalf("report %+v", rep)
	}
	if rep.Attempts != 31 { // at 0s, 1s, ... 30s
		t.Fatalf("attempts %d", rep.Attempts)
	}
	if rep.Stopped != "kill" || strings.Join(h.proc.signals, ",") != "TERM,KILL" || rep.ExitCode != 137 {
		t.Fatalf("stop %+v %v", rep, h.proc.signals)
	}
}

func TestRunServerThatExitsIsAFailure(t *testing.T) {
	h := &fakeHost{after: 1 << 30, exitEarly: true}
	rep, _ := RunServer(context.Background(), h, Server{Command: "serve", Ports: []int{8000}, Clock: autoClock()}, 0)
	if rep.Passed || rep.Stopped != "exited" || !strings.Contains(rep.Error, "exited (code 3) before it was ready") {
		t.Fatalf("report %+v", rep)
	}
	if len(h.proc.signals) != 0 {
		t.Fatalf("signalled an exited server: %v", h.proc.signals)
	}
}

func TestRunServerRequestCommandAndStatus(t *testing.T) {
	srv := testServer(t)
	h := &fakeHost{target: srv.Listener.Addr().String(), runCode: 2}
	rep, _ := RunServer(context.Background(), h, Server{Command: "serve", HealthURL: "http://localhost:1/health", Request: config.CanaryRequest{Command: "probe"}, Clock: autoClock()}, 2)
	if !rep.Passed || rep.Request.ExitCode != 2 || len(h.ran) != 1 || h.ran[0] != "probe" {
		t.Fatalf("report %+v ran %v", rep, h.ran)
	}
	rep, _ = RunServer(context.Background(), h, Server{Command: "serve", HealthURL: "http://localhost:1/health", Request: config.CanaryRequest{URL: "http://localhost:1/missing", ExpectStatus: 200}, Clock: autoClock()}, 0)
	if rep.Passed || rep.Request.Status != 404 || !strings.Contains(rep.Request.Error, "HTTP 404, want 200") {
		t.Fatalf("report %+v", rep.Request)
	}
}

func TestRunServerStopsWhenTheContextEnds(t *testing.T) {
	h := &fakeHost{after: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, _ := RunServer(ctx, h, Server{Command: "serve", Ports: []int{8000}, Clock: autoClock()}, 0)
	if rep.Passed || rep.Stopped != "term" || !strings.Contains(rep.Error, "stopped before the server was ready") {
		t.Fatalf("report %+v", rep)
	}
}

func TestHealthURLPathUsesFirstPort(t *testing.T) {
	if got := HealthURL("/health", []int{9000, 9001}); got != "http://localhost:9000/health" {
		t.Fatal(got)
	}
	if got := HealthURL("http://127.0.0.1:1/x", nil); got != "http://127.0.0.1:1/x" {
		t.Fatal(got)
	}
}

// The real local host: a server started in its own process group is
// stopped with its children, and gets exactly the environment given.
func TestLocalHostStopsTheGroupAndPassesOnlyTheGivenEnv(t *testing.T) {
	dir := t.TempDir()
	l := Local{Dir: dir}
	var out strings.Builder
	code, err := l.Run(context.Background(), `echo "A=$A HOME=${HOME:-unset}"; exit 4`, map[string]string{"A": "1", "PATH": "/usr/bin:/bin"}, &out)
	if err != nil || code != 4 || strings.TrimSpace(out.String()) != "A=1 HOME=unset" {
		t.Fatalf("code %d err %v out %q", code, err, out.String())
	}
	p, err := l.Start(context.Background(), `sleep 1000 & sleep 1000; wait`, map[string]string{"PATH": "/usr/bin:/bin"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := &ServerReport{Ready: true}
	stopServer(context.Background(), clock.Real{}, p, time.Hour, rep)
	if rep.Stopped != "term" || p.ExitCode() != 128+15 {
		t.Fatalf("stopped %q code %d", rep.Stopped, p.ExitCode())
	}
}

func TestRequestExpandsTheSmokeEnvironment(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization") + " " + r.URL.Query().Get("m")
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	h := &fakeHost{target: srv.Listener.Addr().String()}
	rep, _ := RunServer(context.Background(), h, Server{
		Command: "serve", Ports: []int{1}, Env: map[string]string{"API_KEY": "k-123", "MODEL": "tiny"},
		Request: config.CanaryRequest{URL: "http://localhost:1/x?m=${MODEL}", Headers: map[string]string{"Authorization": "Bearer ${API_KEY} ${UNSET}"}},
		Clock:   autoClock(),
	}, 0)
	if !rep.Passed || got != "Bearer k-123 ${UNSET} tiny" {
		t.Fatalf("passed %v, server saw %q", rep.Passed, got)
	}
}

func TestLocalRunLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	code, err := Local{Dir: dir}.Run(context.Background(), `sleep 1000 >/dev/null 2>&1 & echo $! > child.pid`, map[string]string{"PATH": "/usr/bin:/bin"}, nil)
	if err != nil || code != 0 {
		t.Fatal(code, err)
	}
	pid, _ := os.ReadFile(filepath.Join(dir, "child.pid"))
	if !killed(strings.TrimSpace(string(pid))) {
		t.Fatal("the background child was left running")
	}
}

// killed reports whether pid is gone, a zombie, or has SIGKILL pending
// (delivered, not yet acted on): no wait, so no timing.
func killed(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "ShdPnd", "SigPnd":
			if n, err := strconv.ParseUint(v, 16, 64); err == nil && n&(1<<(9-1)) != 0 {
				return true
			}
		}
	}
	return false
}
