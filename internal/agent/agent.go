// Package agent is what `vastrun agent` runs on a training instance. The
// agent owns the workload's life: it starts train.command itself (its own
// process group, anchored at the login directory whatever the command does
// to its directory or environment), waits for it, and records its exit
// status from wait(2). Beside it, it commits every complete checkpoint the
// workload writes to durable storage, prunes old ones in the store and on
// the instance, reports its progress through a typed, versioned status
// (proto.go). Every rental's dead-man switch is `agent deadman`
// (deadman.go); Watch keeps a switch of its own for `agent watch --ttl`,
// which, once fired, destroys its instance until the API says it is gone,
// as that one does.
//
// What counts as complete (never a half-written file):
//   - a step directory holding the .complete marker, always;
//   - with Quiet, a step directory without the marker whose files have not
//     changed for Quiet and that no process has open for writing (/proc),
//     while the workload runs; after a clean exit the quiet wait is waived
//     (the writer is gone); after a failed exit, never (a writer killed
//     mid-file leaves a quiet, closed, truncated file);
//   - with Files (single-file checkpoints saved in place), the matched files
//     once they changed, are stable across two looks Quiet apart, are open
//     for writing by no process, and pass Check; they are copied into a
//     numbered step directory, and that copy is what is committed.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/clock"
)

// Options configure Watch.
type Options struct {
	Checkpoints   checkpoint.Store
	CheckpointDir string
	Keep          int
	HeartbeatFile string        // touched by the controller
	TTL           time.Duration // 0 disables the heartbeat check
	Deadline      time.Time     // zero disables
	StatusFile    string
	Poll          time.Duration
	Clock         clock.Clock
	// SelfDestroy sends one destroy of this instance (with
	// CONTAINER_API_KEY); gone reports that the API says it does not exist.
	SelfDestroy func(ctx context.Context) (gone bool, err error)
	Log         io.Writer
	Once        bool // commit what is complete, then return
	// Quiet, when positive, also counts a step directory without the
	// .complete marker as complete once none of its files has changed for
	// this long and none is open for writing (for workloads that cannot
	// write a marker).
	Quiet time.Duration

	// Files, when set, is a glob (relative to Home) of single-file
	// checkpoints the workload overwrites in place.
	Files string
	// Check is a shell command run with the snapshot's path as $1; a
	// non-zero exit means the file is not loadable and is not committed.
	Check string
	// StepFrom says where a snapshot's step comes from: "json:FIELD" (the
	// newest JSON line of the log with that numeric field), "regex:RE" (the
	// last match of RE's first group in the log), or "" (a counter).
	StepFrom string
	LogFile  string // the workload's log, for StepFrom
	Home     string // the anchor for relative paths

	// Exited delivers the supervised workload's exit code; WorkloadPID is
	// its pid. Watch then runs the final pass and calls Finalized.
	Exited      <-chan int
	WorkloadPID int
	Finalized   func(code int)

	snap   *snapshotter // set by Prepare
	resume *resumeWatch // set by the supervisor where it restored a checkpoint
}

// Status is what the agent writes to its status file (read back by
// `agent status`; not itself the protocol).
type Status struct {
	Schema         string    `json:"schema"`
	LastStep       int64     `json:"last_committed_step"`
	LastSHA256     string    `json:"last_manifest_sha256,omitempty"`
	LastSize       int64     `json:"last_size_bytes"`
	Committed      []int64   `json:"committed_steps"`
	Local          []int64   `json:"local_steps"`
	Time           time.Time `json:"time"`
	LastError      string    `json:"last_error,omitempty"`
	Warnings       []string  `json:"warnings,omitempty"`
	SelfDestroyed  bool      `json:"self_destroyed,omitempty"`
	SelfDestroyWhy string    `json:"self_destroy_reason,omitempty"`
	FilesMode      bool      `json:"files_mode,omitempty"`
	// StepSource is where the last snapshot's step came from.
	StepSource string `json:"step_source,omitempty"`
	// Observed is what the agent saw of the workload after a restore.
	Observed *Observed `json:"resume_observed,omitempty"`
}

// ErrSelfDestroyed is returned after the dead-man switch fired and the
// instance was destroyed.
var ErrSelfDestroyed = errors.New("agent destroyed its own instance")

// ErrSelfDestroyFailed is returned when the dead-man switch fired and Watch
// ended (its context did) before the API said the instance was gone.
var ErrSelfDestroyFailed = errors.New("agent could not destroy its own instance")

// phase is where the workload is, for the completeness rules.
type phase int

const (
	phaseRunning phase = iota
	phaseExitedOK
	phaseExitedFailed
)

type watcher struct {
	o       Options
	done    map[int64]bool
	status  Status
	started time.Time
	warned  map[string]bool
	snap    *snapshotter
	dirs    map[int64]bool // step directories seen, for the resume watch
}

// Prepare takes the baseline of single-file checkpoints, before the
// workload starts: what is already there (a restored checkpoint) is not a
// new save. Watch calls it itself when it was not called.
func Prepare(o Options) (Options, error) {
	o = defaults(o)
	if o.Files != "" {
		if _, err := filepath.Match(o.Files, ""); err != nil {
			return o, fmt.Errorf("checkpoint file pattern %q: %w", o.Files, err)
		}
		o.snap = newSnapshotter(o)
	}
	return o, nil
}

func defaults(o Options) Options {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Poll <= 0 {
		o.Poll = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// Watch runs until ctx ends, the switch fires, or (Once) one pass is done.
func Watch(ctx context.Context, o Options) error {
	o = defaults(o)
	if o.snap == nil && o.Files != "" {
		var err error
		if o, err = Prepare(o); err != nil {
			return err
		}
	}
	w := &watcher{o: o, done: map[int64]bool{}, started: o.Clock.Now(), warned: map[string]bool{}, dirs: map[int64]bool{},
		status: Status{Schema: "vastrun.agent/v1", LastStep: -1, Committed: []int64{}, Local: []int64{}, FilesMode: o.Files != ""}}
	defer o.resume.close()
	if list, err := o.Checkpoints.Committed(ctx); err == nil {
		for _, c := range list {
			w.done[c.Step] = true
		}
		if len(list) > 0 {
			w.setLast(list[0])
		}
	}
	w.snap = o.snap
	if w.snap != nil {
		defer w.snap.close()
		w.snap.warn, w.snap.onStep = w.warnOnce, o.resume.step
		if w.snap.why != "" {
			sayf(o.Log, "%s: saves of %s are seen by polling every %s", w.snap.why, o.Files, o.Poll)
		}
	}
	if entries, err := os.ReadDir(o.CheckpointDir); err == nil { // there before the workload: not its steps
		for _, e := range entries {
			if step, err := strconv.ParseInt(e.Name(), 10, 64); err == nil {
				w.dirs[step] = true
			}
		}
	}
	exited := o.Exited
	code, ph := 0, phaseRunning
	for {
		if ph == phaseRunning && exited != nil {
			select {
			case code = <-exited:
				ph = phaseOf(code)
			default:
			}
		}
		w.pass(ctx, ph)
		if ph != phaseRunning && exited != nil {
			sayf(o.Log, "the workload exited with status %d; final checkpoint pass done", code)
			if o.Finalized != nil {
				o.Finalized(code)
			}
			exited = nil // keep watching the heartbeat: the controller tears down
		}
		if o.Once {
			return nil
		}
		if why := w.deadMan(); why != "" {
			w.status.SelfDestroyed, w.status.SelfDestroyWhy = true, why
			w.writeStatus()
			// Never given up: destroyed again, with backoff, until gone.
			err := DestroyUntilGone(ctx, DeadManOptions{Clock: o.Clock, Log: o.Log}, o.SelfDestroy, why, 1)
			if err != nil {
				return fmt.Errorf("%w (%s): %w", ErrSelfDestroyFailed, why, err)
			}
			return fmt.Errorf("%w: %s", ErrSelfDestroyed, why)
		}
		var exitCh <-chan int
		if ph == phaseRunning {
			exitCh = exited // an exit wakes the loop at once: noticed within one poll
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.Clock.After(o.Poll):
		case c := <-exitCh:
			code, ph = c, phaseOf(c)
		}
	}
}

func phaseOf(code int) phase {
	if code == 0 {
		return phaseExitedOK
	}
	return phaseExitedFailed
}

func (w *watcher) setLast(c checkpoint.Committed) {
	w.status.LastStep, w.status.LastSHA256 = c.Step, c.ManifestSHA256
	var size int64
	for _, f := range c.Manifest.Files {
		size += f.Size
	}
	w.status.LastSize = size
}

// deadMan says why the instance should destroy itself, or "".
func (w *watcher) deadMan() string {
	now := w.o.Clock.Now()
	if !w.o.Deadline.IsZero() && !now.Before(w.o.Deadline) {
		return "the runtime deadline " + w.o.Deadline.UTC().Format(time.RFC3339) + " passed"
	}
	if w.o.TTL <= 0 {
		return ""
	}
	last := w.started
	if fi, err := os.Stat(w.o.HeartbeatFile); err == nil && fi.ModTime().After(last) {
		last = fi.ModTime()
	}
	if lapse := now.Sub(last); lapse > w.o.TTL {
		return fmt.Sprintf("no controller heartbeat for %s (TTL %s)", lapse.Round(time.Second), w.o.TTL)
	}
	return ""
}

func (w *watcher) logSize() int64 {
	if fi, err := os.Stat(w.o.LogFile); err == nil {
		return fi.Size()
	}
	return 0
}

// sayf writes one line to the agent's log. The log is the only place to
// tell: a line it refuses has nowhere else to go, and the agent goes on.
func sayf(log io.Writer, format string, args ...any) {
	fmt.Fprintf(log, "vastrun agent: %s\n", fmt.Sprintf(format, args...)) //nolint:errcheck // see above
}

func (w *watcher) warnOnce(key, msg string) {
	if w.warned[key] {
		return
	}
	w.warned[key] = true
	sayf(w.o.Log, "%s", msg)
	w.status.Warnings = append(w.status.Warnings, msg)
}

// pass snapshots single-file checkpoints, commits complete step
// directories in step order, prunes, and writes the status.
func (w *watcher) pass(ctx context.Context, ph phase) {
	if w.snap != nil && ph != phaseExitedFailed {
		if err := w.snap.take(ph, w.lastDone(), w.workloadDying); err != nil {
			w.status.LastError = err.Error()
			sayf(w.o.Log, "%v", err)
		}
		w.status.StepSource = w.snap.source
	}
	w.commitComplete(ctx, ph)
	w.pruneLocal()
	w.status.Observed = w.o.resume.observed()
	w.writeStatus()
}

func (w *watcher) lastDone() int64 {
	last := int64(-1)
	for s := range w.done {
		last = max(last, s)
	}
	return last
}

// workloadDying: the workload's process is a zombie or gone although its
// exit has not been delivered yet. A file it closed by dying is not one it
// finished, so quiet candidates wait for the exit status.
func (w *watcher) workloadDying() bool {
	if w.o.WorkloadPID <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.o.WorkloadPID))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	st := s[i+2]
	return st == 'Z' || st == 'X'
}

func (w *watcher) commitComplete(ctx context.Context, ph phase) {
	entries, err := os.ReadDir(w.o.CheckpointDir)
	if err != nil {
		return
	}
	var steps []int64
	var quiet []string
	for _, e := range entries {
		step, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || !e.IsDir() {
			if !strings.HasPrefix(e.Name(), ".") {
				w.warnOnce("name:"+e.Name(), fmt.Sprintf("ignoring %s in the checkpoint directory: only numbered STEP directories are checkpoints (for a file saved in place, set train.checkpoint_file)", e.Name()))
			}
			continue
		}
		if !w.dirs[step] { // a step the workload wrote: the resume watch hears of it
			w.dirs[step] = true
			if w.snap == nil {
				w.o.resume.step(step, w.logSize())
			}
		}
		if w.done[step] {
			continue
		}
		dir := filepath.Join(w.o.CheckpointDir, e.Name())
		if _, err := os.Stat(filepath.Join(dir, checkpoint.CompleteMarker)); err == nil {
			steps = append(steps, step)
			continue
		}
		if w.o.Quiet <= 0 || ph == phaseExitedFailed {
			continue
		}
		if ph == phaseRunning && w.quietSince(dir) < w.o.Quiet {
			continue
		}
		quiet = append(quiet, dir)
		steps = append(steps, step)
	}
	if len(quiet) > 0 {
		open := openForWriting(quiet)
		dying := ph == phaseRunning && w.workloadDying()
		kept := steps[:0]
		for _, step := range steps {
			dir := filepath.Join(w.o.CheckpointDir, strconv.FormatInt(step, 10))
			if _, err := os.Stat(filepath.Join(dir, checkpoint.CompleteMarker)); err != nil {
				if p, busy := open[dir]; busy {
					w.warnOnce("open:"+p, fmt.Sprintf("not committing step %d yet: %s is open for writing", step, p))
					continue
				}
				if dying {
					continue
				}
			}
			kept = append(kept, step)
		}
		steps = kept
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	for _, step := range steps {
		cm, err := w.o.Checkpoints.Commit(ctx, filepath.Join(w.o.CheckpointDir, strconv.FormatInt(step, 10)), step, w.o.Clock.Now())
		if err != nil {
			w.status.LastError = err.Error()
			sayf(w.o.Log, "%v", err)
			break // retry next poll; never skip ahead of an uncommitted step
		}
		w.done[step] = true
		w.setLast(cm)
		w.status.LastError = ""
		sayf(w.o.Log, "committed checkpoint %d (%d files)", step, len(cm.Manifest.Files))
		if w.o.Keep > 0 {
			if err := w.o.Checkpoints.Prune(ctx, w.o.Keep); err != nil {
				sayf(w.o.Log, "prune: %v", err)
			}
		}
	}
	w.status.Committed = w.status.Committed[:0]
	for s := range w.done {
		w.status.Committed = append(w.status.Committed, s)
	}
	sort.Slice(w.status.Committed, func(i, j int) bool { return w.status.Committed[i] < w.status.Committed[j] })
}

// pruneLocal deletes committed step directories on the instance beyond the
// newest Keep committed ones, so the disk does not fill with checkpoints
// the store already holds. Uncommitted directories are never touched.
func (w *watcher) pruneLocal() {
	entries, err := os.ReadDir(w.o.CheckpointDir)
	if err != nil {
		return
	}
	var committed []int64
	w.status.Local = w.status.Local[:0]
	for _, e := range entries {
		step, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || !e.IsDir() {
			continue
		}
		if w.done[step] {
			committed = append(committed, step)
		}
	}
	sort.Slice(committed, func(i, j int) bool { return committed[i] > committed[j] })
	keep := max(w.o.Keep, 1)
	for i, step := range committed {
		if i < keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.o.CheckpointDir, strconv.FormatInt(step, 10))); err != nil {
			sayf(w.o.Log, "prune local checkpoint %d: %v", step, err)
		}
	}
	entries, _ = os.ReadDir(w.o.CheckpointDir)
	for _, e := range entries {
		if step, err := strconv.ParseInt(e.Name(), 10, 64); err == nil && e.IsDir() {
			w.status.Local = append(w.status.Local, step)
		}
	}
	sort.Slice(w.status.Local, func(i, j int) bool { return w.status.Local[i] < w.status.Local[j] })
}

// quietSince is how long ago the newest file in dir changed (0 if empty).
func (w *watcher) quietSince(dir string) time.Duration {
	var newest time.Time
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error { //nolint:errcheck // the function returns nil for every path, so WalkDir does too
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				found = true
				if fi.ModTime().After(newest) {
					newest = fi.ModTime()
				}
			}
		}
		return nil
	})
	if !found {
		return 0
	}
	return w.o.Clock.Now().Sub(newest)
}

func (w *watcher) writeStatus() {
	if w.o.StatusFile == "" {
		return
	}
	w.status.Time = w.o.Clock.Now().UTC()
	b, _ := json.Marshal(w.status)
	if err := writeAtomic(w.o.StatusFile, b); err != nil {
		// Once: the next pass tries again, and the status carries the
		// warning once it can be written.
		w.warnOnce("status", fmt.Sprintf("could not write the status file %s (the controller reads a stale one): %v", w.o.StatusFile, err))
	}
}

// writeAtomic replaces path with b so that a reader sees the old or the
// new content, never a mixture.
// Each writer has its own temporary file: the supervisor and a
// controller-requested `watch --once` may write the status at once.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(f.Name()) //nolint:errcheck // the write's error is the one to report; a leftover is a hidden temporary file
		return werr
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name()) //nolint:errcheck // as above
		return err
	}
	return os.Rename(f.Name(), path)
}

// ReadStatus parses a status file's content.
func ReadStatus(b []byte) (Status, error) {
	var s Status
	err := json.Unmarshal(b, &s)
	return s, err
}
