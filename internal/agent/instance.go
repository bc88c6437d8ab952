package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/clock"
)

// Layout is where the agent keeps its state on the instance. Every path
// is absolute, anchored at the login directory (Home), so a workload that
// changes directory cannot move them.
type Layout struct{ Home string }

// NewLayout anchors a layout at dir (the login directory when "").
func NewLayout(dir string) (Layout, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return Layout{}, err
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	return Layout{Home: abs}, err
}

// The agent's files, relative to the login directory.
const (
	StateDir     = ".vastrun"
	LockFile     = ".vastrun/agent.lock"
	WorkloadFile = ".vastrun/workload.json"
	StatusFile   = ".vastrun/agent.json"
	RestoreFile  = ".vastrun/restore.json"
	ProofFile    = ".vastrun/resumed_from"
	LogFile      = ".vastrun/train.log"
	AgentLog     = ".vastrun/agent.log"
	Heartbeat    = ".vastrun/heartbeat"
	ResumeDir    = ".vastrun/restore"
	ResultFile   = ".vastrun/result.json"
	// MetricsFile is where the workload may append JSON lines
	// ($VASTRUN_METRICS), e.g. {"step":100,"loss":0.31}.
	MetricsFile = ".vastrun/metrics.jsonl"
)

// Abs makes p absolute under Home.
func (l Layout) Abs(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(l.Home, p)
}

// PathVars are the workload's VASTRUN_* variables that name paths; the
// agent makes each one absolute before starting the workload.
var PathVars = []string{"VASTRUN_CHECKPOINT_DIR", "VASTRUN_OUTPUT_DIR", "VASTRUN_RESUME_DIR", "VASTRUN_RESUME_PROOF", "VASTRUN_RESULT", "VASTRUN_CHECKPOINT_FILE", "VASTRUN_METRICS"}

// Unbuffered is what the workload's environment gets unless it sets the
// variable itself (even to ""): its output goes to a file, which CPython
// block-buffers, so without it a script's `print` reaches the log (and
// train.step_from, and the live stream) only in 8 KiB blocks or at exit.
// It is the only such variable worth setting: Go, Rust, Node, Java and
// .NET write through or flush each line; Ruby and Perl have no variable;
// stdbuf(1) for C stdio is an LD_PRELOAD that static, setuid and
// self-buffering programs ignore, and a pty would change what programs
// print (progress bars, colours, prompts). docs/train.md says so.
var Unbuffered = []string{"PYTHONUNBUFFERED=1"}

// WorkloadEnv is env (KEY=VALUE) with every path variable made absolute,
// VASTRUN_HOME set to the login directory, and Unbuffered's variables
// added where env does not set them.
func (l Layout) WorkloadEnv(env []string) []string {
	out := make([]string, 0, len(env)+2+len(Unbuffered))
	metrics := false
	set := map[string]bool{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = true
		if k == "VASTRUN_HOME" {
			continue
		}
		metrics = metrics || k == "VASTRUN_METRICS"
		for _, pv := range PathVars {
			if k == pv && v != "" {
				v = l.Abs(v)
			}
		}
		out = append(out, k+"="+v)
	}
	if !metrics { // the agent reads the workload's metrics from here
		out = append(out, "VASTRUN_METRICS="+l.Abs(MetricsFile))
	}
	for _, kv := range Unbuffered {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, "VASTRUN_HOME="+l.Home)
}

// record is the workload's life as written by its supervisor.
type record struct {
	State      string     `json:"state"` // running | exited
	PID        int        `json:"pid"`
	StartTicks uint64     `json:"start_ticks"` // tells a reused pid apart
	Started    time.Time  `json:"started"`
	Ended      *time.Time `json:"ended,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Signal     string     `json:"signal,omitempty"`
	Finalized  bool       `json:"finalized"`
	Error      string     `json:"error,omitempty"`
}

func (l Layout) readRecord() (*record, error) {
	b, err := os.ReadFile(l.Abs(WorkloadFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is unreadable: %w", WorkloadFile, err)
	}
	return &r, nil
}

func (l Layout) writeRecord(r record) error {
	b, _ := json.Marshal(r)
	return writeAtomic(l.Abs(WorkloadFile), b)
}

// ErrAlreadyStarted means a workload runs or ran on this instance.
var ErrAlreadyStarted = errors.New("a workload was already started on this instance")

// lock takes the agent lock without waiting. The supervisor holds it for
// its whole life, so "held" means an agent owns a workload here.
func (l Layout) lock() (*os.File, bool, error) {
	if err := os.MkdirAll(l.Abs(StateDir), 0o755); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(l.Abs(LockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close() // nothing was written; the lock's answer is what counts
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, err
	}
	return f, false, nil
}

// agentRunning reports whether a supervisor holds the lock.
func (l Layout) agentRunning() bool {
	f, held, err := l.lock()
	if err != nil {
		return false
	}
	if f != nil {
		_ = f.Close() // closing releases it; nothing was written
	}
	return held
}

// Start launches the supervisor (exe with args, which must run
// `agent supervise`, reading its request from stdin) detached from this
// SSH session, and returns once the workload has been started or refused.
// It never starts a second workload: the lock and the workload record both
// say whether one exists.
func Start(l Layout, exe string, args []string, env []string, stdin []byte) (StartResult, error) {
	res := StartResult{Schema: StartSchema, SchemaVersion: SchemaVersion}
	lf, held, err := l.lock()
	if err != nil {
		return res, fmt.Errorf("agent start: lock %s: %w", LockFile, err)
	}
	if held {
		res.Refused = "a workload is already running under its agent on this instance"
		return res, nil
	}
	// Our copy of the lock: the supervisor holds it on its own descriptor
	// (fd 3). Closing ours releases nothing of its, and nothing was written.
	defer func() { _ = lf.Close() }()
	if r, err := l.readRecord(); err != nil || r != nil {
		res.Refused = ErrAlreadyStarted.Error()
		if err != nil {
			res.Refused += " (" + err.Error() + ")"
		}
		return res, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return res, err
	}
	defer func() { _ = pr.Close() }() // only read
	logf, err := os.OpenFile(l.Abs(AgentLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		_ = pw.Close() // never written; the open's error is the one reported
		return res, err
	}
	// Handed to the supervisor, which writes it on its own descriptors;
	// this process writes nothing to it.
	defer func() { _ = logf.Close() }()
	// The request goes through a pipe of our own, not exec's copier: the
	// supervisor is never waited for, and the copier ends only with Wait.
	ir, iw, err := os.Pipe()
	if err != nil {
		_ = pw.Close() // never written; the pipe's error is the one reported
		return res, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = l.Home
	cmd.Env = env
	cmd.Stdin = ir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{lf, pw} // fd 3: the lock, handed over; fd 4: ready
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	// This process's copies of the supervisor's ends: closed so that the
	// ready line's read ends when the supervisor's end closes. Neither is
	// written here.
	_ = pw.Close()
	_ = ir.Close()
	if err != nil {
		_ = iw.Close() // never written; the start's error is the one reported
		return res, fmt.Errorf("agent start: %w", err)
	}
	_ = cmd.Process.Release() // only frees this process's handle: the supervisor is never waited for
	// Written after the start: a request larger than the pipe's buffer
	// waits for the supervisor to read it; one that died makes this fail.
	_, werr := iw.Write(stdin)
	if cerr := iw.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return res, fmt.Errorf("agent start: hand the supervisor its request: %w (see %s)", werr, AgentLog)
	}
	line, _ := bufio.NewReader(io.LimitReader(pr, 1<<16)).ReadString('\n')
	var ready struct {
		PID   int    `json:"pid"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil {
		return res, fmt.Errorf("agent start: the supervisor did not report (see %s)", AgentLog)
	}
	if ready.Error != "" {
		return res, fmt.Errorf("agent start: %s", ready.Error)
	}
	res.Started, res.PID = true, ready.PID
	return res, nil
}

// Supervisor runs the workload for `agent supervise`: started by Start,
// it holds the lock on fd 3 and reports readiness on fd 4.
type Supervisor struct {
	Layout  Layout
	Command string
	Env     []string
	Clock   clock.Clock
	// Ready, when set, receives one JSON line once the workload started
	// (or failed to), and is closed: fd 4 when started by Start.
	Ready *os.File
}

// Launch starts the workload and records it. The returned channel delivers
// its exit code once the record says so.
func (s *Supervisor) Launch() (pid int, exited <-chan int, err error) {
	ready := s.Ready
	report := func(pid int, err error) {
		if ready == nil {
			return
		}
		msg := map[string]any{"pid": pid}
		if err != nil {
			msg["error"] = err.Error()
		}
		b, _ := json.Marshal(msg)
		_, werr := ready.Write(append(b, '\n'))
		if cerr := ready.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			// agent start then says the supervisor did not report, and
			// points at this log (the supervisor's stderr).
			fmt.Fprintf(os.Stderr, "vastrun agent: report the start to agent start: %v\n", werr)
		}
	}
	l := s.Layout
	logf, err := os.OpenFile(l.Abs(LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		report(0, err)
		return 0, nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", s.Command)
	cmd.Dir = l.Home
	cmd.Env = l.WorkloadEnv(s.Env)
	for _, kv := range cmd.Env {
		if k, v, _ := strings.Cut(kv, "="); (k == "VASTRUN_CHECKPOINT_DIR" || k == "VASTRUN_OUTPUT_DIR") && v != "" {
			if err := os.MkdirAll(v, 0o755); err != nil {
				// The workload may create it itself, or fail saying so.
				fmt.Fprintf(os.Stderr, "vastrun agent: create %s %s: %v\n", k, v, err)
			}
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group: signals reach all of it
	if err := cmd.Start(); err != nil {
		_ = logf.Close() // nothing was written to it; the start's error is the one reported
		code := 127
		now := s.Clock.Now().UTC()
		if rerr := l.writeRecord(record{State: "exited", Started: now, Ended: &now, ExitCode: &code, Finalized: true, Error: err.Error()}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("record the failed start: %w", rerr))
		}
		report(0, err)
		return 0, nil, err
	}
	_ = logf.Close() // the workload writes it on its own descriptors; this process wrote nothing
	pid = cmd.Process.Pid
	rec := record{State: "running", PID: pid, StartTicks: startTicks(pid), Started: s.Clock.Now().UTC()}
	if err := l.writeRecord(rec); err != nil {
		// No record, no workload: one running unrecorded could be
		// started again beside itself.
		if kerr := cmd.Process.Kill(); kerr != nil {
			err = errors.Join(err, fmt.Errorf("stop the unrecorded workload (pid %d): %w", pid, kerr))
		}
		report(0, err)
		return 0, nil, err
	}
	report(pid, nil)
	ch := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code, sig := exitStatus(cmd, err)
		now := s.Clock.Now().UTC()
		rec.State, rec.Ended, rec.ExitCode, rec.Signal = "exited", &now, &code, sig
		if err := l.writeRecord(rec); err != nil {
			fmt.Fprintf(os.Stderr, "vastrun agent: record the workload's exit: %v\n", err)
		}
		ch <- code
	}()
	return pid, ch, nil
}

// Finalize marks the record: the final checkpoint pass after the exit is done.
func (s *Supervisor) Finalize() {
	r, err := s.Layout.readRecord()
	if err != nil || r == nil {
		return
	}
	r.Finalized = true
	if err := s.Layout.writeRecord(*r); err != nil {
		fmt.Fprintf(os.Stderr, "vastrun agent: record the final checkpoint pass: %v\n", err)
	}
}

func exitStatus(cmd *exec.Cmd, err error) (int, string) {
	if cmd.ProcessState == nil {
		return 255, ""
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal().String()
	}
	return cmd.ProcessState.ExitCode(), ""
}

// startTicks is the process's start time in clock ticks since boot
// (/proc/PID/stat field 22), 0 when unknown.
func startTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(fields[19], 10, 64)
	return n
}

// alive reports whether pid is still the process the record names.
func alive(pid int, ticks uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return ticks == 0 || startTicks(pid) == ticks
}

// ReportOptions are the inputs of BuildReport.
type ReportOptions struct {
	Touch     bool  // touch the heartbeat after reading its age (controllers before the heartbeat channel)
	LogOffset int64 // return the log from here
	LogMax    int64 // at most this much of it
	// MetricsOffset, with LogMax, returns the metrics file from here.
	MetricsOffset int64
	Clock         clock.Clock
}

// BuildReport answers `agent status --json` from the agent's files.
func BuildReport(l Layout, o ReportOptions) Report {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	now := o.Clock.Now()
	r := Report{Schema: StatusSchema, SchemaVersion: SchemaVersion, Time: now.UTC(), Home: l.Home,
		Agent: AgentInfo{Errors: []string{}}, Checkpoint: Progress{LastStep: -1, Committed: []int64{}, Local: []int64{}}}
	r.Agent.Running = l.agentRunning()
	rec, err := l.readRecord()
	switch {
	case err != nil:
		r.Workload = Workload{State: WorkloadLost, Error: err.Error()}
		r.Agent.Errors = append(r.Agent.Errors, err.Error())
	case rec == nil:
		r.Workload = Workload{State: WorkloadAbsent}
	default:
		w := Workload{PID: rec.PID, Started: &rec.Started, Ended: rec.Ended, Signal: rec.Signal, Finalized: rec.Finalized, Error: rec.Error}
		switch {
		case rec.State == "exited" && rec.ExitCode != nil:
			w.State, w.ExitCode = WorkloadExited, rec.ExitCode
			if !r.Agent.Running {
				w.Finalized = true // nobody is left to finalize it
			}
		case rec.State == "running" && r.Agent.Running:
			w.State = WorkloadRunning
		case rec.State == "running" && alive(rec.PID, rec.StartTicks):
			w.State = WorkloadRunning
			r.Agent.Errors = append(r.Agent.Errors, "the agent is not running: the workload runs unsupervised and its checkpoints are not committed")
		default:
			w.State, w.Error = WorkloadLost, "the agent and the workload are gone and no exit status was recorded"
		}
		r.Workload = w
	}
	var observed *Observed
	if b, err := os.ReadFile(l.Abs(StatusFile)); err == nil {
		if st, err := ReadStatus(b); err == nil {
			r.Checkpoint = Progress{LastStep: st.LastStep, LastSHA256: st.LastSHA256, Committed: st.Committed, Local: st.Local, LastSize: st.LastSize, StepSource: st.StepSource}
			r.Agent.Warnings, observed = st.Warnings, st.Observed
			if r.Checkpoint.Committed == nil {
				r.Checkpoint.Committed = []int64{}
			}
			if r.Checkpoint.Local == nil {
				r.Checkpoint.Local = []int64{}
			}
			if st.LastError != "" {
				r.Agent.Errors = append(r.Agent.Errors, st.LastError)
			}
			r.Agent.SelfDestroyed, r.Agent.SelfDestroyReason = st.SelfDestroyed, st.SelfDestroyWhy
			r.Disk = diskOf(l.Home, st.LastSize, st.FilesMode)
		} else {
			r.Agent.Errors = append(r.Agent.Errors, StatusFile+" is unreadable: "+err.Error())
		}
	} else {
		r.Disk = diskOf(l.Home, 0, false)
	}
	r.Resume = readResume(l, observed)
	// Touch is what controllers before the heartbeat channel (heartbeat.go)
	// asked for with every poll; it is still honoured.
	if o.Touch {
		age, err := touchHeartbeat(l, now)
		r.HeartbeatAgeSeconds = age
		if err != nil {
			r.Agent.Errors = append(r.Agent.Errors, err.Error())
		}
	} else {
		r.HeartbeatAgeSeconds = heartbeatAge(l, now)
	}
	r.Log = readLog(l.Abs(LogFile), o.LogOffset, o.LogMax)
	if o.LogMax > 0 {
		m := readLog(l.Abs(MetricsFile), o.MetricsOffset, o.LogMax)
		r.Metrics = &m
	}
	return r
}

// readResume validates the workload's proof (a step number, nothing
// else) and, without one, judges what the agent observed (observe.go).
func readResume(l Layout, obs *Observed) *Resume {
	b, err := os.ReadFile(l.Abs(RestoreFile))
	if err != nil {
		return nil
	}
	var rr RestoreResult
	if json.Unmarshal(b, &rr) != nil || rr.Step < 0 {
		return nil
	}
	res := &Resume{RestoredStep: rr.Step}
	if obs != nil {
		res.Read, res.FirstStep, res.ObservedStep, res.Unobservable = obs.Read, obs.FirstStep, obs.StepAfterRead, obs.Unobservable
	}
	if f, err := os.Open(l.Abs(ProofFile)); err == nil {
		p, _ := io.ReadAll(io.LimitReader(f, 65))
		_ = f.Close() // only read
		text := strings.TrimSpace(string(p))
		n, err := strconv.ParseInt(text, 10, 64)
		switch {
		case text == "":
		case len(p) > 64 || err != nil:
			res.Error = fmt.Sprintf("the resume proof is not a step number: %q", truncate(text, 40))
		default:
			res.ReportedStep, res.Proven = &n, n == rr.Step
			if res.Proven {
				res.ProvenBy = ProvenReported
			}
		}
	}
	// A proof the workload wrote is its word: a wrong one is not outvoted.
	if res.ReportedStep == nil && res.Error == "" && res.Read != "" && res.ObservedStep != nil &&
		*res.ObservedStep >= rr.Step && !res.Regressed() {
		res.Proven, res.ProvenBy = true, ProvenObserved
	}
	return res
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func readLog(path string, off, limit int64) LogChunk {
	c := LogChunk{Offset: off, Data: []byte{}}
	f, err := os.Open(path)
	if err != nil {
		return c
	}
	defer func() { _ = f.Close() }() // only read
	fi, err := f.Stat()
	if err != nil {
		return c
	}
	c.Size = fi.Size()
	if limit <= 0 || off >= c.Size || off < 0 {
		return c
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, off, min(limit, c.Size-off)))
	c.Data = b
	return c
}

// diskOf reports free space and whether another checkpoint still fits:
// a save needs room for one more checkpoint (two with single-file
// snapshots, which copy the file) plus a margin.
func diskOf(dir string, lastSize int64, files bool) Disk {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Disk{}
	}
	d := Disk{FreeBytes: st.Bavail * uint64(st.Bsize), TotalBytes: st.Blocks * uint64(st.Bsize)}
	d.Low, d.Full = diskVerdict(d.FreeBytes, lastSize, files)
	return d
}

func diskVerdict(free uint64, lastSize int64, files bool) (low, full bool) {
	if lastSize <= 0 {
		return false, false
	}
	per := uint64(lastSize)
	if files {
		per *= 2
	}
	const margin = 64 << 20
	return free < 3*per+margin, free < per+margin
}

// Restore restores the newest committed checkpoint that verifies into dir
// and records it for the resume proof. With files (train.checkpoint_file),
// each restored file that the glob matches is also put back at its
// original path under Home, where the script's own resume logic looks.
func Restore(ctx context.Context, l Layout, cs checkpoint.Store, dir, files string) (RestoreResult, error) {
	res := RestoreResult{Schema: RestoreSchema, SchemaVersion: SchemaVersion, Step: -1, Skipped: []checkpoint.Skip{}}
	dir = l.Abs(dir)
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(dir)), 0o755); err != nil {
		return res, err
	}
	cm, skipped, err := cs.RestoreLatest(ctx, dir)
	if skipped != nil {
		res.Skipped = skipped
	}
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Step, res.ManifestSHA256 = cm.Step, cm.ManifestSHA256
	if files != "" {
		for _, f := range cm.Manifest.Files {
			if ok, _ := filepath.Match(filepath.Clean(files), filepath.FromSlash(f.Path)); !ok {
				continue
			}
			dst := l.Abs(filepath.FromSlash(f.Path))
			tmp := dst + ".vastrun-restore"
			if err := copyFile(filepath.Join(dir, filepath.FromSlash(f.Path)), tmp); err != nil {
				return res, fmt.Errorf("restore checkpoint %d: put back %s: %w", cm.Step, f.Path, err)
			}
			if err := os.Rename(tmp, dst); err != nil {
				return res, fmt.Errorf("restore checkpoint %d: put back %s: %w", cm.Step, f.Path, err)
			}
			res.Placed = append(res.Placed, f.Path)
		}
	}
	// A proof left from before is not this restore's: one that stays
	// would be read as the workload's word on this one.
	if err := os.Remove(l.Abs(ProofFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("restore checkpoint %d: remove the earlier resume proof: %w", cm.Step, err)
	}
	b, _ := json.Marshal(res)
	if err := writeAtomic(l.Abs(RestoreFile), b); err != nil {
		return res, err
	}
	return res, nil
}
