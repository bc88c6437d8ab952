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
// or, when it wrote none (its controller was killed), JournalReceipt. A
// journal that does not replay, or a receipt that does not parse, is an
// error naming it.
func Receipt(runDir string, recs []journal.Record) (*receipt.Receipt, error) {
	fromJournal, err := JournalReceipt(recs)
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
	return fromJournal, nil
}

// JournalReceipt is the receipt a journal alone tells: the run's identity,
// attempts and manifest hash, its outcome (OutcomeUnfinished when it has
// none), finished at its last record, and every instance not confirmed
// destroyed listed under cleanup.
func JournalReceipt(recs []journal.Record) (*receipt.Receipt, error) {
	st, err := runstate.Replay(recs)
	if err != nil {
		return nil, err
	}
	r := &receipt.Receipt{Schema: receipt.Schema, Workflow: st.Workflow, RunID: st.RunID, Label: st.Label, Outcome: st.Outcome,
		Attempts: st.Attempts, StartedAt: st.Started, ManifestSHA256: st.ManifestHash, Timings: map[string]float64{}}
	if r.Outcome == "" {
		r.Outcome = OutcomeUnfinished
	}
	if n := len(recs); n > 0 {
		r.FinishedAt = recs[n-1].Time
	}
	r.Cleanup.Unconfirmed = st.Unconfirmed()
	r.Cleanup.Confirmed = len(r.Cleanup.Unconfirmed) == 0
	return r, nil
}
