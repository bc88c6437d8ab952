package runstate_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// records builds a journal from (type, step, data) triples, a minute apart.
func records(t *testing.T, rs ...any) []journal.Record {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var out []journal.Record
	for i := 0; i+2 < len(rs); i += 3 {
		b, err := json.Marshal(rs[i+2])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, journal.Record{V: journal.Version, Seq: len(out) + 1, Time: t0.Add(time.Duration(len(out)) * time.Minute),
			Type: rs[i].(string), Step: rs[i+1].(string), Data: b})
	}
	return out
}

// The charges read at a run's end are journaled, and replaying the journal
// puts each on its attempt: a resumed or listing reader sees them, not only
// the receipt. An id the run does not know is ignored.
func TestReplayCharges(t *testing.T) {
	recs := records(t,
		"event", runstate.StepStart, runstate.StartData{RunID: "r1", Label: "vastrun-r1", Workflow: "ci"},
		"intent", runstate.StepRent, runstate.RentIntent{Offer: 7},
		"done", runstate.StepRent, runstate.InstanceData{Instance: 101},
		"intent", runstate.StepRent, runstate.RentIntent{Offer: 8},
		"done", runstate.StepRent, runstate.InstanceData{Instance: 102},
		"done", runstate.StepConfirm, runstate.InstanceData{Instance: 101, Via: []string{"show"}},
		"done", runstate.StepConfirm, runstate.InstanceData{Instance: 102, Via: []string{"show"}},
		"event", runstate.StepOutcome, map[string]string{"outcome": "passed"},
		"event", runstate.StepCharges, runstate.ChargesData{Charges: map[provider.InstanceID]float64{101: 0.0035, 102: 0.01, 999: 5}},
	)
	st, err := runstate.Replay(recs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[provider.InstanceID]float64{101: 0.0035, 102: 0.01}
	for _, a := range st.Attempts {
		if a.Charged == nil || *a.Charged != want[a.InstanceID] {
			t.Errorf("instance %d: charged %v, want %v", a.InstanceID, a.Charged, want[a.InstanceID])
		}
	}
	if len(st.Attempts) != 2 {
		t.Errorf("%d attempts, want 2 (an unknown id in the charges adds none)", len(st.Attempts))
	}

	// A later read (down after up) replaces an earlier one.
	recs = append(recs, records(t, "event", runstate.StepCharges, runstate.ChargesData{Charges: map[provider.InstanceID]float64{101: 0.004}})...)
	recs[len(recs)-1].Seq = len(recs)
	st, err = runstate.Replay(recs)
	if err != nil {
		t.Fatal(err)
	}
	if a := st.AttemptFor(101); a.Charged == nil || *a.Charged != 0.004 {
		t.Errorf("after a second read: instance 101 charged %v, want 0.004", a.Charged)
	}
}
