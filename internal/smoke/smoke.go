package smoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
)

// Host is where a smoke runs: this machine (CPU side) or the rented
// instance (GPU side). The server smoke contract is written once against
// it, so both sides start, probe and stop the server the same way.
type Host interface {
	// Run runs script to completion and returns its exit code; err is
	// for a command that could not be run at all.
	Run(ctx context.Context, script string, env map[string]string, log io.Writer) (int, error)
	// Start starts script in the background.
	Start(ctx context.Context, script string, env map[string]string, log io.Writer) (Process, error)
	// Dial connects to addr as this host sees it ("127.0.0.1:8000").
	Dial(ctx context.Context, network, addr string) (net.Conn, error)
}

// Process is a server started by [Host.Start].
type Process interface {
	// Done is closed once the process has exited; ExitCode is valid then.
	Done() <-chan struct{}
	ExitCode() int
	// Terminate sends SIGTERM to the process and its children; Kill, SIGKILL.
	Terminate(ctx context.Context) error
	Kill(ctx context.Context) error
}

// Defaults of the server smoke contract.
const (
	DefaultReady = time.Minute      // canary.health_timeout
	DefaultStop  = 10 * time.Second // canary.timeouts.stop
	pollEvery    = time.Second
	attemptLimit = 10 * time.Second // one health GET or request
)

// Request is what is sent to a ready server (canary.request), so that
// callers holding a frozen spec need not import the configuration.
type Request = config.CanaryRequest

// Server is one run of the server smoke contract.
type Server struct {
	Command   string
	Env       map[string]string
	HealthURL string // absolute, as the host sees it (see [HealthURL])
	Ports     []int
	Request   config.CanaryRequest
	Ready     time.Duration // how long the server may take to be ready
	Grace     time.Duration // between TERM and KILL
	Clock     clock.Clock
	Log       io.Writer // the server's output, kept as evidence
	ProbeLog  io.Writer // the request command's output, and what was probed
}

// ServerReport is what the server smoke saw, for the receipt.
type ServerReport struct {
	Ready        bool           `json:"ready"`
	Attempts     int            `json:"attempts"`
	HealthURL    string         `json:"health_url,omitempty"`
	HealthStatus int            `json:"health_status,omitempty"`
	Ports        []int          `json:"ports,omitempty"`
	Request      *RequestReport `json:"request,omitempty"`
	// Stopped says how the server ended: "term" (it exited after SIGTERM),
	// "kill" (it needed SIGKILL), or "exited" (on its own, before it was
	// stopped: a server smoke whose server exits is a failure).
	Stopped  string `json:"stopped"`
	ExitCode int    `json:"server_exit_code"`
	Error    string `json:"error,omitempty"`
	Passed   bool   `json:"passed"`
}

// RequestReport is the probe sent once the server was ready.
type RequestReport struct {
	Command  string `json:"command,omitempty"`
	Method   string `json:"method,omitempty"`
	URL      string `json:"url,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	Status   int    `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	Passed   bool   `json:"passed"`
}

// HealthURL makes canary.health_url absolute: a bare /path is served on
// the first declared port of localhost.
func HealthURL(raw string, ports []int) string {
	if strings.HasPrefix(raw, "/") && len(ports) > 0 {
		return "http://localhost:" + strconv.Itoa(ports[0]) + raw
	}
	return raw
}

// RunServer starts s.Command on h, waits until every declared port accepts
// and the health URL answers 2xx (at most s.Ready), sends s.Request, then
// stops the server: SIGTERM, and SIGKILL if it has not exited after
// s.Grace. The server is stopped whatever happened, also when ctx ends.
// result is the request's JSON answer (an HTTP request) or nil (a command
// request writes $VASTRUN_RESULT itself); expectExit applies to a request
// command.
func RunServer(ctx context.Context, h Host, s Server, expectExit int) (rep *ServerReport, result map[string]any) {
	rep = &ServerReport{HealthURL: s.HealthURL, Ports: s.Ports}
	clk := s.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	ready, grace := s.Ready, s.Grace
	if ready <= 0 {
		ready = DefaultReady
	}
	if grace <= 0 {
		grace = DefaultStop
	}
	probeLog := orDiscard(s.ProbeLog)
	proc, err := h.Start(ctx, s.Command, s.Env, s.Log)
	if err != nil {
		rep.Error, rep.Stopped = "start the server: "+err.Error(), "exited"
		return rep, nil
	}
	// The stop runs even when ctx has ended: a server must never outlive
	// the smoke.
	defer func() { stopServer(context.WithoutCancel(ctx), clk, proc, grace, rep) }()

	client := &http.Client{Transport: &http.Transport{DialContext: h.Dial, DisableKeepAlives: true}}
	deadline := clk.Now().Add(ready)
	for {
		rep.Attempts++
		msg, ok := probeReady(ctx, h, client, s, rep)
		if ok {
			rep.Ready = true
			break
		}
		select {
		case <-proc.Done():
			rep.Error = fmt.Sprintf("the server exited (code %d) before it was ready: %s", proc.ExitCode(), msg)
			return rep, nil
		default:
		}
		if !clk.Now().Before(deadline) {
			rep.Error = fmt.Sprintf("the server was not ready within %s: %s", ready, msg)
			return rep, nil
		}
		select {
		case <-ctx.Done():
			rep.Error = "stopped before the server was ready: " + ctx.Err().Error()
			return rep, nil
		case <-proc.Done():
		case <-clk.After(pollEvery):
		}
	}
	fmt.Fprintf(probeLog, "server ready after %d attempt(s)\n", rep.Attempts) //nolint:errcheck // the probe log is for people; the verdict does not depend on it
	if !s.Request.IsSet() {
		rep.Passed = true
		return rep, nil
	}
	rq := s.Request
	rr := &RequestReport{Command: rq.Command}
	rep.Request = rr
	if rq.Command != "" {
		code, err := h.Run(ctx, rq.Command, s.Env, probeLog)
		rr.ExitCode = code
		if err != nil {
			rr.Error = err.Error()
		}
		rr.Passed = err == nil && code == expectExit
	} else {
		result = sendRequest(ctx, client, expandRequest(rq, s.Env), rr, probeLog)
	}
	select {
	case <-proc.Done():
		rep.Error = fmt.Sprintf("the server exited (code %d) during the request", proc.ExitCode())
		return rep, result
	default:
	}
	rep.Passed = rr.Passed
	return rep, result
}

// probeReady checks every declared port and the health URL once.
func probeReady(ctx context.Context, h Host, client *http.Client, s Server, rep *ServerReport) (string, bool) {
	for _, p := range s.Ports {
		actx, cancel := context.WithTimeout(ctx, attemptLimit)
		conn, err := h.Dial(actx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		cancel()
		if err != nil {
			return fmt.Sprintf("port %d: %v", p, err), false
		}
		conn.Close() //nolint:errcheck // a probe connection: it connected, which is all it asked
	}
	if s.HealthURL == "" {
		return "", true
	}
	actx, cancel := context.WithTimeout(ctx, attemptLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, s.HealthURL, nil)
	if err != nil {
		return err.Error(), false
	}
	res, err := client.Do(req)
	if err != nil {
		return err.Error(), false
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20)) //nolint:errcheck // the status is what the probe reads
	res.Body.Close()                                     //nolint:errcheck // the body was read; its Close error tells nothing
	rep.HealthStatus = res.StatusCode
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Sprintf("%s answered HTTP %d", s.HealthURL, res.StatusCode), false
	}
	return "", true
}

// expandRequest fills ${NAME} in the request's URL, headers and body from
// the smoke's environment (an API key among the secrets, say), the same on
// both sides. Only names of that environment expand, others stay as
// written; what is logged and kept is redacted like every sink.
func expandRequest(rq config.CanaryRequest, env map[string]string) config.CanaryRequest {
	get := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return "${" + k + "}"
	}
	out := rq
	out.URL = os.Expand(rq.URL, get)
	out.Body = os.Expand(rq.Body, get)
	out.Headers = map[string]string{}
	for k, v := range rq.Headers {
		out.Headers[k] = os.Expand(v, get)
	}
	return out
}

// sendRequest sends the HTTP probe; its JSON object answer is the result.
func sendRequest(ctx context.Context, client *http.Client, rq config.CanaryRequest, rr *RequestReport, log io.Writer) map[string]any {
	rr.Method = strings.ToUpper(rq.Method)
	if rr.Method == "" {
		rr.Method = http.MethodGet
		if rq.Body != "" {
			rr.Method = http.MethodPost
		}
	}
	rr.URL = rq.URL // expanded: the receipt is redacted, so a secret in it is masked
	want := rq.ExpectStatus
	if want == 0 {
		want = http.StatusOK
	}
	actx, cancel := context.WithTimeout(ctx, attemptLimit*6)
	defer cancel()
	var body io.Reader
	if rq.Body != "" {
		body = strings.NewReader(rq.Body)
	}
	req, err := http.NewRequestWithContext(actx, rr.Method, rq.URL, body)
	if err != nil {
		rr.Error = err.Error()
		return nil
	}
	for k, v := range rq.Headers {
		req.Header.Set(k, v)
	}
	if rq.Body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := client.Do(req)
	if err != nil {
		rr.Error = err.Error()
		return nil
	}
	defer res.Body.Close() //nolint:errcheck // the body was read; its Close error tells nothing
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	rr.Status = res.StatusCode
	fmt.Fprintf(log, "%s %s: HTTP %d\n%s\n", rr.Method, rq.URL, res.StatusCode, lastBytes(b, 4096)) //nolint:errcheck // the probe log is for people; the verdict does not depend on it
	var result map[string]any
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &result); err != nil {
			result = nil
		}
	}
	rr.Passed = res.StatusCode == want
	if !rr.Passed {
		rr.Error = fmt.Sprintf("HTTP %d, want %d", res.StatusCode, want)
	}
	return result
}

// stopServer sends TERM, waits up to grace for the server to exit, then
// KILL, and waits for it to be gone.
func stopServer(ctx context.Context, clk clock.Clock, proc Process, grace time.Duration, rep *ServerReport) {
	select {
	case <-proc.Done():
		if rep.Stopped == "" {
			rep.Stopped = "exited"
		}
		rep.ExitCode = proc.ExitCode()
		if rep.Ready && rep.Error == "" {
			rep.Error = fmt.Sprintf("the server exited on its own (code %d) before it was stopped", rep.ExitCode)
			rep.Passed = false
		}
		return
	default:
	}
	rep.Stopped = "term"
	terr := proc.Terminate(ctx)
	select {
	case <-proc.Done():
	case <-clk.After(grace):
	}
	select {
	case <-proc.Done():
	default:
		rep.Stopped = "kill"
		kerr := proc.Kill(ctx)
		if errors.Join(terr, kerr) != nil && rep.Error == "" {
			rep.Error = "stop the server: " + errors.Join(terr, kerr).Error()
		}
		// KILL cannot be ignored; wait for it, bounded so that a lost
		// connection cannot hold the run forever.
		select {
		case <-proc.Done():
		case <-clk.After(grace):
			if rep.Error == "" {
				rep.Error = "the server did not exit after SIGKILL"
			}
			rep.Passed = false
		}
	}
	rep.ExitCode = proc.ExitCode()
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
