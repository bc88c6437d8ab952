package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/report"
)

// MultipleRunsError means plain `down` would handle only the latest run
// while others still hold instances.
type MultipleRunsError struct {
	StateDir string
	Runs     []report.Live
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
	live := report.LiveRuns(stateDir)
	if len(report.Others(live, report.Latest(stateDir))) == 0 {
		return nil
	}
	return &UsageError{Err: &MultipleRunsError{StateDir: stateDir, Runs: live},
		Hint: fmt.Sprintf("destroy them all: vastrun down --all --yes; or one: vastrun down --run %s --yes", live[0].RunID)}
}

// downRun tears one run down from its journal, validated first. A run
// whose journal cannot be replayed (damaged, torn, missing) is torn down
// by what its state.json names, which needs no journal (downDamaged);
// settle is that label sweep's.
func downRun(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, dir string, settle time.Duration) error {
	e, err := openDown(ctx, f, o, cfg, dir, settle)
	if e == nil {
		return err
	}
	defer func() { _ = e.Close() }() // releases the journal's lock: its records are fsync'd as appended
	st := e.State()
	if err := confirmDestroy(ctx, f, o.Yes, fmt.Sprintf("run %s: instances %v and anything labelled %s", st.RunID, st.Unconfirmed(), st.Label)); err != nil {
		return err
	}
	before := attemptsBefore(e)
	r, err := e.Down(ctx)
	return printRunDown(f, e, before, r, err)
}

// openDown opens the run in dir for a teardown from its journal,
// validated first. A run whose journal cannot be replayed is torn down at
// once by what its state.json names (downDamaged): no engine comes back
// then, only that teardown's error, as when the run cannot be opened. The
// caller closes the engine.
func openDown(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, dir string, settle time.Duration) (*lifecycle.Scope, error) {
	jerr := checkJournal(dir)
	if _, err := os.Stat(filepath.Join(dir, journal.FileName)); jerr == nil && errors.Is(err, fs.ErrNotExist) {
		// Opening would create an empty journal: "holds no run".
		jerr = &DamagedJournalError{RunDir: dir, Err: fmt.Errorf("%s is missing: %w", journal.FileName, err)}
	}
	if jerr != nil {
		return nil, downDamaged(ctx, f, o, cfg, dir, jerr, settle)
	}
	e, err := newEngine(ctx, f, o, cfg, cienv.Detect(f.Getenv))
	if err != nil {
		return nil, err
	}
	if err := openRun(e, dir); err != nil {
		return nil, err
	}
	return e, nil
}

// attemptsBefore copies the run's attempts before its teardown, which
// updates them in place, so that what it newly confirmed can be told.
func attemptsBefore(e *lifecycle.Scope) []*receipt.Attempt {
	st := e.State()
	before := make([]*receipt.Attempt, len(st.Attempts))
	for i, a := range st.Attempts {
		c := *a
		before[i] = &c
	}
	return before
}

// printRunDown prints what the run's teardown (r, err) destroyed. The
// teardown's own error comes first (its exit code); the printing error
// when the teardown succeeded (as reportRun).
func printRunDown(f *Factory, e *lifecycle.Scope, before []*receipt.Attempt, r *receipt.Receipt, err error) error {
	st := e.State()
	if perr := printDown(f, downResult{Schema: "vastrun.down/v1", Label: st.Label, RunID: st.RunID, Simulated: f.Sim, Destroyed: report.NewlyConfirmed(before, r.Attempts)}); err == nil {
		err = perr
	}
	return err
}

// downDamaged tears down the run in dir, whose journal cannot be read,
// by the label and instances its state.json names: the label is swept
// until listings stay clean, which also finds a rental the journal never
// got to record. The journal is only read, never opened, so it stays byte
// for byte as it was (for a person, or a later repair, to judge). Without
// a label in state.json there is nothing to go by: jerr is returned. Nor
// with team state, where the bucket holds the journal and a sweep from here
// would act outside the run's lease.
func downDamaged(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, dir string, jerr error, settle time.Duration) error {
	var de *DamagedJournalError
	if !errors.As(jerr, &de) {
		return jerr
	}
	if loc, err := stateLocation(o, cfg); err != nil || loc.Kind == "s3" {
		return jerr
	}
	idx, err := readStateIndex(dir)
	if err != nil || idx.Label == "" {
		return jerr
	}
	de.Label, de.Instances = idx.Label, idx.Instances
	f.IO.Infof("%v", de)
	f.IO.Infof("run %s: destroying by label %s and the unconfirmed instances %v that state.json names, which needs no journal", filepath.Base(dir), idx.Label, idx.Unconfirmed)
	ids := make([]int64, len(idx.Unconfirmed))
	for i, id := range idx.Unconfirmed {
		ids[i] = int64(id)
	}
	return downTargets(ctx, f, o, cfg, ids, idx.Label, settle)
}

// stateIndex is what a run's state.json says (run.stateFile): a summary
// beside the journal, enough to find the run's rentals without it.
type stateIndex struct {
	Label       string                `json:"label"`
	Instances   []provider.InstanceID `json:"instance_ids"`
	Unconfirmed []provider.InstanceID `json:"unconfirmed_instance_ids"`
}

func readStateIndex(dir string) (stateIndex, error) {
	var idx stateIndex
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return idx, err
	}
	return idx, json.Unmarshal(b, &idx)
}

// downAll tears down every run that still holds instances, together
// (lifecycle.DownAll: the destroys in bulk, confirmed by listings of the
// runs' labels, in a few calls however many runs there are), each run
// recorded as `down --run` records it, and reports every failure. A run
// whose journal is damaged is torn down on its own first (downDamaged);
// with team state each run is torn down on its own, under its own lease.
func downAll(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config) error {
	live := report.LiveRuns(cfg.StateDir)
	if len(live) == 0 {
		f.IO.Infof("no run in %s holds instances: nothing to destroy", cfg.StateDir)
		return nil
	}
	ids := make([]string, len(live))
	for i, r := range live {
		ids[i] = r.RunID
	}
	if err := confirmDestroy(ctx, f, o.Yes, fmt.Sprintf("the instances of %d runs: %s", len(live), strings.Join(ids, ", "))); err != nil {
		return err
	}
	yes := *o
	yes.Yes = true // approved once for all of them
	var errs []error
	if loc, err := stateLocation(o, cfg); err != nil || loc.Kind == "s3" {
		for _, r := range live {
			if err := downRun(ctx, f, &yes, cfg, r.Dir, lifecycle.SweepSettle); err != nil {
				errs = append(errs, fmt.Errorf("run %s: %w", r.RunID, err))
			}
		}
		return errors.Join(errs...)
	}
	var scopes []*lifecycle.Scope
	for _, r := range live {
		e, err := openDown(ctx, f, &yes, cfg, r.Dir, lifecycle.SweepSettle)
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", r.RunID, err))
		}
		if e != nil {
			defer func() { _ = e.Close() }() // releases the journal's lock: its records are fsync'd as appended
			scopes = append(scopes, e)
		}
	}
	before := make([][]*receipt.Attempt, len(scopes))
	for i, e := range scopes {
		before[i] = attemptsBefore(e)
	}
	rs, downErrs := lifecycle.DownAll(ctx, scopes)
	for i, e := range scopes {
		if err := printRunDown(f, e, before[i], rs[i], downErrs[i]); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", e.State().RunID, err))
		}
	}
	return errors.Join(errs...)
}

// recordSwept brings the state of the run carrying label (if this state
// dir has it) in line with a completed label sweep. Failing to is a
// warning: the marketplace, not the journal, is what was cleaned.
func recordSwept(ctx context.Context, f *Factory, o *WorkflowOptions, cfg *config.Config, label string, ids []provider.InstanceID) {
	dir := report.WithLabel(cfg.StateDir, label)
	if dir == "" {
		return
	}
	err := checkJournal(dir)
	var e *lifecycle.Scope
	if err == nil {
		e, err = newEngine(ctx, f, o, cfg, cienv.Detect(f.Getenv))
	}
	if err == nil {
		if err = openRun(e, dir); err == nil {
			err = e.RecordSwept(ids)
			_ = e.Close() // releases the journal's lock: its records are fsync'd as appended
		}
	}
	if err != nil {
		f.IO.Infof("warning: label %s is clean, but run %s's state could not be updated: %v", label, filepath.Base(dir), err)
		return
	}
	f.IO.Infof("run %s's state updated: label %s confirmed clean", filepath.Base(dir), label)
}
