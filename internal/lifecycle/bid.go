package lifecycle

import (
	"fmt"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
)

// Interruptible (bid) rentals. A bid rental is one more way to rent: the
// offer comes from a bid search and is rented at policy.Bid (min_bid plus
// the margin, within gpu.max_bid), the instance is read back before
// anything else to prove it is a bid at that price, and an outbid is one
// more reason for training's replace step, or a wait or a re-bid first
// (train.on_outbid). Everything the run learns about a bid is journaled
// (steps "bid", "interrupted", "resumed") and replayed into Attempt.Bid.

// BidPlan is the interruptible part of the plan.
type BidPlan struct {
	BidDPH      float64 `json:"bid_dph"`       // GPU part of the bid
	MinBid      float64 `json:"min_bid"`       // the offer's clearing price now
	TotalDPH    float64 `json:"total_dph"`     // bid + storage
	OnDemandDPH float64 `json:"on_demand_dph"` // the same offer on demand
	MaxBid      float64 `json:"max_bid"`
	OnOutbid    string  `json:"on_outbid"`
	// WorstDPH is the most an hour can cost under the policy: the ceiling
	// when it re-bids, the bid otherwise.
	WorstDPH float64 `json:"worst_dph"`
}

// Lines are the plan's words about the bid, for people.
func (b *BidPlan) Lines() []string {
	if b == nil {
		return nil
	}
	save := 0.0
	if b.OnDemandDPH > 0 {
		save = 100 * (1 - b.TotalDPH/b.OnDemandDPH)
	}
	return []string{
		fmt.Sprintf("interruptible: bid $%.4f/h (min_bid $%.4f/h + margin) + storage = $%.4f/h; on demand the same offer is $%.4f/h (%.0f%% less)", b.BidDPH, b.MinBid, b.TotalDPH, b.OnDemandDPH, save),
		fmt.Sprintf("interruptible: if outbid, %s; never above gpu.max_bid $%.4f/h; worst case $%.4f/h", outbidWords(b.OnOutbid), b.MaxBid, b.WorstDPH),
	}
}

func outbidWords(policy string) string {
	switch policy {
	case config.OnOutbidRebid:
		return "re-bid up to the ceiling"
	case config.OnOutbidWait:
		return "wait for the market (train.outbid_wait), then replace"
	}
	return "destroy and re-rent elsewhere at the then-current min_bid"
}

// bidPlan is o's bid plan, or nil for an on-demand policy.
func bidPlan(e *Scope, o provider.Offer) *BidPlan {
	p := e.Frozen().Policy
	if !p.Interruptible {
		return nil
	}
	b := &BidPlan{BidDPH: p.Bid(o), MinBid: o.MinBid, TotalDPH: p.Price(o), OnDemandDPH: policy.TotalDPH(o, p.DiskGB),
		MaxBid: p.MaxBid}
	b.OnOutbid, _ = e.workflow().interruptions(e.manifest)
	b.WorstDPH = b.TotalDPH
	if b.OnOutbid == config.OnOutbidRebid && p.MaxBid > 0 {
		b.WorstDPH = p.MaxBid
	}
	return b
}

// planDPH is the $/h the plan's worst case is priced at.
func planDPH(e *Scope, o provider.Offer) float64 {
	if b := bidPlan(e, o); b != nil {
		return b.WorstDPH
	}
	return policy.TotalDPH(o, e.Frozen().Policy.DiskGB)
}
