package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// thief is another renter who takes the offer vastrun chose just before
// vastrun's create reaches the marketplace, for the first n creates.
type thief struct {
	provider.Market
	mu     sync.Mutex
	n      int
	stolen []provider.InstanceID
	asked  []provider.OfferID
}

func (t *thief) CreateInstance(ctx context.Context, req provider.CreateRequest) (provider.CreateResult, error) {
	t.mu.Lock()
	t.asked = append(t.asked, req.OfferID)
	steal := t.n > 0
	t.n--
	t.mu.Unlock()
	if steal {
		other := req
		other.Label = "someone-else"
		res, err := t.Market.CreateInstance(ctx, other)
		if err != nil {
			return res, err
		}
		t.mu.Lock()
		t.stolen = append(t.stolen, res.InstanceID)
		t.mu.Unlock()
	}
	return t.Market.CreateInstance(ctx, req)
}

func (t *thief) cleanup(h *harness) {
	for _, id := range t.stolen {
		h.engine.Market.DestroyInstance(context.Background(), id)
	}
}

func TestOfferRaceMovesToTheNextOfferWithinTheApproval(t *testing.T) {
	h := newHarness(t, strings.Replace(baseConfig, "models: [RTX_4090]", "models: [RTX_4090, RTX_3090]", 1), true)
	approvals := 0
	h.engine.Approve = func(lifecycle.Plan) (bool, error) { approvals++; return true, nil }
	th := &thief{Market: h.engine.Market, n: 5} // more than vastrun used to tolerate
	h.engine.Market = th
	r, err := ci.Run(context.Background(), h.engine)
	th.cleanup(h)
	if err != nil || r.Outcome != lifecycle.OutcomePassed {
		t.Fatalf("%v %+v\n%s", err, r, h.ui)
	}
	if len(th.asked) != 6 {
		t.Fatalf("creates: %v, want 5 lost and 1 won", th.asked)
	}
	seen := map[provider.OfferID]bool{}
	for _, id := range th.asked {
		if seen[id] {
			t.Fatalf("offer %d was tried twice: %v", id, th.asked)
		}
		seen[id] = true
	}
	p := h.engine.Config.Policy()
	last := r.Attempts[len(r.Attempts)-1]
	if last.DPHTotal > p.MaxDPH || last.InstanceID == 0 {
		t.Fatalf("rented %+v above the ceiling %v", last, p.MaxDPH)
	}
	if approvals != 1 {
		t.Fatalf("asked %d times; the first approval covers replacements up to max_dph", approvals)
	}
	if !strings.Contains(h.ui.String(), "renting the next offer meeting the policy") {
		t.Fatalf("the race is not explained:\n%s", h.ui)
	}
	h.noLeaks()
}

func TestOfferRaceAsksAgainAboveTheApprovedPrice(t *testing.T) {
	// Without max_dph the approval covers only the approved offer's price;
	// every other offer costs more, so a replacement needs a new yes.
	h := newHarness(t, strings.Replace(baseConfig, "max_dph: 1.0", "", 1), true)
	var plans []lifecycle.Plan
	h.engine.Approve = func(p lifecycle.Plan) (bool, error) { plans = append(plans, p); return len(plans) == 1, nil }
	th := &thief{Market: h.engine.Market, n: 1}
	h.engine.Market = th
	r, err := ci.Run(context.Background(), h.engine)
	th.cleanup(h)
	if !errors.Is(err, lifecycle.ErrNeedsApproval) || r.Outcome != lifecycle.OutcomeNotApproved {
		t.Fatalf("%v %+v\n%s", err, r, h.ui)
	}
	if len(plans) != 2 || plans[1].TotalDPH <= plans[0].TotalDPH || plans[1].Offer.ID == plans[0].Offer.ID {
		t.Fatalf("plans: %+v", plans)
	}
	if len(th.asked) != 1 {
		t.Fatalf("rented above the approval without a yes: %v", th.asked)
	}
	h.noLeaks()
}

func TestOfferRaceEndsAtTheReadyDeadline(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	th := &thief{Market: h.engine.Market, n: 1 << 20}
	h.engine.Market = th
	r, err := ci.Run(context.Background(), h.engine)
	th.cleanup(h)
	if !errors.Is(err, lifecycle.ErrNoOffer) || r.Outcome != lifecycle.OutcomeNoOffer {
		t.Fatalf("%v %+v", err, r)
	}
	h.noLeaks()
}

// releaser gives its stolen rentals back at the next search, so the
// offers come back: vastrun, having used up its list, searches again and
// rents one.
type releaser struct{ *thief }

func (r releaser) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	r.mu.Lock()
	stolen := r.stolen
	r.stolen = nil
	r.mu.Unlock()
	for _, id := range stolen {
		r.Market.DestroyInstance(ctx, id)
	}
	return r.Market.SearchOffers(ctx, q)
}

func TestOfferRaceSearchesAgainWhenTheListIsUsedUp(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	p := h.engine.Config.Policy()
	offers, _ := h.engine.Market.SearchOffers(context.Background(), p.LooseQuery(500))
	_, ds := policy.Select(p, offers)
	eligible := 0
	for _, d := range ds {
		if d.Eligible {
			eligible++
		}
	}
	th := &thief{Market: h.engine.Market, n: eligible}
	h.engine.Market = releaser{th}
	r, err := ci.Run(context.Background(), h.engine)
	th.cleanup(h)
	if err != nil || r.Outcome != lifecycle.OutcomePassed {
		t.Fatalf("%v %+v\n%s", err, r, h.ui)
	}
	if len(th.asked) != eligible+1 {
		t.Fatalf("creates %v: want every one of the %d eligible offers lost, then one won after a new search", th.asked, eligible)
	}
	h.noLeaks()
}
