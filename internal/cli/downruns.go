package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vastrun/vastrun/internal/ci"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/run"
)

// liveRun is a run in the state dir that may still hold instances.
type liveRun struct {
	Dir         string
	RunID       string
	Label       string
	Unconfirmed []provider.InstanceID
	Ambiguous   bool // a create whose outcome it never learned
}

// liveRuns lists the runs under stateDir that still hold, or may hold,
// instances: unconfirmed destructions, or an unfinished run whose create
// was never answered. Journals are only read.
func liveRuns(stateDir string) []liveRun {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "runs"))
	var out []liveRun
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		dir := filepath.Join(stateDir, "runs", ent.Name())
		st, err := run.LoadState(dir)
		if err != nil {
			continue // damaged: down --run names it and its label
		}
		amb := st.AmbiguousRent() && st.Outcome == ""
		if len(st.Unconfirmed()) > 0 || amb {
			out = append(out, liveRun{Dir: dir, RunID: st.RunID, Label: st.Label, Unconfirmed: st.Unconfirmed(), Ambiguous: amb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RunID < out[j].RunID })
	return out
}

// MultipleRunsError means plain `down` would handle only the latest run
// while others still hold instances.
type MultipleRunsError struct {
	StateDir string
	Runs     []liveRun
}

func (e *MultipleRunsError) Error() string {
	parts := make([]string, len(e.Runs))
	for i, r := range e.Runs {
		parts[i] = fmt.Sprintf("%s (label %s, instances %v)", r.RunID, r.Label, r.Unconfirmed)
	}
	return fmt.Sprintf("%d runs in %s still hold instances not confirmed destroyed: %s", len(e.Runs), e.StateDir, strings.Join(parts, ", "))
}

// refuseOtherLiveRuns stops a plain `down` that would leave other runs'
// instances behind.
func refuseOtherLiveRuns(stateDir string) error {
	live := liveRuns(stateDir)
	current, _ := os.ReadFile(filepath.Join(stateDir, "current"))
	cur := strings.TrimSpace(string(current))
	others := 0
	for _, r := range live {
		if r.RunID != cur {
			others++
		}
	}
	if others == 0 {
		return nil
	}
	return &UsageError{Err: &MultipleRunsError{StateDir: stateDir, Runs: live},
		Hint: fmt.Sprintf("destroy them all: vastrun down --all --yes; or one: vastrun down --run %s --yes", live[0].RunID)}
}

// runWithLabel is the run directory whose run carries label, or "".
func runWithLabel(stateDir, label string) string {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "runs"))
	for _, ent := range entries {
		dir := filepath.Join(stateDir, "runs", ent.Name())
		if st, err := run.LoadState(dir); err == nil && st.Label == label {
			return dir
		}
	}
	return ""
}

// downRun tears one run down from its journal, validated first.
func downRun(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, dir string) error {
	if err := checkJournal(dir); err != nil {
		return err
	}
	e, err := newEngine(ctx, f, o, cfg, ci.Detect(f.Getenv))
	if err != nil {
		return err
	}
	if err := openRun(e, dir); err != nil {
		return err
	}
	defer e.Close()
	st := e.State()
	if err := confirmDestroy(f, o.Yes, fmt.Sprintf("run %s: instances %v and anything labelled %s", st.RunID, st.Unconfirmed(), st.Label)); err != nil {
		return err
	}
	// Report only what this call destroyed: an instance confirmed gone by
	// an earlier down is not news.
	already := map[provider.InstanceID]bool{}
	for _, a := range st.Attempts {
		if a.Confirmed {
			already[a.InstanceID] = true
		}
	}
	r, err := e.Down(ctx)
	res := downResult{Schema: "vastrun.down/v1", Label: st.Label, RunID: st.RunID, Simulated: f.Sim, Destroyed: []provider.InstanceID{}}
	for _, a := range r.Attempts {
		if a.Confirmed && a.InstanceID != 0 && !already[a.InstanceID] {
			already[a.InstanceID] = true
			res.Destroyed = append(res.Destroyed, a.InstanceID)
		}
	}
	printDown(f, res)
	return err
}

// downAll tears down every run that still holds instances, one at a time
// (each confirms its own label), and reports every failure.
func downAll(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config) error {
	live := liveRuns(cfg.StateDir)
	if len(live) == 0 {
		f.IO.Infof("no run in %s holds instances: nothing to destroy", cfg.StateDir)
		return nil
	}
	ids := make([]string, len(live))
	for i, r := range live {
		ids[i] = r.RunID
	}
	if err := confirmDestroy(f, o.Yes, fmt.Sprintf("the instances of %d runs: %s", len(live), strings.Join(ids, ", "))); err != nil {
		return err
	}
	yes := *o
	yes.Yes = true // approved once for all of them
	var errs []error
	for _, r := range live {
		if err := downRun(ctx, f, &yes, cfg, r.Dir); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", r.RunID, err))
		}
	}
	return errors.Join(errs...)
}

// recordSwept brings the state of the run carrying label (if this state
// dir has it) in line with a completed label sweep. Failing to is a
// warning: the marketplace, not the journal, is what was cleaned.
func recordSwept(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, label string, ids []provider.InstanceID) {
	dir := runWithLabel(cfg.StateDir, label)
	if dir == "" {
		return
	}
	err := checkJournal(dir)
	var e *run.Engine
	if err == nil {
		e, err = newEngine(ctx, f, o, cfg, ci.Detect(f.Getenv))
	}
	if err == nil {
		if err = openRun(e, dir); err == nil {
			err = e.RecordSwept(ids)
			e.Close()
		}
	}
	if err != nil {
		f.IO.Infof("warning: label %s is clean, but run %s's state could not be updated: %v", label, filepath.Base(dir), err)
		return
	}
	f.IO.Infof("run %s's state updated: label %s confirmed clean", filepath.Base(dir), label)
}
