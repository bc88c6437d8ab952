// Package runstate is a run as its journal tells it: the journal's step
// names and record payloads, and State, the fold of a run's records
// (Replay) that the lifecycle keeps live as it journals and that the
// receipt, `vastrun runs` and the team state read back. It imports no
// part of the lifecycle, so readers of runs need not.
package runstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Journal record steps (the journal's "step" field).
const (
	StepStart    = "start"
	StepGate     = "gate"
	StepFreeze   = "freeze"
	StepSelect   = "select"
	StepApprove  = "approve"
	StepRent     = "rent"
	StepAdopt    = "adopt"
	StepReady    = "ready"
	StepVerify   = "verify"
	StepWork     = "work"
	StepDestroy  = "destroy"
	StepConfirm  = "confirm"
	StepOutcome  = "outcome"
	StepAlert    = "alert"
	StepFailover = "failover"
	StepPaths    = "paths"
	StepConnect  = "connect"
	StepCharges  = "charges"
)

// RecCondition is the journal record type of a step's condition.
const RecCondition = "condition"

// State is what the journal says about a run.
type State struct {
	RunID        string
	Label        string
	Workflow     string
	ManifestHash string
	Attempts     []*receipt.Attempt
	// Extras are instances found carrying the label that the run did not
	// rent itself (lost create responses, duplicates); they are destroyed.
	Extras []provider.InstanceID
	// Late are the extras that were a create processed late: adopted with
	// ReasonLateCreate after the run's label was possibly live.
	Late []provider.InstanceID
	// PossiblyLiveSince is when the latest create judged not rented after
	// the reconcile grace was sent (zero: none). Vast can process a create
	// minutes late, so the label may still get an instance: the teardown
	// watches it for a while after this.
	PossiblyLiveSince time.Time
	Outcome           receipt.Outcome
	Approved          bool
	Started           time.Time
	// Receipt is the receipt the run's terminal outcome record carries
	// (receipt.json's document, redacted, as the journal holds it); nil
	// when the record has none (an older journal, `down --label`).
	Receipt json.RawMessage
	// OutcomeAt is when the outcome was journaled.
	OutcomeAt time.Time
	// Conditions hold each step's last journaled condition, by step name.
	Conditions map[string]Condition
}

// Condition statuses, as in cluster-api: a step whose condition is True
// has nothing left to do.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Condition is what a step last journaled about itself: its status, a
// machine-readable reason (an outcome class or "Done"), a message for
// people, the instance it was about (0: the run as a whole), and when.
type Condition struct {
	Status   string              `json:"status"`
	Reason   string              `json:"reason,omitempty"`
	Message  string              `json:"message,omitempty"`
	Instance provider.InstanceID `json:"instance_id,omitempty"`
	At       time.Time           `json:"-"`
}

// IsTrue reports whether the condition says the step is done.
func (c Condition) IsTrue() bool { return c.Status == ConditionTrue }

// Condition is step's last condition; Unknown when none was journaled.
func (s *State) Condition(step string) Condition {
	if c, ok := s.Conditions[step]; ok {
		return c
	}
	return Condition{Status: ConditionUnknown}
}

// Finished reports whether the journal holds the run's terminal outcome:
// its controller reached the end, tore down and wrote its receipt, so
// the run is never run again (resume gives the receipt back). Two ends
// are not a verdict and stay resumable: a run that ended because nobody
// approved its plan, with nothing rented (declined, or no --yes), where
// resume asks again; and a run interrupted by a signal (Ctrl-C, a CI
// cancellation), which resume continues as it continues a run whose
// controller died (training from its last committed checkpoint).
func (s *State) Finished() bool {
	switch s.Outcome {
	case "", receipt.Interrupted:
		return false
	case receipt.Cancelled, receipt.NotApproved:
		return len(s.Attempts) > 0
	}
	return true
}

// Instances lists every instance the run knows of, its own and extras.
func (s *State) Instances() []provider.InstanceID {
	seen := map[provider.InstanceID]bool{}
	var out []provider.InstanceID
	for _, a := range s.Attempts {
		if a.InstanceID != 0 && !seen[a.InstanceID] {
			seen[a.InstanceID] = true
			out = append(out, a.InstanceID)
		}
	}
	for _, id := range s.Extras {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Current is the latest attempt, or nil.
func (s *State) Current() *receipt.Attempt {
	if len(s.Attempts) == 0 {
		return nil
	}
	return s.Attempts[len(s.Attempts)-1]
}

func (s *State) AttemptFor(id provider.InstanceID) *receipt.Attempt {
	for _, a := range s.Attempts {
		if a.InstanceID == id {
			return a
		}
	}
	return nil
}

// AmbiguousRent reports a rent intent with no known instance and no
// recorded failure: the create may have rented something unseen.
func (s *State) AmbiguousRent() bool {
	for _, a := range s.Attempts {
		if a.InstanceID == 0 && a.Failure == "" {
			return true
		}
	}
	return false
}

// Unconfirmed lists instances whose destruction is not confirmed.
func (s *State) Unconfirmed() []provider.InstanceID {
	confirmed := map[provider.InstanceID]bool{}
	for _, a := range s.Attempts {
		if a.Confirmed {
			confirmed[a.InstanceID] = true
		}
	}
	out := []provider.InstanceID{}
	for _, id := range s.Instances() {
		if !confirmed[id] {
			out = append(out, id)
		}
	}
	return out
}

// StartData is the payload of the run's first record.
type StartData struct {
	RunID    string `json:"run_id"`
	Label    string `json:"label"`
	Workflow string `json:"workflow"`
}

// RentIntent is the payload of a rent intent: the attempt as planned,
// journaled before the create is sent.
type RentIntent struct {
	Label string           `json:"label"`
	Offer provider.OfferID `json:"offer_id"`
	receipt.Attempt
}

// OutcomeData is the payload of the run's terminal record: how it ended
// and its receipt (receipt.json's document, redacted). The record is
// written before receipt.json, so a crash between the two leaves a run
// whose receipt the journal still holds.
type OutcomeData struct {
	Outcome receipt.Outcome `json:"outcome"`
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// InstanceData is the payload of most per-instance records: the instance,
// why, and how its destruction was confirmed.
type InstanceData struct {
	Instance provider.InstanceID `json:"instance_id"`
	Reason   string              `json:"reason,omitempty"`
	Via      []string            `json:"via,omitempty"`
	// Ambiguous, on a failed rent, says the create's outcome was never
	// known: it was judged not rented because nothing carried the label
	// within the grace, so the label stays possibly live.
	Ambiguous bool `json:"ambiguous,omitempty"`
}

// ChargesData is the payload of `event charges`: what the marketplace
// charged for each instance confirmed destroyed, read at the run's end, so
// that whoever replays the run (the team ledger's settlement, `runs`)
// sees the charges, not only the receipt.
type ChargesData struct {
	Charges map[provider.InstanceID]float64 `json:"charges"`
}

// ReasonLateCreate is the reason of an adopt event for an instance that
// appeared with the run's label after a create was judged not rented.
const ReasonLateCreate = "late create"

// Replay rebuilds State from journal records: a fold over Apply, so a
// resumed run and a live one see the same state for the same records.
func Replay(recs []journal.Record) (*State, error) {
	s := &State{}
	for _, r := range recs {
		if err := s.Apply(r); err != nil {
			return nil, err
		}
	}
	if s.RunID == "" && len(recs) > 0 {
		return nil, errors.New("journal does not start with a run record")
	}
	return s, nil
}

// Apply updates the state from one journal record. The engine applies each
// record as it appends it, so no step ever re-reads the journal. A record
// whose data cannot be decoded is an error: applying the zero value in its
// place would misstate the run (an instance 0 rented, a destruction never
// marked).
func (s *State) Apply(r journal.Record) error {
	for _, apply := range []func(*State, journal.Record) error{
		applyBid,      // interruptible rentals' records (bids.go)
		applyContract, // a host's price increases (contract.go)
		applyDeadMan,  // the dead-man switch's arming (deadman.go)
	} {
		if err := apply(s, r); err != nil {
			return err
		}
	}
	switch {
	case r.Type == RecCondition:
		var c Condition
		if err := decode(r, &c); err != nil {
			return err
		}
		c.At = r.Time
		if s.Conditions == nil {
			s.Conditions = map[string]Condition{}
		}
		s.Conditions[r.Step] = c
	case r.Step == StepStart:
		var d StartData
		if err := decode(r, &d); err != nil {
			return err
		}
		s.RunID, s.Label, s.Workflow, s.Started = d.RunID, d.Label, d.Workflow, r.Time
	case r.Step == StepFreeze && r.Type == "done":
		var d struct {
			Hash string `json:"manifest_sha256"`
		}
		if err := decode(r, &d); err != nil {
			return err
		}
		s.ManifestHash = d.Hash
	case r.Step == StepApprove && r.Type == "done":
		s.Approved = true
	case r.Step == StepRent && r.Type == "intent":
		var d RentIntent
		if err := decode(r, &d); err != nil {
			return err
		}
		a := d.Attempt
		a.OfferID, a.IntentAt = d.Offer, r.Time
		s.Attempts = append(s.Attempts, &a)
	case r.Step == StepRent && r.Type == "done", r.Step == StepAdopt && r.Type == "done":
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.Current(); a != nil && a.InstanceID == 0 {
			a.InstanceID, a.RentedAt = d.Instance, r.Time
		}
	case r.Step == StepRent && r.Type == "failed":
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.Current(); a != nil && a.InstanceID == 0 {
			a.Failure = d.Reason
			if d.Ambiguous && a.IntentAt.After(s.PossiblyLiveSince) {
				s.PossiblyLiveSince = a.IntentAt // the create went out right after its intent
			}
		}
	case r.Step == StepAdopt && r.Type == "event": // an extra found by label
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if s.AttemptFor(d.Instance) == nil && !slices.Contains(s.Extras, d.Instance) {
			s.Extras = append(s.Extras, d.Instance)
			if d.Reason == ReasonLateCreate {
				s.Late = append(s.Late, d.Instance)
			}
		}
	case r.Step == StepReady && r.Type == "done":
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil {
			a.RunningAt = r.Time
		}
	case r.Step == StepFailover:
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil {
			a.Failure = d.Reason
		}
		// The rental is being replaced: its per-instance steps start over.
		for _, step := range []string{StepRent, StepReady, StepConnect, StepVerify} {
			delete(s.Conditions, step)
		}
	case r.Step == StepDestroy && r.Type == "intent":
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil && a.DestroySentAt.IsZero() {
			a.DestroySentAt = r.Time
		}
	case r.Step == StepDestroy && r.Type == "done":
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil {
			a.Destroyed = true
		}
	case r.Step == StepConfirm && r.Type == "done":
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		a := s.AttemptFor(d.Instance)
		if a == nil { // an extra: track its confirmation as a pseudo-attempt
			a = &receipt.Attempt{InstanceID: d.Instance, Failure: "extra instance carrying the run label"}
			s.Attempts = append(s.Attempts, a)
			a.IntentAt = r.Time
		}
		a.Destroyed, a.Confirmed, a.ConfirmedBy, a.ConfirmedAt = true, true, d.Via, r.Time
	case r.Step == StepConfirm && r.Type == "event": // more evidence for a confirmed destruction
		var d InstanceData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil && a.Confirmed {
			a.ConfirmedBy = d.Via
		}
	case r.Step == StepCharges && r.Type == "event":
		var d ChargesData
		if err := decode(r, &d); err != nil {
			return err
		}
		for id, usd := range d.Charges {
			if a := s.AttemptFor(id); a != nil && id != 0 {
				a.Charged = &usd
			}
		}
	case r.Step == StepOutcome:
		var d OutcomeData
		if err := decode(r, &d); err != nil {
			return err
		}
		s.Outcome, s.Receipt, s.OutcomeAt = d.Outcome, d.Receipt, r.Time
	}
	return nil
}

// decode decodes r's data into v, naming the record when it cannot.
func decode(r journal.Record, v any) error {
	if err := r.Decode(v); err != nil {
		return fmt.Errorf("journal record %d (%s %s): %w", r.Seq, r.Type, r.Step, err)
	}
	return nil
}

// LoadState reads a run directory's journal without locking it.
func LoadState(runDir string) (*State, error) {
	recs, err := journal.Read(runDir)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", runDir, err)
	}
	return Replay(recs)
}
