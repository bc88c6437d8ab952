package runstate_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// A record whose data cannot be decoded stops the replay, naming the
// record: applying the zero value in its place would misstate the run (a
// confirmation for instance 0 whose own rental stays unconfirmed, a bid of
// $0/h, a dead-man switch armed on nothing). Each step Apply reads is
// tried, with a payload of the wrong shape.
func TestReplayRefusesAnUndecodableRecord(t *testing.T) {
	for _, tc := range []struct{ typ, step string }{
		{"done", runstate.StepFreeze},
		{"done", runstate.StepRent},
		{"failed", runstate.StepRent},
		{"done", runstate.StepAdopt},
		{"event", runstate.StepAdopt},
		{"done", runstate.StepReady},
		{"event", runstate.StepFailover},
		{"intent", runstate.StepDestroy},
		{"done", runstate.StepDestroy},
		{"done", runstate.StepConfirm},
		{"event", runstate.StepConfirm},
		{"event", runstate.StepBid},
		{"event", runstate.StepInterrupted},
		{"event", runstate.StepResumed},
		{"done", runstate.StepPriceIncrease},
		{"event", runstate.StepDeadMan},
	} {
		t.Run(tc.typ+"_"+tc.step, func(t *testing.T) {
			recs := records(t,
				"event", runstate.StepStart, runstate.StartData{RunID: "r1", Label: "vastrun-r1", Workflow: "ci"},
				"intent", runstate.StepRent, runstate.RentIntent{Offer: 7},
				"done", runstate.StepRent, runstate.InstanceData{Instance: 101},
				tc.typ, tc.step, map[string]any{},
			)
			// Every field these payloads share has the wrong type: an
			// object where a number, a string or a list is wanted.
			recs[3].Data = json.RawMessage(`{"instance_id":{"x":1},"manifest_sha256":{},"reason":{},"bid_dph":{},"ttl":{},"via":{}}`)
			st, err := runstate.Replay(recs)
			if err == nil {
				t.Fatalf("replay applied an undecodable %s %s record: attempts %v, extras %v", tc.typ, tc.step, attempts(st), st.Extras)
			}
			var ute *json.UnmarshalTypeError
			if !errors.As(err, &ute) {
				t.Errorf("error %q does not wrap the decoder's", err)
			}
			if want := "journal record 4 (" + tc.typ + " " + tc.step + ")"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name the record (%s)", err, want)
			}
		})
	}
}

func attempts(st *runstate.State) []provider.InstanceID {
	var out []provider.InstanceID
	for _, a := range st.Attempts {
		out = append(out, a.InstanceID)
	}
	return out
}
