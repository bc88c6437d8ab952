package canary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/container"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/smoke"
)

// remoteHost runs the server smoke contract on the instance itself: the
// server is started over SSH, probed through SSH dials to the instance's
// own loopback, and stopped through its pid file.
type remoteHost struct{ c *remote.Client }

func (h remoteHost) Run(ctx context.Context, script string, env map[string]string, log io.Writer) (int, error) {
	err := h.c.Run(ctx, remote.Command{Script: script, Env: env, Output: log})
	var ee *remote.ExitError
	if errors.As(err, &ee) {
		return ee.Code, nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// serverPidFile is where the started server's shell writes its pid; the
// shell execs the command, so the pid (and its process group) is the
// server's.
const serverPidFile = ".vastrun/canary-server.pid"

func (h remoteHost) Start(ctx context.Context, script string, env map[string]string, log io.Writer) (smoke.Process, error) {
	full := "mkdir -p .vastrun && echo $$ > " + serverPidFile + " && exec /bin/sh -c " + remote.ShellQuote(script)
	p := &remoteProc{c: h.c, done: make(chan struct{}), code: -1}
	sctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() {
		defer close(p.done)
		code, err := h.Run(sctx, full, env, log)
		if err == nil {
			p.code = code
		}
	}()
	return p, nil
}

func (h remoteHost) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return h.c.Dial(ctx, network, addr)
}

type remoteProc struct {
	c      *remote.Client
	cancel context.CancelFunc
	done   chan struct{}
	code   int
}

func (p *remoteProc) Done() <-chan struct{} { return p.done }
func (p *remoteProc) ExitCode() int         { return p.code }
func (p *remoteProc) Terminate(ctx context.Context) error {
	return p.signal(ctx, "TERM")
}

// Kill signals the server's group, then ends the session, which also
// makes remote.Client kill what it started.
func (p *remoteProc) Kill(ctx context.Context) error {
	err := p.signal(ctx, "KILL")
	p.cancel()
	return err
}

func (p *remoteProc) signal(ctx context.Context, sig string) error {
	script := `p=$(cat ` + serverPidFile + ` 2>/dev/null); [ -n "$p" ] || exit 0; kill -` + sig + ` -- -"$p" 2>/dev/null; pkill -` + sig + ` -P "$p" 2>/dev/null; kill -` + sig + ` "$p" 2>/dev/null; true`
	_, err := p.c.Output(ctx, script)
	if err != nil {
		return fmt.Errorf("send SIG%s to the canary server on the instance: %w", sig, err)
	}
	return nil
}

// serverSpec is the server smoke contract of the config, for one side.
func (e *flow) serverSpec(env map[string]string, log, probeLog io.Writer) smoke.Server {
	cc := e.canarySpec()
	return smoke.Server{
		Command:   cc.Smoke,
		Env:       env,
		HealthURL: smoke.HealthURL(cc.HealthURL, cc.Ports),
		Ports:     cc.Ports,
		Request:   requestOf(cc.Request),
		Ready:     cc.HealthTimeout.Duration(),
		Grace:     cc.Timeouts.Stop.Duration(),
		Clock:     e.wallClock(),
		Log:       log,
		ProbeLog:  probeLog,
	}
}

// evidenceLog opens a redacted evidence log, also streamed to the terminal.
func (e *flow) evidenceLog(name string) (io.Writer, func(), error) {
	f, err := e.s.Sink().Create(filepath.Join(e.s.EvidenceDir, name), 0o644, e.s.Stream)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil //nolint:errcheck // a log: what it could not take is not the smoke's outcome
}

// serverOutcome turns a server smoke report into the smoke outcome.
func (e *flow) serverOutcome(where string, rep *smoke.ServerReport, result map[string]any, log string) receipt.SmokeOutcome {
	out := receipt.SmokeOutcome{Where: where, Result: result, Log: log, Server: rep}
	if rep.Request != nil {
		out.ExitCode = rep.Request.ExitCode
	}
	for _, f := range e.canarySpec().ExpectFields {
		if _, ok := lookup(out.Result, f); !ok {
			out.MissingFields = append(out.MissingFields, f)
		}
	}
	out.Passed = rep.Passed && len(out.MissingFields) == 0
	return out
}

// localTimeout is canary.timeouts.unit or .smoke, or the default.
func localTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return defaultLocalStep
	}
	return d
}

const defaultLocalStep = 10 * time.Minute

// errStepTimeout ends a local step that ran past its canary.timeouts bound.
var errStepTimeout = errors.New("the local step ran past its timeout")

// wallClock is the clock of what runs in real time whatever the
// simulator's speed: the local steps, and the server smoke's own waits
// (health_timeout, the TERM→KILL grace) on both sides. Under --sim the
// engine's clock is scaled (a minute of it lasts 2 s), but a server still
// starts, loads and answers in real time, so those bounds are wall time. A
// test's fake clock is kept, so that tests drive them without waiting.
func (e *flow) wallClock() clock.Clock {
	if _, scaled := e.s.Clock.(*clock.Scaled); scaled {
		return clock.Real{}
	}
	return e.s.Clock
}

// withClockTimeout is context.WithTimeout on wallClock, so that a test's
// clock decides when a local step is too long, and canary.timeouts and
// timeouts.job mean wall time under --sim too.
func (e *flow) withClockTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-ctx.Done():
		case <-e.wallClock().After(d):
			cancel(errStepTimeout)
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

func timedOut(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errStepTimeout) }

// localServerSmoke runs the server smoke contract on this machine: in the
// container built from the repository's Containerfile when an engine
// answers (localContainer decides, as for a plain smoke), else on the host.
func (e *flow) localServerSmoke(ctx context.Context, extra map[string]string, resultPath string, allowFailure bool) error {
	cc := e.canarySpec()
	eng, file, note, err := e.localContainer(ctx)
	if err != nil {
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: err}
	}
	log, closeLog, err := e.evidenceLog("local-smoke.log")
	if err != nil {
		return err
	}
	defer closeLog()
	probe, closeProbe, err := e.evidenceLog("local-request.log")
	if err != nil {
		return err
	}
	defer closeProbe()
	limit := localTimeout(cc.Timeouts.Smoke.Duration())
	// Build and run are bounded together by canary.timeouts.smoke.
	sctx, cancel := e.withClockTimeout(ctx, limit)
	defer cancel()
	where, host, env, err := e.localServerHost(sctx, eng, file, note, resultPath, extra)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.report.Local = receipt.SmokeOutcome{Where: where, ExitCode: -1, Log: "build.log", TimedOut: timedOut(sctx)}
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: %w", ErrLocalFailed, err)}
	}
	if ch, ok := host.(*containerHost); ok {
		// The server is stopped by RunServer; this removes what is
		// left of its container whatever happened.
		defer func() {
			if err := ch.remove(context.WithoutCancel(ctx)); err != nil {
				e.captureFailed("the removal of the local server's container", err)
			}
		}()
	}
	rep, result := smoke.RunServer(sctx, host, e.serverSpec(env, log, probe), cc.ExpectExit)
	late := timedOut(sctx)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if result == nil && (!cc.Request.IsSet() || cc.Request.Command != "") {
		if b := e.keepLocalResult(resultPath); b != nil {
			json.Unmarshal(b, &result) //nolint:errcheck // a result that is not a JSON object leaves it empty: its expected fields are then missing
		}
	}
	out := e.serverOutcome(where, rep, result, "local-smoke.log")
	if late {
		out.Passed, out.TimedOut = false, true
		rep.Error = fmt.Sprintf("the smoke ran past canary.timeouts.smoke %s and was stopped", limit)
	}
	e.report.Local = out
	e.s.Infof("local server smoke: ready=%t after %d attempt(s), stopped by %s, passed=%t %s", rep.Ready, rep.Attempts, rep.Stopped, out.Passed, rep.Error)
	if !out.Passed && !allowFailure {
		why := rep.Error
		if why == "" && len(out.MissingFields) > 0 {
			why = fmt.Sprintf("missing fields %v", out.MissingFields)
		}
		if why == "" && rep.Request != nil {
			why = fmt.Sprintf("request failed: exit %d, status %d %s", rep.Request.ExitCode, rep.Request.Status, rep.Request.Error)
		}
		return &lifecycle.StepError{Step: "canary local", Outcome: receipt.OutcomeLocalFailed, Err: fmt.Errorf("%w: server smoke: %s", ErrLocalFailed, why)}
	}
	return nil
}

// localServerHost is where the local server runs: the container (where is
// the engine's name) or this host ("host-cpu", with the note saying why).
func (e *flow) localServerHost(ctx context.Context, eng *container.Engine, file, note, resultPath string, extra map[string]string) (where string, host smoke.Host, env map[string]string, err error) {
	cmd := e.canarySpec().Smoke
	if eng != nil {
		ch, env, err := e.serverContainer(ctx, eng, file, resultPath, extra)
		if err != nil {
			return eng.Name, nil, nil, err
		}
		e.s.Infof("local server smoke (%s, CPU mode): %s", eng.Name, cmd)
		return eng.Name, ch, env, nil
	}
	env, err = e.localEnv(extra)
	if err != nil {
		return "host-cpu", nil, nil, err
	}
	e.report.LocalNote = note
	e.s.Infof("%s", note)
	e.s.Infof("local server smoke (host-cpu): %s", cmd)
	return "host-cpu", smoke.Local{Dir: e.s.RepoDir}, env, nil
}

// gpuServerSmoke runs the same contract on the instance itself, under
// timeouts.job.
func (e *flow) gpuServerSmoke(ctx context.Context, c *remote.Client, env map[string]string) (receipt.SmokeOutcome, error) {
	log, closeLog, err := e.evidenceLog("test.log")
	if err != nil {
		return receipt.SmokeOutcome{}, err
	}
	defer closeLog()
	probe, closeProbe, err := e.evidenceLog("gpu-request.log")
	if err != nil {
		return receipt.SmokeOutcome{}, err
	}
	defer closeProbe()
	if err := e.s.Record("intent", lifecycle.StepWork, map[string]any{"command": e.canarySpec().Smoke, "server": true}); err != nil {
		return receipt.SmokeOutcome{}, &lifecycle.StepError{Step: lifecycle.StepWork, Err: err}
	}
	// $VASTRUN_RESULT is absolute on the instance, as for a plain smoke.
	prefix := `VASTRUN_RESULT="$PWD/` + lifecycle.ResultPath + `"; export VASTRUN_RESULT; mkdir -p .vastrun; `
	spec := e.serverSpec(env, log, probe)
	spec.Command = prefix + `rm -f "$VASTRUN_RESULT"; ` + spec.Command
	if spec.Request.Command != "" {
		spec.Request.Command = prefix + spec.Request.Command
	}
	jctx, cancel := e.withClockTimeout(ctx, e.jobTimeout())
	rep, result := smoke.RunServer(jctx, remoteHost{c}, spec, e.canarySpec().ExpectExit)
	late := timedOut(jctx)
	cancel()
	if ctx.Err() != nil {
		return receipt.SmokeOutcome{}, ctx.Err()
	}
	if late {
		jerr := e.s.Record("failed", lifecycle.StepWork, map[string]any{"timeout": e.jobTimeout().String()})
		return receipt.SmokeOutcome{}, errors.Join(&lifecycle.StepError{Step: lifecycle.StepWork, Outcome: lifecycle.OutcomeTimeout, Err: fmt.Errorf("the server smoke ran past the job timeout %s", e.jobTimeout())}, jerr)
	}
	if result == nil && (!e.canarySpec().Request.IsSet() || e.canarySpec().Request.Command != "") {
		res := &receipt.TestOutcome{}
		e.s.FetchResult(c, res)
		result = res.Result
	}
	if err := e.s.Record("done", lifecycle.StepWork, map[string]any{"ready": rep.Ready, "passed": rep.Passed}); err != nil {
		return receipt.SmokeOutcome{}, &lifecycle.StepError{Step: lifecycle.StepWork, Err: err}
	}
	out := e.serverOutcome("gpu", rep, result, "test.log")
	e.report.Health = &receipt.HealthCheck{URL: rep.HealthURL, Status: rep.HealthStatus, Attempts: rep.Attempts, Passed: rep.Ready, Error: rep.Error}
	e.s.Infof("GPU server smoke: ready=%t after %d attempt(s), stopped by %s, passed=%t %s", rep.Ready, rep.Attempts, rep.Stopped, out.Passed, rep.Error)
	return out, nil
}

// requestOf is the frozen request in the canary package's terms.
func requestOf(r lifecycle.CanaryRequest) smoke.Request {
	return smoke.Request{Command: r.Command, Method: r.Method, URL: r.URL, Headers: r.Headers, Body: r.Body, ExpectStatus: r.ExpectStatus}
}
