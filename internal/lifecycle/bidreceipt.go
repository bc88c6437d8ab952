package lifecycle

import (
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// BidCost is the run's interruptible money, from Vast's charges: what was
// charged, what the same GPU-seconds would have cost on demand (the same
// offers' on-demand GPU price, and storage without the time stopped), and
// the difference.
type BidCost struct {
	ChargedUSD    float64 `json:"charged_usd"`
	OnDemandUSD   float64 `json:"on_demand_usd"`
	SavingUSD     float64 `json:"saving_usd"`
	SavingPercent float64 `json:"saving_percent"`
	GPUSeconds    float64 `json:"gpu_seconds"`
	Interruptions int     `json:"interruptions"`
	// StoppedStorageUSD is the storage billed while outbid, in ChargedUSD.
	StoppedStorageUSD float64 `json:"stopped_storage_usd"`
}

// AttemptCharge is what one interruptible rental was charged, by item.
type AttemptCharge struct {
	GPUUSD     float64 `json:"gpu_usd"`
	StorageUSD float64 `json:"storage_usd"`
	GPUSeconds float64 `json:"gpu_seconds"`
	// PriceDPH is the GPU price actually charged: GPU charge ÷ GPU hours.
	PriceDPH float64 `json:"price_charged_dph"`
}

// bidCharges fills each interruptible attempt's charge and the run's
// BidCost from the charges read. GPU-seconds are the GPU charge over the
// bid (Vast bills a running bid at the bid); with re-bids, over the bids
// averaged by the time each was in force.
func bidCharges(e *Scope, charges []provider.Charge) {
	var bc BidCost
	any := false
	for _, a := range e.state.Attempts {
		if a.Bid == nil || a.InstanceID == 0 {
			continue
		}
		any = true
		var ac AttemptCharge
		for _, ch := range charges {
			if ch.InstanceID != a.InstanceID {
				continue
			}
			for _, it := range ch.Items {
				switch it.Type {
				case "gpu":
					ac.GPUUSD += it.Amount
				case "disk":
					ac.StorageUSD += it.Amount
				}
			}
		}
		end := a.ConfirmedAt
		if end.IsZero() {
			end = e.Now()
		}
		if since := a.Bid.stoppedSince; !since.IsZero() && end.After(since) {
			// Outbid until destroyed (replaced): that time was stopped too.
			secs := end.Sub(since).Seconds()
			a.Bid.StoppedSeconds += secs
			a.Bid.StoppedStorageUSD += a.StorageDPH * secs / 3600
			a.Bid.stoppedSince = time.Time{}
		}
		a.Bid.StoppedSeconds = math.Round(a.Bid.StoppedSeconds*10) / 10
		a.Bid.StoppedStorageUSD = round6(a.Bid.StoppedStorageUSD)
		if rate := a.Bid.meanBid(end); rate > 0 {
			ac.GPUSeconds = ac.GPUUSD / rate * 3600
		}
		if ac.GPUSeconds > 0 {
			ac.PriceDPH = round6(ac.GPUUSD / (ac.GPUSeconds / 3600))
		}
		ac.GPUUSD, ac.StorageUSD, ac.GPUSeconds = round6(ac.GPUUSD), round6(ac.StorageUSD), math.Round(ac.GPUSeconds*10)/10
		a.BidCharge = &ac
		onDemandGPU := a.Bid.OnDemandDPH - a.StorageDPH
		bc.ChargedUSD += ac.GPUUSD + ac.StorageUSD
		bc.OnDemandUSD += ac.GPUSeconds/3600*onDemandGPU + math.Max(0, ac.StorageUSD-a.Bid.StoppedStorageUSD)
		bc.GPUSeconds += ac.GPUSeconds
		bc.Interruptions += a.Bid.Outbids
		bc.StoppedStorageUSD += a.Bid.StoppedStorageUSD
	}
	if !any {
		return
	}
	bc.ChargedUSD, bc.OnDemandUSD, bc.StoppedStorageUSD = round6(bc.ChargedUSD), round6(bc.OnDemandUSD), round6(bc.StoppedStorageUSD)
	bc.SavingUSD = round6(bc.OnDemandUSD - bc.ChargedUSD)
	if bc.OnDemandUSD > 0 {
		bc.SavingPercent = math.Round(1000*bc.SavingUSD/bc.OnDemandUSD) / 10
	}
	e.cost.Interruptible = &bc
}
