package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
type snapshotter struct {
	o    Options
	seen map[string]fileSig // content already snapshot, restored, or rejected
	look map[string]look    // the last observation of each file
}

func newSnapshotter(o Options) *snapshotter {
	s := &snapshotter{o: o, seen: map[string]fileSig{}, look: map[string]look{}}
	// What is there before the workload starts (a restored checkpoint) is
	// not a new save.
	for _, m := range s.matches() {
		if sg, err := statSig(m); err == nil {
			s.seen[m] = sg
		}
	}
	return s
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

// take snapshots the matched files into a new step directory when they
// changed and are complete (see the package doc).
func (s *snapshotter) take(ph phase, lastStep int64, dying func() bool) error {
	ms := s.matches()
	if len(ms) == 0 {
		return nil
	}
	now := s.o.Clock.Now()
	cur := map[string]fileSig{}
	changed, stable := false, true
	for _, m := range ms {
		sg, err := statSig(m)
		if err != nil {
			return nil // replaced between the glob and the stat: look again next poll
		}
		cur[m] = sg
		if sg != s.seen[m] {
			changed = true
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
	if !changed || !stable {
		return nil
	}
	if open := openForWriting(ms); len(open) > 0 {
		for _, p := range open {
			fmt.Fprintf(s.o.Log, "vastrun agent: not snapshotting yet: %s is open for writing\n", p)
			break
		}
		return nil
	}
	if ph == phaseRunning && dying() {
		return nil
	}
	step, err := s.step(lastStep)
	if err != nil {
		return fmt.Errorf("single-file checkpoint: %w", err)
	}
	if step <= lastStep {
		s.remember(cur)
		fmt.Fprintf(s.o.Log, "vastrun agent: not snapshotting step %d: it is not after the last committed step %d\n", step, lastStep)
		return nil
	}
	tmp := filepath.Join(s.o.CheckpointDir, ".snapshot")
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
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
	os.RemoveAll(dst)
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	s.remember(cur)
	fmt.Fprintf(s.o.Log, "vastrun agent: snapshot %s as step %d\n", strings.Join(s.rels(ms), ", "), step)
	return nil
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

// step reads the snapshot's step from the log, or counts.
func (s *snapshotter) step(lastStep int64) (int64, error) {
	sf := s.o.StepFrom
	if sf == "" {
		return max(lastStep, 0) + 1, nil
	}
	tail := readTail(s.abs(s.o.LogFile), 1<<20)
	if field, ok := strings.CutPrefix(sf, "json:"); ok {
		lines := bytes.Split(tail, []byte("\n"))
		for i := len(lines) - 1; i >= 0; i-- {
			var obj map[string]any
			if json.Unmarshal(bytes.TrimSpace(lines[i]), &obj) != nil {
				continue
			}
			if v, ok := obj[field].(float64); ok && v == float64(int64(v)) {
				return int64(v), nil
			}
		}
		return 0, fmt.Errorf("no JSON line with a numeric %q in the log yet (train.step_from)", field)
	}
	re, err := regexp.Compile(strings.TrimPrefix(sf, "regex:"))
	if err != nil {
		return 0, err
	}
	all := re.FindAllSubmatch(tail, -1)
	if len(all) == 0 {
		return 0, fmt.Errorf("train.step_from %s matches nothing in the log yet", sf)
	}
	n, err := strconv.ParseInt(string(all[len(all)-1][1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("train.step_from %s: %q is not a step number", sf, all[len(all)-1][1])
	}
	return n, nil
}

func readTail(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	return b
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
