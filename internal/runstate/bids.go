package runstate

import (
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// Journal steps of interruptible rentals.
const (
	StepBid         = "bid"         // event: a bid placed at rent or raised {instance_id, bid_dph, reason}
	StepInterrupted = "interrupted" // event: {instance_id, reason: outbid, last_checkpoint, min_bid}
	StepResumed     = "resumed"     // event: {instance_id, stopped_seconds, stopped_storage_usd}
)

type BidData struct {
	Instance provider.InstanceID `json:"instance_id"`
	BidDPH   float64             `json:"bid_dph"`
	Reason   string              `json:"reason"`
}

type InterruptedData struct {
	Instance       provider.InstanceID    `json:"instance_id"`
	Reason         string                 `json:"reason"`
	LastCheckpoint *receipt.CheckpointRef `json:"last_checkpoint"`
	MinBid         float64                `json:"min_bid,omitempty"`
	Policy         string                 `json:"on_outbid,omitempty"`
}

type ResumedData struct {
	Instance          provider.InstanceID `json:"instance_id"`
	StoppedSeconds    float64             `json:"stopped_seconds"`
	StoppedStorageUSD float64             `json:"stopped_storage_usd"`
}

// applyBid applies the interruptible rentals' steps to the state; Apply
// calls it for every record.
func applyBid(s *State, r journal.Record) error {
	switch r.Step {
	case StepBid:
		var d BidData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil && a.Bid != nil {
			if d.Reason == "rebid" {
				a.Bid.Rebids = append(a.Bid.Rebids, d.BidDPH)
			}
			a.Bid.BidDPH = d.BidDPH
			a.Bid.History = append(a.Bid.History, receipt.BidAt{At: r.Time, Bid: d.BidDPH})
			a.DPHTotal = d.BidDPH + a.StorageDPH
		}
	case StepInterrupted:
		var d InterruptedData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil && a.Bid != nil && d.Reason == "outbid" {
			a.Bid.Outbids++
			a.Bid.StoppedSince = r.Time
		}
	case StepResumed:
		var d ResumedData
		if err := decode(r, &d); err != nil {
			return err
		}
		if a := s.AttemptFor(d.Instance); a != nil && a.Bid != nil {
			a.Bid.StoppedSeconds += d.StoppedSeconds
			a.Bid.StoppedStorageUSD += d.StoppedStorageUSD
			a.Bid.StoppedSince = time.Time{}
		}
	}
	return nil
}
