package providertest

import (
	"errors"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// MarketFaults lets the suite make the marketplace outbid a rental: the
// simulator's competing bidders. Nil against the live API, whose market
// is not ours to move.
type MarketFaults interface {
	// Outbid raises the clearing price of id's offer above its bid for d.
	Outbid(id provider.InstanceID, d time.Duration) error
}

// bidCases pin interruptible (bid) rentals: the create with a price, the
// read-back that tells a bid from a silent on-demand rental, the refusal
// of a bid under the market, and the stop and resume of an outbid
// instance.
var bidCases = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"BidRentsInterruptibleAtTheBid", testBidCreate},
	{"BidUnderTheMarketIsRefused", testBidUnderMarket},
	{"CreateWithoutPriceIsOnDemand", testNoPriceIsOnDemand},
	{"OutbidStopsBillsStorageAndResumes", testOutbid},
}

func bidQuery(h Harness) provider.Query {
	q := maps.Clone(h.Query)
	q["type"] = "bid"
	return q
}

// rentBid rents the first bid offer at bid(min_bid) $/h.
func rentBid(t *testing.T, h Harness, label string, bid func(float64) float64) (provider.Offer, provider.CreateResult, error) {
	t.Helper()
	ctx := ctxFor(t)
	offers, err := h.Market.SearchOffers(ctx, bidQuery(h))
	if err != nil || len(offers) == 0 {
		t.Fatalf("search for a bid offer: %v (%d offers)", err, len(offers))
	}
	o := offers[0]
	if o.MinBid <= 0 || o.MinBid >= o.DPHBase {
		t.Fatalf("bid offer %d: min_bid %v, dph_base %v: an interruptible price under on demand expected", o.ID, o.MinBid, o.DPHBase)
	}
	res, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: o.ID, Image: h.Image, DiskGB: 10, Label: label,
		BidPrice: bid(o.MinBid), NumGPUs: o.NumGPUs})
	if res.InstanceID != 0 {
		t.Cleanup(func() {
			if err := h.Market.DestroyInstance(ctxFor(t), res.InstanceID); err != nil {
				t.Errorf("cleanup: destroy instance %d: %v", res.InstanceID, err)
			}
		})
	}
	return o, res, err
}

func testBidCreate(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	var bid float64
	_, res, err := rentBid(t, h, uniqueLabel("vastrun-conformance-bidrent"), func(m float64) float64 { bid = provider.RoundBid(m * 1.1); return bid })
	if err != nil {
		t.Fatalf("create a bid at min_bid + 10%%: %v", err)
	}
	inst := waitRunning(t, h, res.InstanceID)
	if !inst.IsBid || math.Abs(inst.BidDPH-bid) > 1e-4 {
		t.Fatalf("read back: is_bid %v, bid $%v/h; want a bid at $%v/h", inst.IsBid, inst.BidDPH, bid)
	}
	if inst.MinBid <= 0 || inst.MinBid > bid {
		t.Errorf("a running bid instance shows min_bid %v over its own bid %v", inst.MinBid, bid)
	}
	if ops := h.Ops; ops != nil {
		raised := provider.RoundBid(bid * 1.2)
		if err := ops.ChangeBid(ctx, res.InstanceID, raised); err != nil {
			t.Fatalf("change bid to %v: %v", raised, err)
		}
		got, err := h.Market.ShowInstance(ctx, res.InstanceID)
		if err != nil || !got.IsBid || math.Abs(got.BidDPH-raised) > 1e-4 || !got.Running() {
			t.Errorf("after change-bid to %v: %+v %v", raised, got, err)
		}
	}
}

func testBidUnderMarket(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	label := uniqueLabel("vastrun-conformance-lowbid")
	_, res, err := rentBid(t, h, label, func(m float64) float64 { return math.Max(provider.MinBidPrice, provider.RoundBid(m/3)) })
	// The client always sends cancel_unavail: a bid that cannot start is
	// refused (410), it does not leave a stopped contract behind.
	if !errors.Is(err, provider.ErrOfferGone) || errors.Is(err, provider.ErrOutcomeUnknown) || res.InstanceID != 0 {
		t.Fatalf("bid at a third of min_bid: %v (instance %d), want the offer refused and nothing rented", err, res.InstanceID)
	}
	if list, err := h.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}}); err != nil || len(list) != 0 {
		t.Errorf("a refused bid left instances: %+v %v", list, err)
	}
}

func testNoPriceIsOnDemand(t *testing.T, h Harness) {
	if h.Live {
		t.Skip("a second live rental only to show the trap")
	}
	ctx := ctxFor(t)
	offers, err := h.Market.SearchOffers(ctx, bidQuery(h))
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	res, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: h.Image, DiskGB: 10, Label: uniqueLabel("vastrun-conformance-noprice")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Market.DestroyInstance(ctxFor(t), res.InstanceID); err != nil {
			t.Errorf("cleanup: destroy instance %d: %v", res.InstanceID, err)
		}
	})
	inst := waitRunning(t, h, res.InstanceID)
	if inst.IsBid || inst.BidDPH != 0 || math.Abs(inst.DPHTotal-(inst.DPHBase+inst.StorageTotal)) > 1e-4 {
		t.Errorf("a create without price after a bid search: is_bid %v, dph_total %v (base %v + storage %v), want on demand",
			inst.IsBid, inst.DPHTotal, inst.DPHBase, inst.StorageTotal)
	}
}

func testOutbid(t *testing.T, h Harness) {
	if h.Market == nil || h.Live || h.Faults == nil {
		t.Skip("needs a market the suite can move (Harness.Faults)")
	}
	ctx := ctxFor(t)
	var bid float64
	_, res, err := rentBid(t, h, uniqueLabel("vastrun-conformance-outbid"), func(m float64) float64 { bid = provider.RoundBid(m * 1.1); return bid })
	if err != nil {
		t.Fatal(err)
	}
	id := res.InstanceID
	waitRunning(t, h, id)
	if err := h.Faults.Outbid(id, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	paused := waitFor(t, h, id, "stopped (outbid)", func(i provider.Instance, err error) bool { return err == nil && i.Paused() })
	if paused.MinBid <= bid {
		t.Errorf("outbid, yet min_bid %v is not over the bid %v", paused.MinBid, bid)
	}
	// Stopped: the disk bills, the GPU does not.
	gpu0, disk0 := instanceCharges(t, h, id)
	if err := h.Sleep(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	gpu1, disk1 := instanceCharges(t, h, id)
	if gpu1-gpu0 > 1e-6 || disk1 <= disk0 {
		t.Errorf("while outbid: gpu charge %v → %v, disk %v → %v; want the disk alone billed", gpu0, gpu1, disk0, disk1)
	}
	// The competing bid ends: the instance runs again by itself.
	if err := h.Sleep(ctx, 9*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, id)
}

// instanceCharges is id's GPU and disk charge so far.
func instanceCharges(t *testing.T, h Harness, id provider.InstanceID) (gpu, disk float64) {
	t.Helper()
	charges, err := h.Market.Charges(ctxFor(t), provider.ChargeQuery{From: h.now().Add(-48 * time.Hour), To: h.now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatalf("charges: %v", err)
	}
	for _, c := range charges {
		if c.InstanceID != id {
			continue
		}
		for _, it := range c.Items {
			switch it.Type {
			case "gpu":
				gpu += it.Amount
			case "disk":
				disk += it.Amount
			}
		}
	}
	return gpu, disk
}
