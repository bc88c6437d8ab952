package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/spec"
)

// EvidenceDir is the evidence directory the run in runDir recorded in its
// state.json, or "" when it recorded none.
func EvidenceDir(runDir string) string {
	var sf stateFile
	if b, err := os.ReadFile(filepath.Join(runDir, "state.json")); err == nil {
		// A damaged state.json records no directory, as a missing one.
		if json.Unmarshal(b, &sf) != nil {
			return ""
		}
	}
	return sf.EvidenceDir
}

// Receipt is the receipt of the run in runDir, whose journal is recs
// (`vastrun report`): the receipt.json it wrote in its evidence directory,
// else the receipt its journal's outcome record carries, else, for a run
// whose controller was killed, the one Rebuild makes of the journal and
// the frozen manifest. A journal that does not replay, or a receipt that
// does not parse, is an error naming it.
func Receipt(runDir string, recs []journal.Record) (*receipt.Receipt, error) {
	st, err := runstate.Replay(recs)
	if err != nil {
		return nil, err
	}
	if ev := EvidenceDir(runDir); ev != "" {
		p := filepath.Join(ev, "receipt.json")
		b, err := os.ReadFile(p)
		if err == nil {
			var r receipt.Receipt
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("receipt %s: %w", p, err)
			}
			return &r, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if len(st.Receipt) > 0 { // the run ended: its outcome record holds its receipt
		var r receipt.Receipt
		if err := json.Unmarshal(st.Receipt, &r); err == nil {
			return &r, nil
		}
	}
	return rebuild(runDir, recs, st), nil
}

// JournalReceipt is the receipt a journal alone tells (rebuild without a
// frozen manifest).
func JournalReceipt(recs []journal.Record) (*receipt.Receipt, error) {
	st, err := runstate.Replay(recs)
	if err != nil {
		return nil, err
	}
	return rebuild("", recs, st), nil
}

// rebuild is the receipt of a run that wrote none (its controller was
// killed): its identity, attempts and manifest hash from the journal; its
// outcome (OutcomeUnfinished when the journal has none), finished at its
// last record; commit, image, budget and evidence directory from the
// frozen manifest in runDir, when it verifies against the journal's hash;
// the estimate from each attempt's rented time at its $/h (up to the last
// record for an instance not confirmed destroyed), and the charges the
// journal recorded; and every instance not confirmed destroyed under
// cleanup. Receipt.Next then says how to go on.
func rebuild(runDir string, recs []journal.Record, st *runstate.State) *receipt.Receipt {
	r := &receipt.Receipt{Schema: receipt.Schema, Workflow: st.Workflow, RunID: st.RunID, Label: st.Label, Outcome: st.Outcome,
		Attempts: st.Attempts, StartedAt: st.Started, ManifestSHA256: st.ManifestHash, Timings: map[string]float64{}}
	if r.Outcome == "" {
		r.Outcome = receipt.Unfinished
	}
	if n := len(recs); n > 0 {
		r.FinishedAt = recs[n-1].Time
	}
	if runDir != "" && st.ManifestHash != "" {
		if m, err := spec.Load(runDir, st.ManifestHash); err == nil {
			r.Commit, r.Image, r.Cost.MaxSpendUSD, r.EvidenceDir = m.Commit, m.Image, m.MaxSpendUSD, m.EvidenceDir
		}
	}
	r.Cost.EstimateUSD = round(estimate(st, r.FinishedAt), 1e6)
	charged, any := 0.0, false
	for _, a := range st.Attempts {
		if a.Charged != nil {
			charged, any = charged+*a.Charged, true
		}
	}
	if any {
		r.Cost.ChargedUSD = &charged
		r.Cost.ChargesNote = "from the charges the journal recorded"
	} else {
		r.Cost.ChargesNote = "not read: the run ended before its charges were (vastrun resume reads them)"
	}
	r.Cleanup.Unconfirmed = st.Unconfirmed()
	r.Cleanup.Confirmed = len(r.Cleanup.Unconfirmed) == 0
	return r
}
