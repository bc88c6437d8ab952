package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/storage"
)

// Host is the server end of the protocol: what the handlers need of the
// process they run in, on the instance. Each handler takes a typed
// request and returns a typed answer; `agent call` (Serve) and the
// agent's own command lines call the same handlers.
type Host struct {
	Layout Layout
	// Getenv reads the process's environment: storage credentials come
	// from here, never from a request.
	Getenv func(string) string
	// Environ is the environment the supervisor (and so the workload) gets.
	Environ []string
	// Executable is this binary, launched as the supervisor by Start.
	Executable string
	Clock      clock.Clock
	Log        io.Writer // the agent's messages (stderr)
	// SelfDestroy sends one destroy of this instance with its own key to
	// the API at apiURL ("": the environment's); gone reports that the API
	// says the instance does not exist (the dead-man switch).
	SelfDestroy func(ctx context.Context, apiURL string) (gone bool, err error)
	// BeforeTransfer, when set, runs before a restore or an upload (the
	// process's collector settings for a bulk transfer).
	BeforeTransfer func()
}

func (h *Host) clock() clock.Clock {
	if h.Clock == nil {
		return clock.Real{}
	}
	return h.Clock
}

// store opens the store at uri with the process's credentials.
func (h *Host) store(uri, prefix string) (checkpoint.Store, error) {
	s, err := storage.Open(uri, storage.Options{Getenv: h.Getenv})
	if err != nil {
		return checkpoint.Store{}, err
	}
	return checkpoint.Store{S: s, Prefix: prefix}, nil
}

// watchOptions are the checkpoint loop's options, paths resolved under
// the login directory.
func (h *Host) watchOptions(w WatchSpec, once bool) (Options, error) {
	cs, err := h.store(w.Store, "")
	if err != nil {
		return Options{}, err
	}
	l := h.Layout
	abs := func(p string) string {
		if p == "" {
			return ""
		}
		return l.Abs(p)
	}
	var destroy func(context.Context) (bool, error)
	if h.SelfDestroy != nil {
		destroy = func(ctx context.Context) (bool, error) { return h.SelfDestroy(ctx, "") }
	}
	return Options{Checkpoints: cs, CheckpointDir: abs(w.Dir), Keep: w.Keep, HeartbeatFile: abs(w.Heartbeat), TTL: durationOf(w.TTL), StatusFile: abs(w.Status),
		Poll: durationOf(w.Poll), Clock: h.clock(), Log: h.Log, Once: once, SelfDestroy: destroy, Quiet: durationOf(w.Quiet),
		Files: w.Files, Check: w.Check, StepFrom: w.StepFrom, LogFile: l.Abs(LogFile), Home: l.Home, Deadline: w.Deadline}, nil
}

func durationOf(d Duration) time.Duration { return time.Duration(d) }

// Status answers a status request.
func (h *Host) Status(_ context.Context, r StatusRequest) (Report, error) {
	return BuildReport(h.Layout, ReportOptions{Touch: r.TouchHeartbeat, LogOffset: r.LogOffset, LogMax: r.LogMax, MetricsOffset: r.MetricsOffset, Clock: h.clock()}), nil
}

// Start launches the supervisor for r, handing it r on its stdin.
func (h *Host) Start(_ context.Context, r StartRequest) (StartResult, error) {
	req, err := EncodeRequest(SuperviseRequest(r))
	if err != nil {
		return StartResult{}, err
	}
	return Start(h.Layout, h.Executable, []string{"agent", "supervise"}, h.Environ, req)
}

// Supervise is the supervisor's life: it runs the workload and the
// checkpoint loop until the workload has exited and its last checkpoints
// are committed, or the dead-man switch fired. It holds the lock Start
// handed over on fd 3 and reports readiness on ready (fd 4).
func (h *Host) Supervise(ctx context.Context, r SuperviseRequest, ready *os.File) error {
	o, err := h.watchOptions(r.Watch, false)
	if err != nil {
		return err
	}
	// fd 3 is the lock Start handed over: held by this process only,
	// never inherited by the workload, so it ends with the agent.
	syscall.CloseOnExec(3)
	sv := &Supervisor{Layout: h.Layout, Command: r.Command, Env: h.Environ, Clock: h.clock(), Ready: ready}
	// The baseline of single-file checkpoints is taken before the
	// workload starts, so a restored file is not snapshot again.
	pre, err := Prepare(o)
	if err != nil {
		return err
	}
	// Reads of a restored checkpoint are watched from before the start.
	pre.resume = watchRestore(h.Layout)
	pid, exited, err := sv.Launch()
	if err != nil {
		pre.resume.close()
		if pre.snap != nil {
			pre.snap.close()
		}
		return err
	}
	pre.resume.started(pid)
	pre.WorkloadPID, pre.Exited = pid, exited
	pre.Finalized = func(int) { sv.Finalize() }
	return watchDone(ctx, pre)
}

// Watch runs the checkpoint loop without a workload (`agent watch`).
func (h *Host) Watch(ctx context.Context, w WatchSpec) error {
	o, err := h.watchOptions(w, false)
	if err != nil {
		return err
	}
	return watchDone(ctx, o)
}

// Commit is one pass of the checkpoint loop.
func (h *Host) Commit(ctx context.Context, r CommitRequest) (CommitResult, error) {
	o, err := h.watchOptions(r.Watch, true)
	if err != nil {
		return CommitResult{}, err
	}
	if err := watchDone(ctx, o); err != nil {
		return CommitResult{}, err
	}
	return CommitResult{Schema: CommitSchema, SchemaVersion: SchemaVersion}, nil
}

// watchDone runs the loop; a self-destroy is its job done (a failed
// destroy stays an error).
func watchDone(ctx context.Context, o Options) error {
	err := Watch(ctx, o)
	if errors.Is(err, ErrSelfDestroyed) {
		return nil
	}
	return err
}

// Restore answers a restore request.
func (h *Host) Restore(ctx context.Context, r RestoreRequest) (RestoreResult, error) {
	h.beforeTransfer()
	cs, err := h.store(r.Store, "")
	if err != nil {
		return RestoreResult{}, err
	}
	return Restore(ctx, h.Layout, cs, r.Dir, r.Files)
}

// Upload commits the output directory as one manifest under "outputs".
func (h *Host) Upload(ctx context.Context, r UploadRequest) (UploadResult, error) {
	h.beforeTransfer()
	cs, err := h.store(r.Store, "outputs")
	if err != nil {
		return UploadResult{}, err
	}
	cm, err := cs.Commit(ctx, h.Layout.Abs(r.Dir), 0, h.clock().Now())
	if err != nil {
		return UploadResult{}, err
	}
	return UploadResult{Schema: UploadSchema, SchemaVersion: SchemaVersion, ManifestSHA256: cm.ManifestSHA256, Files: len(cm.Manifest.Files)}, nil
}

func (h *Host) beforeTransfer() {
	if h.BeforeTransfer != nil {
		h.BeforeTransfer()
	}
}

// Manifest answers a manifest request.
func (h *Host) Manifest(_ context.Context, r ManifestRequest) (ManifestResult, error) {
	files, err := SumTree(h.Layout.Home, r.Paths)
	if err != nil {
		return ManifestResult{}, err
	}
	return ManifestResult{Schema: ManifestSchema, SchemaVersion: SchemaVersion, Files: files}, nil
}

// Arm answers an arm request: it starts `agent deadman` (this binary)
// detached, or hands the running switch its new settings.
func (h *Host) Arm(_ context.Context, r ArmRequest) (ArmResult, error) {
	getenv := h.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return Arm(h.Layout, h.Executable, []string{"agent", "deadman"}, h.Environ, getenv, r, h.clock().Now())
}

// DeadMan is the switch's life (`agent deadman`, started by Arm): it holds
// the lock Arm handed over on fd 3 (lockFD; -1: none) and runs until the
// instance is gone or ctx ends.
func (h *Host) DeadMan(ctx context.Context, lockFD int) error {
	if lockFD >= 0 {
		syscall.CloseOnExec(lockFD) // held by the switch only
	}
	return RunDeadMan(ctx, DeadManOptions{Layout: h.Layout, Clock: h.clock(), Log: h.Log, Destroy: h.SelfDestroy, Getenv: h.Getenv})
}

// RetireLost answers a retire request.
func (h *Host) RetireLost(_ context.Context, _ RetireRequest) (RetireResult, error) {
	return RetireLost(h.Layout, h.clock().Now())
}

// handle is the frame every call shares: decode the body strictly, check
// it, run the handler.
func handle[Req any, Ans any](ctx context.Context, req Request, fn func(context.Context, Req) (Ans, error)) (any, *RemoteError) {
	var body Req
	if e := decodeBody(req, &body); e != nil {
		return nil, e
	}
	a, err := fn(ctx, body)
	if err != nil {
		return nil, &RemoteError{Op: req.Op, Code: CodeFailed, Message: err.Error()}
	}
	return a, nil
}

// Call answers one request document: the typed answer, or the error
// answer for a request it refuses or whose work failed.
func (h *Host) Call(ctx context.Context, doc []byte) (any, *RemoteError) {
	req, e := decodeRequest(doc)
	if e != nil {
		return nil, e
	}
	switch req.Op {
	case OpStatus:
		return handle(ctx, req, h.Status)
	case OpStart:
		return handle(ctx, req, h.Start)
	case OpRestore:
		return handle(ctx, req, h.Restore)
	case OpUpload:
		return handle(ctx, req, h.Upload)
	case OpManifest:
		return handle(ctx, req, h.Manifest)
	case OpCommit:
		return handle(ctx, req, h.Commit)
	case OpRetireLost:
		return handle(ctx, req, h.RetireLost)
	case OpArm:
		return handle(ctx, req, h.Arm)
	}
	return nil, &RemoteError{Op: req.Op, Code: CodeUnsupported, Message: fmt.Sprintf("unknown op %q", req.Op)}
}

// Serve reads one request document from r and writes its answer to w: the
// body of `vastrun agent call`. A refused or failed call is answered with
// an ErrorAnswer and returned as its *RemoteError, so the command exits
// non-zero.
func (h *Host) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	doc, err := io.ReadAll(io.LimitReader(r, maxRequest+1))
	var ans any
	var e *RemoteError
	switch {
	case err != nil:
		e = &RemoteError{Code: CodeInvalid, Message: "read the request: " + err.Error()}
	case len(doc) > maxRequest:
		e = &RemoteError{Code: CodeInvalid, Message: fmt.Sprintf("the request is longer than %d bytes", maxRequest)}
	default:
		ans, e = h.Call(ctx, doc)
	}
	if e != nil {
		ans = ErrorAnswer{Schema: ErrorSchema, SchemaVersion: SchemaVersion, Op: e.Op, Code: e.Code, Message: e.Message}
	}
	if err := json.NewEncoder(w).Encode(ans); err != nil {
		return fmt.Errorf("agent call: write the answer: %w", err)
	}
	if e != nil {
		return e
	}
	return nil
}

// DecodeSupervise reads the request Start hands the supervisor.
func DecodeSupervise(r io.Reader) (SuperviseRequest, error) {
	doc, err := io.ReadAll(io.LimitReader(r, maxRequest+1))
	if err != nil {
		return SuperviseRequest{}, fmt.Errorf("agent supervise: read the request: %w", err)
	}
	req, e := decodeRequest(doc)
	if e == nil && req.Op != OpSupervise {
		e = &RemoteError{Op: req.Op, Code: CodeUnsupported, Message: fmt.Sprintf("op %q is not %q", req.Op, OpSupervise)}
	}
	var s SuperviseRequest
	if e == nil {
		e = decodeBody(req, &s)
	}
	if e != nil {
		return SuperviseRequest{}, fmt.Errorf("agent supervise: %w", e)
	}
	return s, nil
}
