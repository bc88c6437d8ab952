package policy

import (
	"fmt"

	"github.com/vastrun/vastrun/internal/provider"
)

// DefaultBidMargin is how far over min_bid a bid goes by default: bidding
// exactly min_bid makes the rental the first to be outbid.
const DefaultBidMargin = 0.10

// Bid is the $/h (per machine, GPU part) to bid on o: min_bid × (1 +
// margin), rounded up to the marketplace's precision, and never more than
// the ceiling leaves after storage. Zero when the policy is on demand or
// the offer has no min_bid.
func (p Policy) Bid(o provider.Offer) float64 {
	if !p.Interruptible || o.MinBid <= 0 {
		return 0
	}
	bid := provider.RoundBid(o.MinBid * (1 + p.BidMargin))
	if p.MaxBid > 0 {
		if room := p.MaxBid - StorageDPH(o, p.DiskGB); bid > room {
			bid = provider.RoundBid(room - 0.0005) // down to what fits
		}
	}
	return bid
}

// StorageDPH is o's storage $/h for diskGB.
func StorageDPH(o provider.Offer, diskGB float64) float64 { return o.StorageCostMonth * diskGB / 720 }

// Price is what the policy judges o at: the bid plus storage for an
// interruptible rental, the on-demand total otherwise.
func (p Policy) Price(o provider.Offer) float64 {
	if p.Interruptible {
		if o.MinBid <= 0 {
			return 0 // no bid market: "price missing"
		}
		return p.Bid(o) + StorageDPH(o, p.DiskGB)
	}
	return TotalDPH(o, p.DiskGB)
}

// bidRejection says why an interruptible policy cannot bid on o, or "".
func (p Policy) bidRejection(o provider.Offer) string {
	if !p.Interruptible || p.MaxBid <= 0 || o.MinBid <= 0 {
		return ""
	}
	if floor := o.MinBid + StorageDPH(o, p.DiskGB); floor > p.MaxBid+1e-12 {
		return fmt.Sprintf("min_bid $%.4f/h + storage $%.4f/h is over gpu.max_bid $%.4f/h", o.MinBid, StorageDPH(o, p.DiskGB), p.MaxBid)
	}
	return ""
}
