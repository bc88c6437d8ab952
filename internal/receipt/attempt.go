package receipt

import (
	"fmt"
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// Attempt is one rental of the run.
type Attempt struct {
	OfferID     provider.OfferID    `json:"offer_id"`
	MachineID   int64               `json:"machine_id"`
	InstanceID  provider.InstanceID `json:"instance_id,omitempty"`
	GPUName     string              `json:"gpu_name"`
	NumGPUs     int                 `json:"num_gpus"`
	DPHTotal    float64             `json:"dph_total"`
	DPHBase     float64             `json:"dph_base"`
	StorageDPH  float64             `json:"storage_dph"`
	Failure     string              `json:"failure,omitempty"`
	Destroyed   bool                `json:"destroyed"`
	Confirmed   bool                `json:"destroy_confirmed"`
	ConfirmedBy []string            `json:"confirmed_by,omitempty"`
	Charged     *float64            `json:"charged_usd,omitempty"`
	Bid         *AttemptBid         `json:"bid,omitempty"` // interruptible rentals (bids in internal/runstate, train/outbid.go)
	BidCharge   *AttemptCharge      `json:"bid_charged,omitempty"`
	// PriceIncreases are the host's increases on this contract and the
	// run's answers (lifecycle/contract.go).
	PriceIncreases []PriceIncrease `json:"price_increases,omitempty"`
	DeadMan        *DeadMan        `json:"dead_man,omitempty"` // the on-instance switch it was armed with

	IntentAt      time.Time `json:"rent_intent_at,omitzero"`
	RentedAt      time.Time `json:"rented_at,omitzero"`
	RunningAt     time.Time `json:"running_at,omitzero"`
	DestroySentAt time.Time `json:"destroy_sent_at,omitzero"`
	ConfirmedAt   time.Time `json:"confirmed_at,omitzero"`
}

// Answers to a host's price increase.
const (
	PriceAccepted   = "accepted"   // within the ceiling: billed from then on
	PriceRejected   = "rejected"   // above it: the contract ends at contract_end at the old price
	PriceUnanswered = "unanswered" // the answer failed or the market has no route: it ends there too
)

// PriceIncrease is one host's increase on an attempt's contract: its total
// $/h (GPU and storage) before and after, the ceiling it was judged
// against, and the run's answer.
type PriceIncrease struct {
	ID          int64     `json:"pending_price_increase_id"`
	At          time.Time `json:"at,omitzero"`
	OldDPH      float64   `json:"old_dph"`
	NewDPH      float64   `json:"new_dph"`
	CeilingDPH  float64   `json:"ceiling_dph"`
	Decision    string    `json:"decision"`
	Reason      string    `json:"reason,omitempty"`
	ContractEnd time.Time `json:"contract_end,omitzero"`
}

// Words says it for people: "$0.41/h → $2.01/h (ceiling $1.00/h): rejected".
func (p PriceIncrease) Words() string {
	return fmt.Sprintf("price increase %d: $%.4f/h → $%.4f/h (ceiling $%.4f/h): %s", p.ID, p.OldDPH, p.NewDPH, p.CeilingDPH, p.Decision)
}

// DeadMan is the on-instance dead-man switch an attempt was armed with
// (its last arming): the instance destroys itself with its own key once the
// controller's heartbeat is older than TTL, or Bound after ArmedAt, and
// retries the destroy until the API says it is gone.
type DeadMan struct {
	TTL     string    `json:"ttl"`
	Bound   string    `json:"bound,omitempty"` // none for up: the TTL is its lease
	ArmedAt time.Time `json:"armed_at"`
	// SimClockSpeed: the instance counted the TTL in the simulator's time,
	// this much faster than the wall clock (omitted on Vast).
	SimClockSpeed float64 `json:"sim_clock_speed,omitempty"`
}

// AttemptBid is what one interruptible rental was: its bid, what the same
// offer costs on demand, the re-bids, and the time it spent stopped while
// outbid with the storage billed for it.
type AttemptBid struct {
	RentalType   string    `json:"rental_type"`
	BidDPH       float64   `json:"bid_dph"` // the bid now (GPU part, per machine)
	MinBidAtRent float64   `json:"min_bid_at_rent"`
	OnDemandDPH  float64   `json:"on_demand_dph"` // the same offer on demand, GPU + storage
	MaxBid       float64   `json:"max_bid"`
	Rebids       []float64 `json:"rebids,omitempty"`
	Outbids      int       `json:"outbids"`
	// StoppedSeconds is the time spent stopped while outbid, and
	// StoppedStorageUSD the storage billed for it.
	StoppedSeconds    float64 `json:"stopped_seconds"`
	StoppedStorageUSD float64 `json:"stopped_storage_usd"`
	// StoppedSince is the open interruption, when one is.
	StoppedSince time.Time `json:"-"`
	// History is each bid in force and when it started (rent, re-bids).
	History []BidAt `json:"-"`
}

type BidAt struct {
	At  time.Time
	Bid float64
}

// MeanBid is the bid averaged over the time each was in force up to end:
// the rate a charge of several bids was billed at. Time ratios are the
// same on the controller's clock as on the marketplace's.
func (b *AttemptBid) MeanBid(end time.Time) float64 {
	var sum, secs float64
	for i, h := range b.History {
		to := end
		if i+1 < len(b.History) {
			to = b.History[i+1].At
		}
		d := to.Sub(h.At).Seconds()
		if d > 0 {
			sum, secs = sum+h.Bid*d, secs+d
		}
	}
	if secs == 0 {
		return b.BidDPH
	}
	return sum / secs
}

// AttemptCharge is what one interruptible rental was charged, by item.
type AttemptCharge struct {
	GPUUSD     float64 `json:"gpu_usd"`
	StorageUSD float64 `json:"storage_usd"`
	GPUSeconds float64 `json:"gpu_seconds"`
	// PriceDPH is the GPU price actually charged: GPU charge ÷ GPU hours.
	PriceDPH float64 `json:"price_charged_dph"`
}

// StoppedDiscount is what spentSoFar over-counts for a's time stopped
// while outbid: only storage bills then, not the GPU.
func (a *Attempt) StoppedDiscount(now time.Time) float64 {
	if a.Bid == nil {
		return 0
	}
	secs := a.Bid.StoppedSeconds
	if !a.Bid.StoppedSince.IsZero() { // stopped until now, or until destroyed
		end := now
		if !a.ConfirmedAt.IsZero() && a.ConfirmedAt.Before(end) {
			end = a.ConfirmedAt
		}
		secs += math.Max(0, end.Sub(a.Bid.StoppedSince).Seconds())
	}
	return (a.DPHTotal - a.StorageDPH) * secs / 3600
}
