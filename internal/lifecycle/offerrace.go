package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
)

// Offer races: between the search and the create, someone else can rent
// the chosen offer (410 no_such_ask). vastrun then walks on through the
// other offers that meet the policy, cheapest first, re-searching when
// that list is used up, until the ready deadline. Every rental stays
// within what was approved: an offer above the approved ceiling (the
// policy's max_dph, else the approved offer's own price) is shown and
// approved again, and none may break the budget.

// raceCeiling is the $/h up to which the approval of an offer at dph also
// covers its replacements.
func raceCeiling(e *Scope, dph float64) float64 {
	if m := e.Frozen().Policy.MaxDPH; m > 0 {
		return max(m, dph)
	}
	return dph
}

// isOfferGone reports a create that rented nothing because the offer went.
func isOfferGone(err error) bool {
	return errors.Is(err, provider.ErrOfferGone) || errors.Is(err, errNotRented)
}

// rentRace is called after renting offer failed with err because the offer
// was gone. It returns the instance rented from another offer meeting the
// policy, and that offer, or the error that ended the race.
func rentRace(ctx context.Context, e *Scope, offer provider.Offer, err error, exclude *[]int64, attempt int) (provider.InstanceID, provider.Offer, error) {
	p := e.Frozen().Policy
	ceiling := raceCeiling(e, policy.TotalDPH(offer, p.DiskGB))
	deadline := e.Now().Add(e.readyDeadline())
	gone := map[provider.OfferID]bool{}
	wait := 2 * time.Second
	tried := 0
	for isOfferGone(err) {
		// Only the offer is gone, not the machine's fitness: a fresh
		// listing may offer it again.
		gone[offer.ID] = true
		tried++
		next, ok := nextCandidate(e, gone, *exclude)
		for !ok {
			if !e.Now().Before(deadline) {
				jerr := e.Record("failed", stepSelect, map[string]any{"offers_taken": tried})
				return 0, offer, errors.Join(&StepError{Step: stepSelect, Outcome: OutcomeNoOffer, Err: fmt.Errorf(
					"%w: %d offers meeting it were taken before vastrun could rent them, until the ready deadline %s", ErrNoOffer, tried, e.readyDeadline())}, jerr)
			}
			if serr := e.Sleep(ctx, e.Jittered(wait)); serr != nil {
				return 0, offer, serr
			}
			wait = min(wait*2, 30*time.Second)
			if _, serr := selectOffer(ctx, e, *exclude); serr != nil && !errors.Is(serr, ErrNoOffer) {
				return 0, offer, serr
			}
			clear(gone) // the new listing is the truth now
			next, ok = nextCandidate(e, gone, *exclude)
		}
		dph := policy.TotalDPH(next, p.DiskGB)
		switch spent := e.SpentSoFar(); {
		case dph > ceiling+1e-12:
			// Dearer than what was approved: ask again, showing the plan.
			e.Infof("offer %d is gone; the next offer meeting the policy, %d, costs $%.4f/h, above the approved $%.4f/h", offer.ID, next.ID, dph, ceiling)
			if aerr := approve(e, next, attempt); aerr != nil {
				return 0, next, aerr
			}
			ceiling = raceCeiling(e, dph)
		case spent+worstCase(e, dph, next) > e.Frozen().MaxSpendUSD:
			gone[next.ID] = true // over budget: never rented, try the next
			continue
		default:
			e.Infof("offer %d is gone; renting the next offer meeting the policy: %d at $%.4f/h (approved up to $%.4f/h)", offer.ID, next.ID, dph, ceiling)
			// What covers this rental is journaled before it is made.
			if jerr := e.Record("event", stepApprove, map[string]any{"offer_id": next.ID, "dph_total": dph, "covered_by_approval_up_to": ceiling}); jerr != nil {
				return 0, next, jerr
			}
		}
		offer = next
		var id provider.InstanceID
		id, err = rent(ctx, e, offer)
		if err == nil {
			return id, offer, nil
		}
	}
	return 0, offer, err
}

// nextCandidate is the cheapest eligible offer of the last search that is
// neither gone nor on an excluded machine.
func nextCandidate(e *Scope, gone map[provider.OfferID]bool, exclude []int64) (provider.Offer, bool) {
	bad := map[int64]bool{}
	for _, m := range exclude {
		bad[m] = true
	}
	for _, d := range e.selected {
		if (d.Eligible || d.Chosen) && !gone[d.Offer.ID] && !bad[d.Offer.MachineID] {
			return d.Offer, true
		}
	}
	return provider.Offer{}, false
}
