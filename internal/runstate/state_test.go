package runstate

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/receipt"
)

func rec(seq int, typ, step string, data any) journal.Record {
	b, _ := json.Marshal(data)
	return journal.Record{V: journal.Version, Seq: seq, Time: time.Date(2026, 12, 1, 10, 0, seq, 0, time.UTC), Type: typ, Step: step, Data: b}
}

// A run is finished once its terminal outcome record is journaled —
// unless nobody approved its plan and nothing was rented, which a resume
// asks again.
func TestFinished(t *testing.T) {
	start := rec(1, "event", StepStart, StartData{RunID: "r1", Label: "l1", Workflow: "ci"})
	rented := []journal.Record{
		rec(2, "intent", StepRent, RentIntent{Label: "l1", Offer: 7}),
		rec(3, "done", StepRent, InstanceData{Instance: 42}),
	}
	outcome := func(o receipt.Outcome) journal.Record {
		return rec(9, "event", StepOutcome, OutcomeData{Outcome: o, Receipt: json.RawMessage(`{"outcome":"` + string(o) + `"}`)})
	}
	for _, tc := range []struct {
		name string
		recs []journal.Record
		want bool
	}{
		{"no outcome yet: a dead controller's run", append([]journal.Record{start}, rented...), false},
		{"passed", append(append([]journal.Record{start}, rented...), outcome(receipt.Passed)), true},
		{"failed", append(append([]journal.Record{start}, rented...), outcome(receipt.Failed)), true},
		{"gated, nothing rented", []journal.Record{start, outcome(receipt.Gated)}, true},
		{"interrupted and torn down: resume continues it", append(append([]journal.Record{start}, rented...), outcome(receipt.Interrupted)), false},
		{"declined at the prompt, nothing rented", []journal.Record{start, outcome(receipt.Cancelled)}, false},
		{"no --yes, nothing rented", []journal.Record{start, outcome(receipt.NotApproved)}, false},
		{"a replacement not approved after a rental", append(append([]journal.Record{start}, rented...), outcome(receipt.NotApproved)), true},
		{"down by label, no receipt", append(append([]journal.Record{start}, rented...), rec(9, "event", StepOutcome, map[string]any{"outcome": "down"})), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Replay(tc.recs)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Finished(); got != tc.want {
				t.Fatalf("Finished() = %v, want %v (outcome %q, %d attempts)", got, tc.want, st.Outcome, len(st.Attempts))
			}
		})
	}
}

// The terminal record carries the receipt; an older one (the outcome
// alone) leaves none, and the latest terminal record is the one that
// holds.
func TestOutcomeRecordCarriesTheReceipt(t *testing.T) {
	start := rec(1, "event", StepStart, StartData{RunID: "r1", Label: "l1", Workflow: "ci"})
	doc := json.RawMessage(`{"schema":"vastrun.receipt/v1","outcome":"passed"}`)
	st, err := Replay([]journal.Record{start, rec(2, "event", StepOutcome, OutcomeData{Outcome: receipt.Passed, Receipt: doc})})
	if err != nil {
		t.Fatal(err)
	}
	if string(st.Receipt) != string(doc) || st.Outcome != receipt.Passed || !st.OutcomeAt.Equal(time.Date(2026, 12, 1, 10, 0, 2, 0, time.UTC)) {
		t.Fatalf("state %q %q %v", st.Outcome, st.Receipt, st.OutcomeAt)
	}
	old, err := Replay([]journal.Record{start, rec(2, "event", StepOutcome, map[string]any{"outcome": "failed"})})
	if err != nil {
		t.Fatal(err)
	}
	if old.Receipt != nil || old.Outcome != receipt.Failed || !old.Finished() {
		t.Fatalf("an older outcome record: %q %q finished=%v", old.Outcome, old.Receipt, old.Finished())
	}
	later := json.RawMessage(`{"outcome":"passed","cleanup":{"confirmed":true}}`)
	st2, err := Replay([]journal.Record{start, rec(2, "event", StepOutcome, OutcomeData{Outcome: receipt.Passed, Receipt: doc}),
		rec(3, "event", StepOutcome, OutcomeData{Outcome: receipt.Passed, Receipt: later})})
	if err != nil {
		t.Fatal(err)
	}
	if string(st2.Receipt) != string(later) {
		t.Fatalf("receipt %s, want the latest %s", st2.Receipt, later)
	}
	if _, err := Replay([]journal.Record{start, {V: journal.Version, Seq: 2, Type: "event", Step: StepOutcome, Data: []byte(`{"outcome": 3}`)}}); err == nil {
		t.Fatal("an outcome record that does not decode was accepted")
	}
}
