package provider

import "math"

// Bids (interruptible rentals).
//
// A bid is the $/h a renter offers for a machine slice; while it is at or
// above the offer's clearing price (the highest competing bid, shown as
// min_bid) the instance runs and is billed at the bid; below it the
// instance is stopped (processes killed, disk kept and billed) until the
// bid is above the market again. Creating with no price silently rents on
// demand, and the create answer does not say which kind was rented: read
// the instance back and check IsBid and BidDPH.

// BidPerGPU says how Vast reads a bid's "price". The create route documents
// it per machine (the whole rental) and the change-bid route's validation
// note says "<= 32 × number of GPUs"; vastrun models one unit for both
// routes, per machine, and this constant is the one place to change if the
// live API proves it per GPU. The real client and the simulator both go
// through BidWire/BidFromWire, so they cannot disagree.
const BidPerGPU = false

// BidWire is the wire value of a per-machine bid of dph $/h on a rental of
// numGPUs GPUs.
func BidWire(dph float64, numGPUs int) float64 {
	if BidPerGPU && numGPUs > 1 {
		return roundBid(dph / float64(numGPUs))
	}
	return roundBid(dph)
}

// BidFromWire is the per-machine $/h of a wire bid value.
func BidFromWire(price float64, numGPUs int) float64 {
	if BidPerGPU && numGPUs > 1 {
		return price * float64(numGPUs)
	}
	return price
}

// Bid price limits of the two routes (the vendor's document), in wire units.
const (
	MinBidPrice       = 0.001
	MaxCreateBidPrice = 128.0
	MaxChangeBidPrice = 32.0
)

// roundBid keeps bids to the marketplace's tenth of a cent precision,
// rounding up so a bid computed as "min_bid plus a margin" never lands
// under it.
func roundBid(x float64) float64 { return math.Ceil(x*1000-1e-9) / 1000 }

// RoundBid rounds a $/h bid up to the marketplace's precision.
func RoundBid(x float64) float64 { return roundBid(x) }
