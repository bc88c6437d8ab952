package lifecycle

import (
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// RecordSwept records in an opened run that a label sweep made outside
// the engine (`down --label`) destroyed and confirmed ids and found the
// label clean, so that the run's journal and state.json agree with the
// marketplace. An id the run never learned (a create whose answer was
// lost) is adopted as that rental first.
func (e *Scope) RecordSwept(ids []provider.InstanceID) error {
	for _, id := range ids {
		if e.state.AttemptFor(id) == nil && !containsID(e.state.Extras, id) {
			if a := e.state.Current(); a != nil && a.InstanceID == 0 && a.Failure == "" {
				if err := e.Record("done", stepAdopt, runstate.InstanceData{Instance: id, Reason: "found by label (down --label)"}); err != nil {
					return err
				}
			} else if err := e.Record("event", stepAdopt, runstate.InstanceData{Instance: id, Reason: "found by label (down --label)"}); err != nil {
				return err
			}
		}
		if err := e.Record("done", stepConfirm, runstate.InstanceData{Instance: id, Via: []string{"show", "label_listing"}}); err != nil {
			return err
		}
	}
	return e.Record("event", stepOutcome, runstate.OutcomeData{Outcome: OutcomeDown})
}
