package lifecycle

import (
	"time"

	"github.com/vastrun/vastrun/internal/progress"
	"github.com/vastrun/vastrun/internal/runstate"
)

// observeRecord tells the Observer (live progress) what the run is doing
// now, from the journal record just written: every phase change of
// every workflow passes through record, so this is the one hook.
func (e *Run) observeRecord(typ, step string, data any) {
	if e.Observer == nil {
		return
	}
	ev := e.progressEvent()
	ev.Deadline = time.Time{} // each phase has its own
	switch {
	case step == stepStart:
		ev.Phase = progress.PhasePrepare
	case step == stepFreeze && typ == "done":
		ev.Phase = progress.PhaseSelect
	case step == stepRent && typ == "intent":
		ev.Phase, ev.DPH, ev.Instance = progress.PhaseRent, 0, 0
	case (step == stepRent || step == stepAdopt) && typ == "done":
		ev.Phase, ev.Deadline = progress.PhaseReady, e.Now().Add(max(e.readyFor, e.readyDeadline()))
		if d, ok := data.(runstate.InstanceData); ok {
			ev.Instance = int64(d.Instance)
		}
	case step == stepReady && typ == "done":
		ev.Phase = progress.PhaseVerify
	case step == stepWork && typ == "intent":
		var bound time.Duration
		ev.Phase, bound = e.workflow().workPhase(e.manifest)
		if bound > 0 {
			ev.Deadline = e.Now().Add(bound)
		}
	case step == "checkpoint":
		if m, ok := data.(map[string]any); ok {
			if s, ok := m["step"].(int64); ok {
				ev.CheckpointStep = s
			}
		}
		ev.Checkpoints++
	case step == stepDestroy && typ == "intent":
		ev.Phase, ev.Deadline = progress.PhaseTeardown, e.Now().Add(e.TeardownLimit())
		if d, ok := data.(runstate.InstanceData); ok {
			ev.Instance = int64(d.Instance)
		}
	case step == stepOutcome:
		ev.Phase, ev.DPH = progress.PhaseDone, 0
		if d, ok := data.(runstate.OutcomeData); ok {
			ev.Outcome = string(d.Outcome)
		}
	default:
		return
	}
	if ev.Phase == e.lastEvent.Phase {
		// Still the same phase (a checkpoint, a second destroy): its
		// deadline is the one set when it began.
		ev.Deadline = e.lastEvent.Deadline
	}
	e.lastEvent = ev
	e.Observer.Observe(ev)
}

// observeWatch tells the Observer that the teardown watches the run's
// label until deadline with nothing of the run known live (nothing bills).
func (e *Run) observeWatch(deadline time.Time) {
	if e.Observer == nil {
		return
	}
	ev := e.progressEvent()
	ev.Phase, ev.Deadline, ev.DPH, ev.Instance = progress.PhaseTeardown, deadline, 0, 0
	e.lastEvent = ev
	e.Observer.Observe(ev)
}

// ObserveWorkload passes the workload's own step and total (from its
// metrics) to the Observer.
func (e *Run) ObserveSteps(step, total int64) {
	if e.Observer == nil {
		return
	}
	if work, _ := e.workflow().workPhase(e.manifest); e.lastEvent.Phase != work {
		return // steps belong to the workflow's own work, not to its set-up
	}
	ev := e.progressEvent()
	ev.Step, ev.Total = step, total
	e.lastEvent = ev
	e.Observer.Observe(ev)
}

// ObserveWarning puts a warning on the live line, where it stays.
func (e *Run) ObserveWarning(msg string) {
	if e.Observer == nil {
		return
	}
	ev := e.progressEvent()
	ev.Warning = msg
	e.lastEvent = ev
	e.Observer.Observe(ev)
}

// progressEvent is the last event brought up to date: spend, rate, time.
func (e *Run) progressEvent() progress.Event {
	ev := e.lastEvent
	if ev.Phase == "" {
		ev.CheckpointStep = -1
	}
	ev.Workflow, ev.At, ev.BudgetUSD = e.Workflow, e.Now(), e.Frozen().MaxSpendUSD
	if e.state != nil {
		ev.Run = e.state.RunID
		ev.SpentUSD = e.SpentSoFar()
		ev.Attempt = len(e.state.Attempts)
		if a := e.state.Current(); a != nil && !a.RentedAt.IsZero() && a.ConfirmedAt.IsZero() {
			ev.DPH, ev.Instance = a.DPHTotal, int64(a.InstanceID)
		}
	}
	return ev
}
