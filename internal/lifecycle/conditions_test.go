package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/spec"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// The engine's state, applied record by record as it journals, is exactly
// what a replay of its journal from disk gives.
func TestIncrementalStateEqualsReplay(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	if _, err := ci.Run(context.Background(), h.engine); err != nil {
		t.Fatal(err)
	}
	replayed, err := runstate.LoadState(h.engine.RunDir())
	if err != nil {
		t.Fatal(err)
	}
	live := h.engine.State()
	if a, b := stripTimes(live), stripTimes(replayed); a != b {
		t.Fatalf("incremental state differs from the replay:\nlive   %s\nreplay %s", a, b)
	}
	for _, step := range []string{"gate", "paths", "freeze", "select", "approve", "rent", "ready", "connect", "verify"} {
		if c := replayed.Condition(step); !c.IsTrue() || c.At.IsZero() {
			t.Errorf("condition %s after a passing run: %+v", step, c)
		}
	}
	if c := replayed.Condition("verify"); c.Instance == 0 || c.Instance != replayed.Attempts[0].InstanceID {
		t.Errorf("verify condition names instance %d, rented %d", c.Instance, replayed.Attempts[0].InstanceID)
	}
}

// stripTimes compares condition times by presence only: the in-memory
// record time and the journal's are the same instant, in two encodings.
func stripTimes(s *runstate.State) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A failed step journals a False condition whose reason is the outcome
// class and whose message says what went wrong.
func TestFailedStepJournalsFalseCondition(t *testing.T) {
	h := newHarness(t, baseConfig+"gate: [\"echo cpu tests failed; exit 1\"]\n", true)
	ci.Run(context.Background(), h.engine)
	st, err := runstate.LoadState(h.engine.RunDir())
	if err != nil {
		t.Fatal(err)
	}
	c := st.Condition("gate")
	if c.Status != runstate.ConditionFalse || c.Reason != string(lifecycle.OutcomeGated) || !strings.Contains(c.Message, "exit status 1") {
		t.Fatalf("gate condition: %+v", c)
	}
	if c := st.Condition("rent"); c.Status != runstate.ConditionUnknown {
		t.Fatalf("rent condition of a gated run: %+v", c)
	}
}

// Replay is a fold over Apply: applying the records one by one, in any
// number of passes, gives the same state.
func TestReplayIsAFoldOverApply(t *testing.T) {
	rec := func(seq int, typ, step string, data any) journal.Record {
		b, _ := json.Marshal(data)
		return journal.Record{V: journal.Version, Seq: seq, Type: typ, Step: step, Data: b}
	}
	recs := []journal.Record{
		rec(1, "event", "start", map[string]any{"run_id": "r1", "label": "l1", "workflow": "ci"}),
		rec(2, "condition", "gate", runstate.Condition{Status: runstate.ConditionTrue, Reason: "Done"}),
		rec(3, "intent", "rent", map[string]any{"label": "l1", "offer_id": 7, "machine_id": 9}),
		rec(4, "done", "rent", map[string]any{"instance_id": 42}),
		rec(5, "condition", "verify", runstate.Condition{Status: runstate.ConditionTrue, Reason: "Done", Instance: 42}),
		rec(6, "event", "failover", map[string]any{"instance_id": 42, "reason": "stuck"}),
	}
	want, err := runstate.Replay(recs)
	if err != nil {
		t.Fatal(err)
	}
	got := &runstate.State{}
	for _, r := range recs {
		if err := got.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fold %+v, replay %+v", got, want)
	}
	if !got.Condition("gate").IsTrue() {
		t.Fatal("gate condition lost")
	}
	// A failover starts the replaced rental's steps over.
	if c := got.Condition("verify"); c.Status != runstate.ConditionUnknown {
		t.Fatalf("verify condition survived the failover: %+v", c)
	}
	if got.Attempts[0].Failure != "stuck" {
		t.Fatalf("attempt: %+v", got.Attempts[0])
	}
}

// A resumed ci run walks the same steps: the gate, whose condition is
// True, is not run again; the approval that was refused is asked again.
func TestResumeDoesNotRepeatATrueStep(t *testing.T) {
	h := newHarness(t, baseConfig+"gate: [\"echo ran >> gate-runs\"]\n", false)
	if _, err := ci.Run(context.Background(), h.engine); err == nil {
		t.Fatal("a run without approval passed")
	}
	runs := filepath.Join(h.repo, "gate-runs")
	if b, _ := os.ReadFile(runs); string(b) != "ran\n" {
		t.Fatalf("gate ran %q", b)
	}
	second := *h.engine
	second.Approve = func(lifecycle.Plan) (bool, error) { return true, nil }
	second.EvidenceDir = filepath.Join(t.TempDir(), "ev2")
	if err := second.Open(h.engine.RunDir()); err != nil {
		t.Fatal(err)
	}
	r, err := ci.Resume(context.Background(), &second)
	if err != nil || r.Outcome != lifecycle.OutcomePassed {
		t.Fatalf("resume: %v %+v", err, r)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\n" {
		t.Fatalf("the resumed run ran the gate again: %q", b)
	}
	h.noLeaks()
}

// Once frozen, the spec drives the run: a config changed after the freeze
// (here, between freeze and approval) changes neither what is rented nor
// what verify expects nor what the receipt says.
func TestStepsReadTheFrozenSpec(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	frozenImage := h.engine.Config.Image
	h.engine.Approve = func(p lifecycle.Plan) (bool, error) {
		if p.Image != frozenImage {
			t.Errorf("the plan shows %q, not the frozen %q", p.Image, frozenImage)
		}
		c := *h.engine.Config
		c.Image = "ghcr.io/acme/other@sha256:" + strings.Repeat("f", 64)
		c.Budget.MaxSpend = 0.0001
		// Every other step input too: the test, what is uploaded, its
		// environment, its timeout and what verify asks of the disk.
		c.Test = "exit 7"
		c.Upload = []string{"missing-dir"}
		c.Env = map[string]string{"CHANGED": "after-the-freeze"}
		c.Timeouts.Job = config.Duration(time.Nanosecond)
		c.Verify.MinFreeDiskGB = 1e9
		h.engine.Config = &c
		return true, nil
	}
	r, err := ci.Run(context.Background(), h.engine)
	if err != nil || r.Outcome != lifecycle.OutcomePassed {
		t.Fatalf("%v %+v", err, r)
	}
	if r.Image != frozenImage {
		t.Fatalf("receipt image %q, frozen %q", r.Image, frozenImage)
	}
	if r.Test == nil || !r.Test.Passed() || r.Test.Result["passed"] != 3.0 {
		t.Fatalf("the test that ran is not the frozen one: %+v", r.Test)
	}
	if log := h.evidence("test.log"); strings.Contains(log, "after-the-freeze") {
		t.Fatalf("the live env reached the test:\n%s", log)
	}
	gone := h.sim.Snapshot().Gone
	if len(gone) != 1 || gone[0].Image != frozenImage {
		t.Fatalf("rented %+v, want the frozen image %q", gone, frozenImage)
	}
	h.noLeaks()
}

// The canary's comparison classes are outcomes the receipt package knows,
// with the same exit classes as the rest: one answer to "succeeded?".
func TestCanaryClassesAreKnownOutcomes(t *testing.T) {
	for _, c := range []string{receipt.CanaryMatch, receipt.CanaryGPUOnlyFailure, receipt.CanaryLocalOnlyFailure, receipt.CanaryBothFailed, receipt.CanaryOutputDelta, receipt.OutcomeLocalFailed} {
		o := receipt.Outcome(c)
		if !o.Known() || o.Succeeded() != (c == receipt.CanaryMatch) {
			t.Errorf("canary class %q: known %v, succeeded %v", c, o.Known(), o.Succeeded())
		}
	}
}

// A resumed ci run whose test command changed since the freeze is refused,
// naming the field, before anything is touched; with AcceptConfigChange
// the accepted spec drives the rest (the new test runs), the change is
// journaled, and the receipt keeps the frozen commit.
func TestResumeWithChangedTestCommand(t *testing.T) {
	h := newHarness(t, baseConfig, false)
	if _, err := ci.Run(context.Background(), h.engine); err == nil {
		t.Fatal("a run without approval passed")
	}
	frozen, err := lifecycle.LoadManifest(h.engine.RunDir(), h.engine.State().ManifestHash)
	if err != nil || frozen.Schema != spec.SchemaV2 || frozen.Test != "sh scripts/gpu-test.sh" || frozen.Env != nil {
		t.Fatalf("frozen manifest: %+v %v", frozen, err)
	}
	changed := *h.engine.Config
	changed.Test = "sh scripts/gpu-test.sh && echo accepted-change"
	resume := func(accept bool) (*lifecycle.Scope, *receipt.Receipt, error) {
		e := *h.engine
		e.Config = &changed
		e.AcceptConfigChange = accept
		e.Approve = func(lifecycle.Plan) (bool, error) { return true, nil }
		e.EvidenceDir = filepath.Join(t.TempDir(), "ev")
		if err := e.Open(h.engine.RunDir()); err != nil {
			t.Fatal(err)
		}
		r, err := ci.Resume(context.Background(), &e)
		return &e, r, err
	}
	_, _, err = resume(false)
	var ce *lifecycle.ConfigChangedError
	if !errors.As(err, &ce) || strings.Join(ce.Fields, ",") != "test" {
		t.Fatalf("refusal: %v", err)
	}
	if n := len(h.sim.Snapshot().Gone) + len(h.sim.Snapshot().Live); n != 0 {
		t.Fatalf("a refused resume rented %d instances", n)
	}
	e, r, err := resume(true)
	if err != nil || r.Outcome != lifecycle.OutcomePassed {
		t.Fatalf("accepted resume: %v %+v", err, r)
	}
	if log, _ := os.ReadFile(filepath.Join(e.EvidenceDir, "test.log")); !strings.Contains(string(log), "accepted-change") {
		t.Fatalf("the accepted test did not run:\n%s", log)
	}
	if r.Commit != frozen.Commit || r.ManifestSHA256 != h.engine.State().ManifestHash {
		t.Fatalf("receipt facts: commit %q (frozen %q), manifest %q", r.Commit, frozen.Commit, r.ManifestSHA256)
	}
	j, _ := os.ReadFile(filepath.Join(h.engine.RunDir(), "journal.jsonl"))
	if !strings.Contains(string(j), `"step":"config_change"`) || !strings.Contains(string(j), `"fields":["test"]`) {
		t.Fatalf("the accepted change is not journaled:\n%s", j)
	}
	h.noLeaks()
}
