package receipt

import (
	"fmt"
)

// SummaryRows: training adds no rows to the main table; its story says
// what a person needs.
func (t *TrainReport) SummaryRows() string { return "" }

// Story is training's part of the story: the resumes and whether each was
// proven, the last committed checkpoint, the final metrics, and on a
// failed workload the last lines of train.log.
func (t *TrainReport) Story(evidenceDir string) []Section {
	s := Section{Title: "Training"}
	for _, rs := range t.Resumes {
		if rs.Restored == RestoredNone {
			s.Rows = append(s.Rows, [2]string{"resumed", fmt.Sprintf("nothing on instance %d: no checkpoint was committed before, so the workload started from the beginning", rs.Instance)})
			continue
		}
		v := fmt.Sprintf("restored step %d on instance %d", rs.RestoredStep, rs.Instance)
		switch {
		case rs.RegressedFrom != nil:
			v += fmt.Sprintf("; the workload started at step %d, below it: it did NOT resume", *rs.FirstStep)
		case rs.Proven && rs.ProvenBy == ProvenObserved && rs.ObservedStep != nil:
			v += fmt.Sprintf("; the workload read %s, then reported step %d (proven by observation)", rs.Read, *rs.ObservedStep)
		case rs.Proven:
			v += fmt.Sprintf("; the workload reported resuming from %d (proven)", rs.RestoredStep)
		case rs.ReportedStep != nil:
			v += fmt.Sprintf("; the workload reported %d (NOT proven)", *rs.ReportedStep)
		case rs.Interrupted != "":
			v += fmt.Sprintf("; interrupted (%s) before the workload reported its step (not proven)", rs.Interrupted)
		default:
			v += "; the workload reported nothing (NOT proven)"
		}
		s.Rows = append(s.Rows, [2]string{"resumed", v})
	}
	if t.StepSource != "" {
		s.Rows = append(s.Rows, [2]string{"steps from", t.StepSource})
	}
	for _, w := range t.Warnings {
		s.Rows = append(s.Rows, [2]string{"warning", w})
	}
	if c := t.LastCheckpoint; c != nil {
		s.Rows = append(s.Rows, [2]string{"last committed", fmt.Sprintf("step %d, manifest sha256 %s", c.Step, c.ManifestSHA256)})
	} else {
		s.Rows = append(s.Rows, [2]string{"last committed", "no checkpoint"})
	}
	if len(t.Result) > 0 {
		s.Rows = append(s.Rows, [2]string{"final metrics", resultPairs(t.Result)})
	}
	if t.ExitCode != nil && *t.ExitCode != 0 {
		if tail := LogTail(evidenceDir, "train.log", 20); tail != "" {
			return []Section{s, {Title: fmt.Sprintf("Last lines of train.log (exit %d)", *t.ExitCode), Block: tail}}
		}
	}
	return []Section{s}
}
