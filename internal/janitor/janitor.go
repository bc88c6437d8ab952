// Package janitor decides what to clean up and how a rental looks now: the
// selection behind `vastrun reap`, the targeting behind `vastrun down
// --instance`, the live probing behind `vastrun status` and the key analysis
// behind `vastrun doctor`. The decisions are pure functions of listings and
// labels, table-tested without a simulator; the side effects go through the
// small interfaces below (a provider.InstanceReader, a Confirmer), which the
// CLI fills with the real client and run.Confirmer.
//
// janitor imports provider and label only: it never names a workflow, and
// the lifecycle core does not import it.
package janitor

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/provider"
)

// Candidate is an instance whose vastrun label has expired.
type Candidate struct {
	ID     provider.InstanceID `json:"instance_id"`
	Label  string              `json:"label"`
	Expiry time.Time           `json:"expired_at"`
	Result string              `json:"result"`
}

// Expired selects, from a listing of the account, the instances whose label
// is a valid vastrun label under prefix that has expired at now. Anything
// else — no label, a label that fails its own check, another prefix, an
// expiry still ahead — is never a candidate: reaping needs no state, so the
// label alone must prove the instance is vastrun's and done.
func Expired(list []provider.Instance, prefix string, now time.Time) []Candidate {
	out := []Candidate{}
	for _, in := range list {
		l, err := label.Parse(in.Label)
		if err != nil || !strings.HasPrefix(in.Label, prefix) || !l.Expired(now) {
			continue
		}
		out = append(out, Candidate{ID: in.ID, Label: in.Label, Expiry: l.Expiry, Result: "would destroy (dry run)"})
	}
	return out
}

// Confirmer destroys instances and confirms each gone (absent by id, or
// from a complete listing of its label) in a few calls, whatever their
// number; run.Confirmer is the real one.
type Confirmer interface {
	DestroyConfirmAll(ctx context.Context, targets map[provider.InstanceID]string, deadline time.Time) (map[provider.InstanceID][]string, map[provider.InstanceID]error)
}

// Reap destroys the candidates through c, confirmed, recording the result
// in place; it returns the ids whose destruction could not be confirmed.
func Reap(ctx context.Context, c Confirmer, cands []Candidate, deadline time.Time) []provider.InstanceID {
	targets := make(map[provider.InstanceID]string, len(cands))
	for _, cd := range cands {
		targets[cd.ID] = cd.Label
	}
	_, errs := c.DestroyConfirmAll(ctx, targets, deadline)
	var failed []provider.InstanceID
	for i := range cands {
		if err := errs[cands[i].ID]; err != nil {
			cands[i].Result = "NOT confirmed: " + err.Error()
			failed = append(failed, cands[i].ID)
			continue
		}
		cands[i].Result = "destroyed (confirmed)"
	}
	return failed
}

// Targets are the instances `down --instance` will destroy, each with the
// label its confirmation lists (learnt from the API; "" when unknown).
type Targets struct {
	Labels map[provider.InstanceID]string
	// NotFound are requested ids the account does not have. Destroy is
	// still sent to them (a fresh rental can lag reads), but they are
	// reported as not found rather than destroyed.
	NotFound map[provider.InstanceID]bool
}

// IDs are the targets in ascending order.
func (t Targets) IDs() []provider.InstanceID {
	out := make([]provider.InstanceID, 0, len(t.Labels))
	for id := range t.Labels {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Drop removes ids that were already destroyed (by a label sweep).
func (t Targets) Drop(ids []provider.InstanceID) {
	for _, id := range ids {
		delete(t.Labels, id)
	}
}

// Target reads each requested instance once, to learn its label. A read
// that fails for another reason than "not found" leaves the label unknown:
// the destroy still goes ahead, confirmed by id.
func Target(ctx context.Context, r provider.InstanceReader, ids []int64) Targets {
	t := Targets{Labels: map[provider.InstanceID]string{}, NotFound: map[provider.InstanceID]bool{}}
	for _, raw := range ids {
		id := provider.InstanceID(raw)
		if _, seen := t.Labels[id]; seen {
			continue
		}
		t.Labels[id] = ""
		in, err := r.ShowInstance(ctx, id)
		switch {
		case err == nil:
			t.Labels[id] = in.Label
		case errors.Is(err, provider.ErrNotFound):
			t.NotFound[id] = true
		}
	}
	return t
}

// LiveStatus is one instance's live state from a read of it, as `status`
// reports it: "gone" when the account no longer has it, "unknown" with the
// read's error when the read failed, otherwise the API's actual status
// ("" when it has none yet). Display placeholders are the caller's.
func LiveStatus(in provider.Instance, err error) (live, readErr string) {
	switch {
	case errors.Is(err, provider.ErrNotFound):
		return "gone", ""
	case err != nil:
		return "unknown", err.Error()
	}
	return in.ActualStatus, ""
}

// RiskyCategories are permissions a CI key should not hold.
var RiskyCategories = []string{"billing_write", "user_write", "team_write", "machine_write"}

// KeyReadOnly says whether the key with id may change nothing (no *_write
// category, not full access): enough for plan, offers, validate and
// status, never for apply or down. known is false when the key is not
// among the account's keys.
func KeyReadOnly(keys []provider.APIKeyInfo, id int64) (readOnly, known bool) {
	for _, k := range keys {
		if k.ID != id {
			continue
		}
		if k.Full {
			return false, true
		}
		for c := range k.Permissions {
			if strings.HasSuffix(c, "_write") {
				return false, true
			}
		}
		return true, true
	}
	return false, false
}

// KeyScope says what the key with id may do beyond what vastrun needs.
// known is false when the key is not among the account's keys, so its
// permissions cannot be judged (a warning, never a pass by default).
func KeyScope(keys []provider.APIKeyInfo, id int64) (risky []string, known bool) {
	for _, k := range keys {
		if k.ID != id {
			continue
		}
		if k.Full {
			return []string{"full access (including billing and account settings)"}, true
		}
		for _, c := range RiskyCategories {
			if _, ok := k.Permissions[c]; ok {
				risky = append(risky, c)
			}
		}
		return risky, true
	}
	return nil, false
}
