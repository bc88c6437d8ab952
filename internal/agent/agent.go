// Package agent is what `vastrun agent` runs on a training instance, beside
// the workload. It commits every complete checkpoint the workload writes
// (a step directory holding the .complete marker) to durable storage,
// prunes old ones, reports its progress in a status file, and is the
// instance's dead-man switch: when the controller's heartbeat lapses past
// the TTL, or the runtime deadline passes, it destroys its own instance
// with the instance-scoped CONTAINER_API_KEY. An instance therefore
// outlives a dead controller by at most the TTL (plus one poll).
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
	// SelfDestroy destroys this instance (with CONTAINER_API_KEY).
	SelfDestroy func(ctx context.Context) error
	Log         io.Writer
	Once        bool // commit what is complete, then return
	// Quiet, when positive, also counts a step directory without the
	// .complete marker as complete once none of its files has changed for
	// this long (for workloads that cannot write a marker).
	Quiet time.Duration
}

// Status is what the agent reports in its status file.
type Status struct {
	Schema         string    `json:"schema"`
	LastStep       int64     `json:"last_committed_step"`
	LastSHA256     string    `json:"last_manifest_sha256,omitempty"`
	Committed      []int64   `json:"committed_steps"`
	Time           time.Time `json:"time"`
	LastError      string    `json:"last_error,omitempty"`
	SelfDestroyed  bool      `json:"self_destroyed,omitempty"`
	SelfDestroyWhy string    `json:"self_destroy_reason,omitempty"`
}

// ErrSelfDestroyed is returned after the dead-man switch fired.
var ErrSelfDestroyed = errors.New("agent destroyed its own instance")

type watcher struct {
	o       Options
	done    map[int64]bool
	status  Status
	started time.Time
}

// Watch runs until ctx ends, the switch fires, or (Once) one pass is done.
func Watch(ctx context.Context, o Options) error {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Poll <= 0 {
		o.Poll = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	w := &watcher{o: o, done: map[int64]bool{}, started: o.Clock.Now(), status: Status{Schema: "vastrun.agent/v1", LastStep: -1, Committed: []int64{}}}
	if list, err := o.Checkpoints.Committed(ctx); err == nil {
		for _, c := range list {
			w.done[c.Step] = true
		}
		if len(list) > 0 {
			w.status.LastStep, w.status.LastSHA256 = list[0].Step, list[0].ManifestSHA256
		}
	}
	for {
		w.commitComplete(ctx)
		if o.Once {
			return nil
		}
		if why := w.deadMan(); why != "" {
			fmt.Fprintf(o.Log, "vastrun agent: %s: destroying this instance\n", why)
			w.status.SelfDestroyed, w.status.SelfDestroyWhy = true, why
			w.writeStatus()
			var err error
			if o.SelfDestroy != nil {
				err = o.SelfDestroy(context.WithoutCancel(ctx))
			}
			if err != nil {
				return fmt.Errorf("%w (%s), but the destroy failed: %v", ErrSelfDestroyed, why, err)
			}
			return fmt.Errorf("%w: %s", ErrSelfDestroyed, why)
		}
		if err := clock.Sleep(ctx, o.Clock, o.Poll); err != nil {
			return nil
		}
	}
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

// commitComplete commits complete, not yet committed step directories in
// step order, then prunes.
func (w *watcher) commitComplete(ctx context.Context) {
	entries, err := os.ReadDir(w.o.CheckpointDir)
	if err != nil {
		return
	}
	var steps []int64
	for _, e := range entries {
		step, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || !e.IsDir() || w.done[step] {
			continue
		}
		dir := filepath.Join(w.o.CheckpointDir, e.Name())
		if _, err := os.Stat(filepath.Join(dir, checkpoint.CompleteMarker)); err == nil {
			steps = append(steps, step)
		} else if w.o.Quiet > 0 && w.quietSince(dir) >= w.o.Quiet {
			steps = append(steps, step)
		}
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	for _, step := range steps {
		cm, err := w.o.Checkpoints.Commit(ctx, filepath.Join(w.o.CheckpointDir, strconv.FormatInt(step, 10)), step, w.o.Clock.Now())
		if err != nil {
			w.status.LastError = err.Error()
			fmt.Fprintf(w.o.Log, "vastrun agent: %v\n", err)
			break // retry next poll; never skip ahead of an uncommitted step
		}
		w.done[step] = true
		w.status.LastStep, w.status.LastSHA256, w.status.LastError = cm.Step, cm.ManifestSHA256, ""
		fmt.Fprintf(w.o.Log, "vastrun agent: committed checkpoint %d (%d files)\n", step, len(cm.Manifest.Files))
		if w.o.Keep > 0 {
			if err := w.o.Checkpoints.Prune(ctx, w.o.Keep); err != nil {
				fmt.Fprintf(w.o.Log, "vastrun agent: prune: %v\n", err)
			}
		}
	}
	w.status.Committed = w.status.Committed[:0]
	for s := range w.done {
		w.status.Committed = append(w.status.Committed, s)
	}
	sort.Slice(w.status.Committed, func(i, j int) bool { return w.status.Committed[i] < w.status.Committed[j] })
	w.writeStatus()
}

// quietSince is how long ago the newest file in dir changed (0 if empty).
func (w *watcher) quietSince(dir string) time.Duration {
	var newest time.Time
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
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
	tmp := w.o.StatusFile + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		os.Rename(tmp, w.o.StatusFile)
	}
}

// ReadStatus parses a status file's content.
func ReadStatus(b []byte) (Status, error) {
	var s Status
	err := json.Unmarshal(b, &s)
	return s, err
}
