package train

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Training's outcome mapping: a workload that exited non-zero is
// "failed", whatever wraps it; anything else keeps the shared class.
func TestOutcomeMapping(t *testing.T) {
	f := newFlow(lifecycle.New(&lifecycle.Deps{}))
	for _, c := range []struct {
		err  error
		base receipt.Outcome
		want receipt.Outcome
	}{
		{fmt.Errorf("%w (exit status 3; see train.log)", ErrTrainFailed), receipt.Error, receipt.Failed},
		{nil, receipt.Passed, receipt.Passed},
		{errors.New("budget"), receipt.Budget, receipt.Budget},
	} {
		if got := f.Flow().Outcome(c.err, c.base); got != c.want {
			t.Errorf("Outcome(%v, %s) = %s, want %s", c.err, c.base, got, c.want)
		}
	}
}

// Training freezes its own section only: no test command, no canary, and
// a train section even for a config without one (the zero spec).
func TestSpecKeepsOnlyTrainsSection(t *testing.T) {
	m := lifecycle.Manifest{Test: "make test", Canary: &lifecycle.CanarySpec{Smoke: "s"}}
	newFlow(lifecycle.New(&lifecycle.Deps{})).Flow().Spec(&m)
	if m.Test != "" || m.Canary != nil || m.Train == nil {
		t.Fatalf("%+v", m)
	}
	if (&flow{}).Flow().JobBound(lifecycle.Manifest{JobTimeout: "1h"}) != 0 {
		t.Fatal("training's approval bound is its start, not the job timeout")
	}
}

// An interruption marks the resumes on its instance that the workload had
// not reported (not proven, not shown wrong), and only those: a reported
// step keeps its verdict, and other instances are untouched.
func TestInterruptionMarksUnreportedResumes(t *testing.T) {
	step, wrong := int64(200), int64(150)
	f := &flow{report: &receipt.TrainReport{Resumes: []receipt.ResumeProof{
		{Instance: 1, RestoredStep: 200, ReportedStep: &step, Proven: true},
		{Instance: 2, RestoredStep: 200, ReportedStep: &wrong},
		{Instance: 2, RestoredStep: 250},
		{Instance: 3, RestoredStep: 250},
	}}}
	f.resumesInterrupted(2, "outbid")
	f.resumesInterrupted(1, "preempted")
	got := f.report.Resumes
	if got[0].Interrupted != "" || got[1].Interrupted != "" || got[2].Interrupted != "outbid" || got[3].Interrupted != "" {
		t.Fatalf("marked: %+v", got)
	}
	if got[2].Proven {
		t.Fatal("an interrupted resume is not proven")
	}
	story := fmt.Sprint(f.report.Story(""))
	if !strings.Contains(story, "interrupted (outbid) before the workload reported its step (not proven)") ||
		!strings.Contains(story, "the workload reported 150 (NOT proven)") {
		t.Fatalf("story: %s", story)
	}
}
