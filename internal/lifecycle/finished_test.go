package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// finishedFlow is a ci-like flow on the fake market: the local steps, a
// rental journaled as the rent step would (the market holds it), and
// work that ends with workErr. ran counts the steps a run walked.
func finishedFlow(r *stepRig, rent bool, workErr error, ran *int) Flow {
	steps := LocalSteps()
	if rent {
		steps = append(steps, NewStep("fake-rent", func(_ context.Context, s *Scope) error {
			*ran++
			id := r.m.nextID
			r.m.add(id, 10, s.state.Label, 0)
			r.m.nextID++
			if err := s.Record("intent", stepRent, runstate.RentIntent{Label: s.state.Label, Offer: 1, Attempt: receipt.Attempt{MachineID: 10, DPHTotal: 0.4}}); err != nil {
				return err
			}
			return s.Record("done", stepRent, runstate.InstanceData{Instance: id})
		}))
	}
	steps = append(steps, NewStep("fake-work", func(context.Context, *Scope) error {
		*ran++
		return workErr
	}))
	return Flow{Name: "ci", Steps: steps}
}

// reopen opens the rig's run again in a new scope on the same wiring, as
// `vastrun resume` does.
func reopen(t *testing.T, r *stepRig, runDir string) *Scope {
	t.Helper()
	s := New(r.s.Deps)
	if err := s.Open(runDir); err != nil {
		t.Fatal(err)
	}
	return s
}

// oldOutcomeRecord rewrites the journal's outcome record as an older
// vastrun wrote it: the outcome alone, no receipt.
func oldOutcomeRecord(t *testing.T, runDir string) {
	t.Helper()
	path := filepath.Join(runDir, "journal.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		var rec journal.Record
		if len(bytes.TrimSpace(line)) > 0 && json.Unmarshal(line, &rec) == nil && rec.Step == stepOutcome {
			var d runstate.OutcomeData
			if err := rec.Decode(&d); err != nil {
				t.Fatal(err)
			}
			rec.Data, _ = json.Marshal(map[string]any{"outcome": d.Outcome})
			line, _ = json.Marshal(rec)
			line = append(line, '\n')
		}
		out = append(out, line...)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A run whose journal says it finished is never run again: Execute on it
// gives back its receipt with a *FinishedError of the run's own outcome,
// walks no step, asks the market nothing (but a teardown the run could
// not confirm, which it tries again), and writes a lost receipt.json
// again byte for byte.
func TestResumeFinishedRun(t *testing.T) {
	unavailable := &provider.APIError{Op: "destroy instance", Status: 503}
	for _, tc := range []struct {
		name        string
		rent        bool
		workErr     error
		wantOutcome receipt.Outcome
		// destroyFails: the run's teardown never confirms; stillFails:
		// nor does the resume's.
		destroyFails, stillFails bool
		removeReceipt            bool // a crash between the outcome record and receipt.json
		oldJournal               bool // the outcome record carries no receipt
	}{
		{name: "passed", rent: true, wantOutcome: OutcomePassed},
		{name: "failed: its own class", rent: true, workErr: &TestFailedError{Code: 3}, wantOutcome: OutcomeFailed},
		{name: "gated: nothing was rented", workErr: &StepError{Step: stepGate, Outcome: OutcomeGated, Err: ErrGated}, wantOutcome: OutcomeGated},
		{name: "receipt.json lost after the outcome record: written again", rent: true, wantOutcome: OutcomePassed, removeReceipt: true},
		{name: "an older journal: its receipt.json read back", rent: true, workErr: &TestFailedError{Code: 1}, wantOutcome: OutcomeFailed, oldJournal: true},
		{name: "an older journal, receipt.json lost: built from the journal", rent: true, workErr: &TestFailedError{Code: 1}, wantOutcome: OutcomeFailed, oldJournal: true, removeReceipt: true},
		{name: "cleanup unconfirmed: the teardown is tried again", rent: true, wantOutcome: OutcomePassed, destroyFails: true},
		{name: "cleanup still unconfirmed: exit 7 material", rent: true, wantOutcome: OutcomePassed, destroyFails: true, stillFails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStepRig(t, stepConfig+"  teardown: 1m\n", newFakeMarket(offer(1, 10, 0.4)))
			r.s.Close() // Execute begins a run of its own
			if tc.destroyFails {
				r.m.fail("destroy", slices.Repeat([]error{unavailable}, 10000)...)
			}
			ran := 0
			first, err := Execute(context.Background(), r.s, finishedFlow(r, tc.rent, tc.workErr, &ran))
			if first == nil || first.Outcome != tc.wantOutcome || first.Cleanup.Confirmed == tc.destroyFails {
				t.Fatalf("first run: %+v, %v", first, err)
			}
			runDir, evidence := r.s.RunDir(), r.s.EvidenceDir
			receiptPath := filepath.Join(evidence, "receipt.json")
			written, err := os.ReadFile(receiptPath)
			if err != nil {
				t.Fatal(err)
			}
			if tc.removeReceipt {
				if err := os.Remove(receiptPath); err != nil {
					t.Fatal(err)
				}
			}
			if tc.oldJournal {
				oldOutcomeRecord(t, runDir)
			}
			journalBefore, err := os.ReadFile(filepath.Join(runDir, "journal.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			r.m.mu.Lock()
			r.m.log, r.m.errs = nil, map[string][]error{}
			r.m.mu.Unlock()
			if tc.stillFails {
				r.m.fail("destroy", slices.Repeat([]error{unavailable}, 10000)...)
			}

			ran = 0
			s := reopen(t, r, runDir)
			got, resumeErr := Execute(context.Background(), s, finishedFlow(r, tc.rent, tc.workErr, &ran))
			var fe *FinishedError
			if !errors.As(resumeErr, &fe) || fe.Outcome != tc.wantOutcome || fe.RunID != s.State().RunID || Outcome(resumeErr) != tc.wantOutcome {
				t.Fatalf("resume: %v, want a FinishedError of outcome %s", resumeErr, tc.wantOutcome)
			}
			if ran != 0 {
				t.Fatalf("a finished run walked %d steps again", ran)
			}
			calls := r.m.calls()
			if slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "create") || c == "search" }) {
				t.Fatalf("a finished run searched or rented: %v", calls)
			}
			if got == nil || got.Outcome != tc.wantOutcome || got.RunID != fe.RunID {
				t.Fatalf("receipt %+v", got)
			}
			if !tc.destroyFails {
				if len(calls) != 0 {
					t.Fatalf("a finished run asked the market: %v", calls)
				}
				after, _ := os.ReadFile(filepath.Join(runDir, "journal.jsonl"))
				if !bytes.Equal(after, journalBefore) {
					t.Fatalf("the journal of a finished run changed:\n%s", after[len(journalBefore):])
				}
			}
			now, err := os.ReadFile(receiptPath)
			if tc.oldJournal && tc.removeReceipt {
				// Built from the journal: the run's facts, and nothing
				// written that would pass for the run's own receipt.
				if err == nil || got.Label != s.State().Label || len(got.Attempts) != 1 || !got.Attempts[0].Confirmed || !got.Cleanup.Confirmed || got.Test != nil {
					t.Fatalf("receipt from an older journal: %+v (receipt.json: %v)", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.destroyFails:
				assertRetriedTeardown(t, r, tc.stillFails, got, resumeErr, now, s)
			default:
				if !bytes.Equal(now, written) {
					t.Fatalf("receipt.json is not the run's, byte for byte:\n%s\nwant\n%s", now, written)
				}
				var want bytes.Buffer
				if err := json.Compact(&want, written); err != nil {
					t.Fatal(err)
				}
				if b, _ := json.Marshal(got); !bytes.Equal(b, want.Bytes()) {
					t.Fatalf("receipt given back:\n%s\nwant the journaled\n%s", b, want.Bytes())
				}
			}
		})
	}
}

func assertRetriedTeardown(t *testing.T, r *stepRig, stillFails bool, got *receipt.Receipt, err error, file []byte, s *Scope) {
	t.Helper()
	destroys := only(r.m.calls(), "destroy")
	if len(destroys) == 0 || destroys[0] != "destroy 101" {
		t.Fatalf("the retried teardown: %v", r.m.calls())
	}
	var ce *CleanupError
	if stillFails {
		if !errors.As(err, &ce) || got.Cleanup.Confirmed || len(r.m.live()) != 1 {
			t.Fatalf("still unconfirmed: %v, cleanup %+v, live %v", err, got.Cleanup, r.m.live())
		}
		return
	}
	if errors.As(err, &ce) || !got.Cleanup.Confirmed || len(got.Cleanup.Unconfirmed) != 0 || len(r.m.live()) != 0 {
		t.Fatalf("confirmed now: %v, cleanup %+v, live %v", err, got.Cleanup, r.m.live())
	}
	if a := got.Attempts[0]; !a.Confirmed || !a.Destroyed || a.ConfirmedAt.IsZero() {
		t.Fatalf("attempt after the retried teardown: %+v", a)
	}
	// The journal's terminal record says what holds now, and so does
	// receipt.json, written from it.
	st := s.State()
	if !st.Finished() || len(st.Unconfirmed()) != 0 {
		t.Fatalf("journal after the retried teardown: %+v", st)
	}
	if want := receiptFile(st.Receipt); !bytes.Equal(file, want) {
		t.Fatalf("receipt.json after the retried teardown:\n%s\nwant\n%s", file, want)
	}
	var onDisk receipt.Receipt
	if err := json.Unmarshal(file, &onDisk); err != nil || !onDisk.Cleanup.Confirmed || onDisk.Outcome != got.Outcome {
		t.Fatalf("receipt.json: %+v, %v", onDisk.Cleanup, err)
	}
}

// A run whose plan nobody approved, with nothing rented, is not finished:
// resume asks again.
func TestResumeUnapprovedRunAsksAgain(t *testing.T) {
	r := newStepRig(t, stepConfig, newFakeMarket(offer(1, 10, 0.4)))
	r.s.Close()
	r.approve = false
	rec, err := Execute(context.Background(), r.s, Flow{Name: "ci", Steps: append(LocalSteps(), Rent()...)})
	if !errors.Is(err, ErrNeedsApproval) || rec.Outcome != OutcomeNotApproved || len(r.approvals) != 1 {
		t.Fatalf("first run: %v, %+v, %d approvals", err, rec, len(r.approvals))
	}
	s := reopen(t, r, r.s.RunDir())
	if s.State().Finished() {
		t.Fatal("an unapproved run with nothing rented counts as finished")
	}
	_, err = Execute(context.Background(), s, Flow{Name: "ci", Steps: append(LocalSteps(), Rent()...)})
	var fe *FinishedError
	if errors.As(err, &fe) || len(r.approvals) != 2 {
		t.Fatalf("resume: %v after %d approvals; want the plan asked again", err, len(r.approvals))
	}
}

// The terminal record goes to the journal before receipt.json is
// written, and carries the very document the file holds.
func TestOutcomeRecordBeforeReceipt(t *testing.T) {
	r := newStepRig(t, stepConfig, newFakeMarket(offer(1, 10, 0.4)))
	r.s.Close()
	receiptPath := filepath.Join(r.s.EvidenceDir, "receipt.json")
	var atOutcome []bool // whether receipt.json existed as each outcome record was written
	r.s.JournalFault = func(rec journal.Record) error {
		if rec.Step == stepOutcome {
			_, err := os.Stat(receiptPath)
			atOutcome = append(atOutcome, err == nil)
		}
		return nil
	}
	ran := 0
	if _, err := Execute(context.Background(), r.s, finishedFlow(r, true, nil, &ran)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(atOutcome, []bool{false}) {
		t.Fatalf("receipt.json present as the outcome records were written: %v", atOutcome)
	}
	st, err := runstate.LoadState(r.s.RunDir())
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(receiptPath)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Finished() || !bytes.Equal(receiptFile(st.Receipt), file) {
		t.Fatalf("journaled receipt %s\nreceipt.json %s", st.Receipt, file)
	}
}
