package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// A finished run is never run again. Its journal ends with the terminal
// outcome record (runstate.State.Finished), which carries its receipt;
// Execute on such a run (resume, or a team controller that took a
// finished run's released lease) gives that receipt back instead of
// walking the steps: nothing is rented, listed or run. The one thing it
// may still do is the run's own teardown, when the run ended without it
// being confirmed: those instances are the run's, destroying them was
// part of the run the person approved, and leaving them to bill is the
// one promise the run has not kept.

// FinishedError is what Execute returns for a run that had already
// finished: its class is the run's own outcome (ClassError), so a
// resumed finished run exits as the run did (0 when it passed).
type FinishedError struct {
	RunID    string
	Workflow string
	Outcome  receipt.Outcome
}

func (e *FinishedError) Error() string {
	return fmt.Sprintf("run %s had already finished (%s): a finished run is never run again, nothing was rented; its receipt is as it was written", e.RunID, e.Outcome)
}

// OutcomeClass is the finished run's own outcome.
func (e *FinishedError) OutcomeClass() receipt.Outcome { return e.Outcome }

// resumeFinished gives back the receipt of a run whose journal says it
// finished: the journaled one, or one built from the journal for a
// journal older than that (or a run ended by `down --label`). A
// receipt.json lost to a crash after the terminal record is written
// again, byte for byte, in the evidence directory the receipt names (when
// that directory is there). A teardown the run could not confirm is tried
// again; the receipt then says what holds now, is journaled in a new
// terminal record and rewritten.
func resumeFinished(ctx context.Context, e *Scope) (*receipt.Receipt, error) {
	st := e.state
	doc := st.Receipt
	r, err := finishedReceipt(e)
	if err != nil {
		return nil, err
	}
	done := &FinishedError{RunID: st.RunID, Workflow: st.Workflow, Outcome: st.Outcome}
	ids := st.Unconfirmed()
	if len(ids) == 0 {
		if len(doc) > 0 {
			writeFinishedReceipt(e, r, doc, false)
		}
		return r, done
	}
	e.Infof("run %s finished with instances %v not confirmed destroyed: trying its teardown again (nothing is rented or run)", st.RunID, ids)
	if r.EvidenceDir != "" {
		e.EvidenceDir = r.EvidenceDir // state.json keeps naming the run's own evidence
	}
	terr := e.Teardown(ctx)
	refreshCleanup(e, r)
	doc = receiptDoc(e, r)
	if err := e.Record("event", stepOutcome, runstate.OutcomeData{Outcome: st.Outcome, Receipt: validJSON(doc)}); err != nil {
		terr = errors.Join(terr, err)
	} else {
		writeFinishedReceipt(e, r, e.state.Receipt, true)
	}
	// A teardown record the journal refused fails this try too.
	if terr = withJournalErr(e, terr); terr != nil {
		return r, errors.Join(done, terr)
	}
	return r, done
}

// terminalRecord journals the run's outcome. One that cannot be written
// leaves the run unfinished in its journal (a resume would run it again):
// people are told so; the receipt still says how this try ended.
func terminalRecord(e *Scope, d runstate.OutcomeData) {
	if err := e.Record("event", stepOutcome, d); err != nil {
		e.Infof("run %s: its outcome could not be journaled, so a resume would not know it finished: %v", e.state.RunID, err)
	}
}

// finishedReceipt is the receipt the run's terminal record carries. When
// it carries none (an older journal, `down --label`), it is the run's
// receipt.json where state.json says its evidence is, or else the one
// the journal alone tells.
func finishedReceipt(e *Scope) (*receipt.Receipt, error) {
	st := e.state
	if len(st.Receipt) > 0 {
		var r receipt.Receipt
		if err := json.Unmarshal(st.Receipt, &r); err != nil {
			return nil, fmt.Errorf("run %s: the receipt in its journal: %w", st.RunID, err)
		}
		return &r, nil
	}
	evidence := stateFileEvidence(e.runDir)
	if b, err := os.ReadFile(filepath.Join(evidence, "receipt.json")); evidence != "" && err == nil {
		var r receipt.Receipt
		if json.Unmarshal(b, &r) == nil && r.RunID == st.RunID && r.Outcome == st.Outcome {
			return &r, nil
		}
	}
	// Times stay the journal's: a scaled clock of this process is not the
	// one the run was timed on.
	un := st.Unconfirmed()
	r := &receipt.Receipt{Schema: receipt.Schema, Workflow: st.Workflow, RunID: st.RunID, Label: st.Label, Outcome: st.Outcome,
		ManifestSHA256: st.ManifestHash, Attempts: roundedAttempts(st.Attempts), Timings: map[string]float64{},
		StartedAt: st.Started, FinishedAt: st.OutcomeAt, EvidenceDir: evidence,
		Cleanup: receipt.Cleanup{Confirmed: len(un) == 0, Unconfirmed: un}}
	if m, err := LoadManifest(e.runDir, st.ManifestHash); err == nil {
		r.Commit, r.Image = m.Commit, m.Image
	}
	return r, nil
}

// writeFinishedReceipt writes receipt.json (from the journal's document)
// and summary.md into the evidence directory r names: when they are
// missing, or always when the receipt changed. A directory that is not
// there (a team controller on another machine) gets nothing: the
// receipt is printed all the same.
func writeFinishedReceipt(e *Scope, r *receipt.Receipt, doc []byte, changed bool) {
	if r.EvidenceDir == "" || len(doc) == 0 {
		return
	}
	if fi, err := os.Stat(r.EvidenceDir); err != nil || !fi.IsDir() {
		return
	}
	path := filepath.Join(r.EvidenceDir, "receipt.json")
	if _, err := os.Stat(path); err == nil && !changed {
		return
	}
	if err := e.writeFileAtomic(path, receiptFile(doc), 0o644); err != nil {
		e.Infof("could not write %s: %v", path, err)
		return
	}
	md := e.Redactor.String(receipt.Summary(r))
	if err := e.writeFileAtomic(filepath.Join(r.EvidenceDir, "summary.md"), []byte(md), 0o644); err != nil {
		e.Infof("could not write the summary beside %s: %v", path, err)
	}
}

// refreshCleanup brings r's attempts and cleanup up to what the journal
// says after a teardown tried again: the confirmations it made (in the
// receipt's clock: wall-clock under a scaled simulator).
func refreshCleanup(e *Scope, r *receipt.Receipt) {
	wall := func(t time.Time) time.Time { return t }
	if sc, ok := e.Clock.(*clock.Scaled); ok && sc.Factor != 1 {
		wall = func(t time.Time) time.Time {
			if t.IsZero() {
				return t
			}
			return sc.Wall(t).UTC()
		}
	}
	for _, a := range e.state.Attempts {
		if !a.Confirmed || a.InstanceID == 0 {
			continue
		}
		ra := receiptAttempt(r, a.InstanceID)
		if ra == nil { // an extra the retried teardown found by label
			c := roundedAttempts([]*receipt.Attempt{a})[0]
			c.IntentAt = wall(c.IntentAt)
			r.Attempts = append(r.Attempts, c)
			ra = c
		}
		if ra.DestroySentAt.IsZero() {
			ra.DestroySentAt = wall(a.DestroySentAt)
		}
		ra.Destroyed, ra.Confirmed, ra.ConfirmedBy, ra.ConfirmedAt = true, true, a.ConfirmedBy, wall(a.ConfirmedAt)
	}
	un := e.state.Unconfirmed()
	r.Cleanup = receipt.Cleanup{Confirmed: len(un) == 0, Unconfirmed: un, AlertSent: r.Cleanup.AlertSent || e.cost.AlertSent}
}

func receiptAttempt(r *receipt.Receipt, id provider.InstanceID) *receipt.Attempt {
	for _, a := range r.Attempts {
		if a.InstanceID == id {
			return a
		}
	}
	return nil
}

// receiptDoc is r as the journal's terminal record holds it: compact
// JSON, redacted.
func receiptDoc(e *Scope, r *receipt.Receipt) []byte {
	b, _ := json.Marshal(r)
	return e.Redactor.JSON(b)
}

// validJSON is doc, or nil when redaction had to mask it as text (it no
// longer parses): the journal then holds no receipt, and receipt.json
// is written as it is.
func validJSON(doc []byte) json.RawMessage {
	if !json.Valid(doc) {
		return nil
	}
	return doc
}

// receiptFile is receipt.json's bytes for a receipt document: indented,
// one trailing newline. A run's end and a resume of its finished run
// both write it from the journal's document, so they agree byte for byte.
func receiptFile(doc []byte) []byte {
	var b bytes.Buffer
	if err := json.Indent(&b, doc, "", "  "); err != nil {
		return append(bytes.Clone(doc), '\n') // masked as text: kept as it is
	}
	return append(b.Bytes(), '\n')
}

// stateFileEvidence is the evidence directory state.json names, or "".
func stateFileEvidence(runDir string) string {
	b, err := os.ReadFile(filepath.Join(runDir, "state.json"))
	if err != nil {
		return ""
	}
	var s stateFile
	if json.Unmarshal(b, &s) != nil {
		return ""
	}
	return s.EvidenceDir
}
