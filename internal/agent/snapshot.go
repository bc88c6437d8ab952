package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
)

type fileSig struct {
	size  int64
	mtime time.Time
	ino   uint64
}

type look struct {
	sig fileSig
	at  time.Time
}

// snapshotter turns single-file checkpoints saved in place into numbered
// step directories, one per completed save.
//
// With train.step_from, a snapshot's step is the one the script was at when
// it saved, not when the snapshot is taken: each save is marked the moment
// it is seen (inotify: the writer closed the file, or renamed it into
// place; else the first poll that sees it changed) with the log's size
// then. A save takes the newest step line printed before it that no
// earlier save took (a script that prints its step, then saves), else the
// first printed after it (one that saves, then prints): each line labels
// at most one save, saves in order.
type snapshotter struct {
	o    Options
	seen map[string]fileSig // content already snapshot, restored, or rejected
	look map[string]look    // the last observation of each file

	steps *stepLog // train.step_from over the log; nil without one

	mu       sync.Mutex
	events   []saveMark // saves inotify saw, not yet absorbed
	watchErr string     // the first watch that failed ("-": reported)
	in       *inotify   // nil: polling only
	why      string     // why there is no inotify

	marks    []*saveMark
	consumed int64 // the log offset of the last step line a save took (-1: none)

	source   string    // where the last snapshot's step came from
	pendAt   time.Time // when the newest complete save began waiting for its step line
	repeated int       // saves whose step was not after the last committed one
	warn     func(key, msg string)
	onStep   func(step, off int64) // every step the workload reports, for the resume watch
}

// saveMark is one save: the file, its signature, the log's size then.
type saveMark struct {
	path     string
	sig      fileSig
	logOff   int64
	label    int64
	resolved bool
}

func newSnapshotter(o Options) *snapshotter {
	s := &snapshotter{o: o, seen: map[string]fileSig{}, look: map[string]look{}, consumed: -1,
		warn: func(string, string) {}, onStep: func(int64, int64) {}}
	// What is there before the workload starts (a restored checkpoint) is
	// not a new save.
	for _, m := range s.matches() {
		if sg, err := statSig(m); err == nil {
			s.seen[m] = sg
		}
	}
	if o.StepFrom != "" {
		// The log from here on is this workload's: an earlier one's lines
		// (the same instance, restarted) label none of its saves.
		s.steps = newStepLog(o.StepFrom, s.abs(o.LogFile))
		s.steps.off = s.logSize()
	}
	if in, err := newInotify(s.onEvent); err == nil {
		s.in = in
		s.rewatch()
	} else {
		s.why = err.Error()
	}
	return s
}

// close stops the inotify reader.
func (s *snapshotter) close() {
	if s.in != nil {
		s.in.close()
		s.in = nil
	}
}

// rewatch watches the directories the pattern's files are in. One that
// does not exist yet (a script creates out/ at its first save) is waited
// for on its nearest existing parent, and watched the moment it appears;
// a file already closed in it by then is marked as the poll finds it.
func (s *snapshotter) rewatch() {
	if s.in == nil {
		return
	}
	dir := filepath.Dir(s.abs(s.o.Files))
	if strings.ContainsAny(dir, "*?[") {
		ds, _ := filepath.Glob(dir)
		for _, d := range ds {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				s.watch(d, evSaved)
			}
		}
		return
	}
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		s.watch(dir, evSaved)
		return
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			s.watch(p, evDirMade)
			return
		}
		if p == filepath.Dir(p) {
			return
		}
	}
}

// watch adds one watch; a directory that cannot be watched (inotify's
// limits) is polled, and the agent log says so once.
func (s *snapshotter) watch(dir string, mask uint32) {
	if err := s.in.add(dir, mask); err != nil {
		s.mu.Lock()
		if s.watchErr == "" {
			s.watchErr = err.Error()
		}
		s.mu.Unlock()
	}
}

// onEvent marks a save inotify saw (on its reader goroutine).
func (s *snapshotter) onEvent(ev fsEvent) {
	if ev.mask&evIsDir != 0 { // a directory on the way to the files appeared
		dir := filepath.Dir(s.abs(s.o.Files))
		if d := ev.full(); d != dir && !strings.HasPrefix(dir, d+string(filepath.Separator)) {
			return
		}
		s.rewatch()
		// A save that came with it may be closed already, unseen: marked
		// now rather than at the next poll.
		for _, m := range s.matches() {
			if len(openForWriting([]string{m})) > 0 {
				continue // its close is still to come, and is watched
			}
			if sg, err := statSig(m); err == nil {
				off := s.logSize()
				s.mu.Lock()
				s.events = append(s.events, saveMark{path: m, sig: sg, logOff: off})
				s.mu.Unlock()
			}
		}
		return
	}
	if ev.mask&evSaved == 0 || ev.name == "" {
		return
	}
	p := ev.full()
	if ok, _ := filepath.Match(s.abs(s.o.Files), p); !ok {
		return
	}
	sg, err := statSig(p)
	if err != nil {
		return
	}
	off := s.logSize()
	s.mu.Lock()
	s.events = append(s.events, saveMark{path: p, sig: sg, logOff: off})
	s.mu.Unlock()
}

func (s *snapshotter) logSize() int64 {
	if s.o.LogFile == "" {
		return 0
	}
	fi, err := os.Stat(s.abs(s.o.LogFile))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// mark records a save unless it is the one already marked (inotify and
// the poll both see it).
func (s *snapshotter) mark(m saveMark) {
	if s.markOf(m.path, m.sig) != nil {
		return
	}
	mk := m
	s.marks = append(s.marks, &mk)
}

// resolve labels the marks in order, each with the step line it takes.
func (s *snapshotter) resolve() {
	if s.steps == nil {
		return
	}
	for _, m := range s.marks {
		if m.resolved {
			continue
		}
		h, ok := s.steps.newestIn(s.consumed, m.logOff)
		if !ok {
			if h, ok = s.steps.firstFrom(max(m.logOff, s.consumed+1)); !ok {
				return // later saves wait for this one's line
			}
		}
		m.label, m.resolved, s.consumed = h.step, true, h.off
	}
}

// markOf is the mark of the file's current content.
func (s *snapshotter) markOf(p string, sg fileSig) *saveMark {
	for i := len(s.marks) - 1; i >= 0; i-- {
		if s.marks[i].path == p && s.marks[i].sig == sg {
			return s.marks[i]
		}
	}
	return nil
}

// forget drops resolved marks no file holds any more.
func (s *snapshotter) forget(cur map[string]fileSig) {
	kept := s.marks[:0]
	for _, m := range s.marks {
		if !m.resolved || cur[m.path] == m.sig {
			kept = append(kept, m)
		}
	}
	s.marks = kept
	s.steps.drop(s.consumed)
}

func (s *snapshotter) abs(p string) string {
	if filepath.IsAbs(p) || s.o.Home == "" {
		return p
	}
	return filepath.Join(s.o.Home, p)
}

func (s *snapshotter) matches() []string {
	ms, _ := filepath.Glob(s.abs(s.o.Files))
	var out []string
	for _, m := range ms {
		if fi, err := os.Lstat(m); err == nil && fi.Mode().IsRegular() {
			out = append(out, m)
		}
	}
	return out
}

func statSig(p string) (fileSig, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return fileSig{}, err
	}
	sg := fileSig{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		sg.ino = st.Ino
	}
	return sg, nil
}

// stepLineWait is how long a complete save may wait for its step line
// before the agent warns that none comes (buffered output, a regex that
// matches nothing): the save is still committed once the line arrives.
const stepLineWait = 30 * time.Second

// take snapshots the matched files into a new step directory when they
// changed and are complete (see the package doc).
func (s *snapshotter) take(ph phase, lastStep int64, dying func() bool) error {
	s.rewatch()
	for _, h := range s.steps.scan() {
		s.onStep(h.step, h.off)
	}
	s.mu.Lock()
	evs := s.events
	s.events = nil
	if s.watchErr != "" {
		s.warn("watch", s.watchErr+": saves of "+s.o.Files+" there are seen by polling, up to a poll late")
		s.watchErr = "-" // said once
	}
	s.mu.Unlock()
	for _, ev := range evs {
		if ev.sig != s.seen[ev.path] { // not what was restored or snapshot already
			s.mark(ev)
		}
	}
	ms := s.matches()
	if len(ms) == 0 {
		s.resolve()
		return nil
	}
	now := s.o.Clock.Now()
	cur := map[string]fileSig{}
	var changed []string
	stable := true
	for _, m := range ms {
		sg, err := statSig(m)
		if err != nil {
			s.resolve()
			return nil // replaced between the glob and the stat: look again next poll
		}
		cur[m] = sg
		if sg != s.seen[m] {
			changed = append(changed, m)
			// Inotify missed it (out/ appeared with it) or there is none:
			// marked now, once no process writes it (a half-written file
			// is not a save).
			if s.markOf(m, sg) == nil && len(openForWriting([]string{m})) == 0 {
				s.mark(saveMark{path: m, sig: sg, logOff: s.logSize()})
			}
		}
		l, ok := s.look[m]
		if !ok || l.sig != sg {
			s.look[m] = look{sig: sg, at: now}
			l = s.look[m]
			if ph == phaseRunning {
				stable = false // seen changing: a save may be under way
				continue
			}
		}
		if ph == phaseRunning && now.Sub(l.at) < s.o.Quiet {
			stable = false
		}
	}
	s.resolve()
	defer s.forget(cur)
	if len(changed) == 0 || !stable {
		return nil
	}
	if open := openForWriting(ms); len(open) > 0 {
		for _, p := range open {
			sayf(s.o.Log, "not snapshotting yet: %s is open for writing", p)
			break
		}
		return nil
	}
	if ph == phaseRunning && dying() {
		return nil
	}
	step, source := int64(-1), ""
	if s.steps != nil {
		mk := s.newestMark(changed, cur)
		if mk == nil || !mk.resolved {
			if ph != phaseRunning {
				return fmt.Errorf("single-file checkpoint: train.step_from %s matched no step line for the save of %s: not committed", s.o.StepFrom, strings.Join(s.rels(changed), ", "))
			}
			if s.pendAt.IsZero() {
				s.pendAt = now
			} else if now.Sub(s.pendAt) >= stepLineWait {
				s.warn("stepline", fmt.Sprintf("the save of %s is complete, but train.step_from %s has matched no line printed since: it waits for one (does the script print its step at every save? Python runs unbuffered; other programs must flush their output)", strings.Join(s.rels(changed), ", "), s.o.StepFrom))
			}
			return nil
		}
		s.pendAt = time.Time{}
		step, source = mk.label, SourceLog
		if step <= lastStep {
			s.notAfter(cur, step, lastStep, source)
			return nil
		}
	}
	tmp := filepath.Join(s.o.CheckpointDir, ".snapshot")
	// A leftover of an earlier pass must not end up in this step.
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("snapshot: clear %s: %w", tmp, err)
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // renamed away on success; a leftover is cleared by the next snapshot (above)
	for _, m := range ms {
		if err := copyFile(m, filepath.Join(tmp, s.rel(m))); err != nil {
			return fmt.Errorf("snapshot %s: %w", m, err)
		}
	}
	for _, m := range ms {
		if sg, err := statSig(m); err != nil || sg != cur[m] {
			return nil // rewritten while copying: not this one
		}
	}
	if s.steps == nil {
		step, source = s.derive(changed, tmp, lastStep)
		if source != SourceCounter {
			s.onStep(step, s.logSize())
		}
		if step <= lastStep {
			s.notAfter(cur, step, lastStep, source)
			return nil
		}
	}
	if s.o.Check != "" {
		for _, m := range ms {
			if err := s.check(filepath.Join(tmp, s.rel(m))); err != nil {
				s.remember(cur) // the same bytes would fail again
				return fmt.Errorf("step %d: %s failed train.checkpoint_check, not committed: %w", step, s.rel(m), err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, checkpoint.CompleteMarker), nil, 0o644); err != nil {
		return err
	}
	dst := filepath.Join(s.o.CheckpointDir, strconv.FormatInt(step, 10))
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	s.remember(cur)
	if source != s.source {
		sayf(s.o.Log, "the steps of %s come from %s", s.o.Files, describeSource(source, s.o.StepFrom))
		s.source = source
	}
	sayf(s.o.Log, "snapshot %s as step %d (%s)", strings.Join(s.rels(ms), ", "), step, source)
	return nil
}

// describeSource says in words where steps come from.
func describeSource(source, stepFrom string) string {
	switch source {
	case SourceLog:
		return "train.step_from " + stepFrom
	case SourceCounter:
		return "a counter (the file holds no step: set train.step_from)"
	}
	return "the checkpoint's " + source
}

// notAfter skips a save whose step is not after the last committed one: a
// script re-saving the step it resumed from, once. Again, and the person
// hears of it.
func (s *snapshotter) notAfter(cur map[string]fileSig, step, lastStep int64, source string) {
	s.remember(cur)
	sayf(s.o.Log, "not snapshotting step %d: it is not after the last committed step %d", step, lastStep)
	if s.repeated++; s.repeated >= 2 {
		s.warn("notafter", fmt.Sprintf("saves of %s are labelled step %d by %s, not after the last committed step %d, so they are not committed: the workload is behind the checkpoint it was given, or its steps do not grow", s.o.Files, step, describeSource(source, s.o.StepFrom), lastStep))
	}
}

// newestMark is the latest save among the changed files' current content.
func (s *snapshotter) newestMark(changed []string, cur map[string]fileSig) *saveMark {
	var best *saveMark
	for _, m := range s.marks {
		for _, c := range changed {
			if m.path == c && m.sig == cur[c] {
				best = m
			}
		}
	}
	return best
}

// derive reads the step from the snapshot's copies of the changed files
// (the newest step any names), else counts.
func (s *snapshotter) derive(changed []string, tmp string, lastStep int64) (int64, string) {
	pattern := filepath.Base(s.o.Files)
	step, source := int64(-1), ""
	for _, m := range changed {
		if n, src, ok := stepOfFile(filepath.Join(tmp, s.rel(m)), pattern); ok && n > step {
			step, source = n, src
		}
	}
	if source == "" {
		return max(lastStep, 0) + 1, SourceCounter
	}
	return step, source
}

func (s *snapshotter) remember(cur map[string]fileSig) {
	for k, v := range cur {
		s.seen[k] = v
	}
}

// rel is the file's path relative to Home: where restore puts it back.
func (s *snapshotter) rel(m string) string {
	if r, err := filepath.Rel(s.o.Home, m); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return filepath.Base(m)
}

func (s *snapshotter) rels(ms []string) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = s.rel(m)
	}
	return out
}

func (s *snapshotter) check(path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", s.o.Check+` "$1"`, "sh", path)
	cmd.Dir = s.o.Home
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, lastLine(out.String()))
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // only read: io.Copy reports a failed read
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy's error is the one reported
		return err
	}
	if err := out.Sync(); err != nil {
		_ = out.Close() // the sync's error is the one reported
		return err
	}
	return out.Close()
}
