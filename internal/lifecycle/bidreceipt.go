package lifecycle

import (
	"math"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// bidCharges fills each interruptible attempt's charge and the run's
// BidCost from the charges read. GPU-seconds are the GPU charge over the
// bid (Vast bills a running bid at the bid); with re-bids, over the bids
// averaged by the time each was in force.
func bidCharges(e *Scope, charges []provider.Charge) {
	var bc receipt.BidCost
	any := false
	for _, a := range e.state.Attempts {
		if a.Bid == nil || a.InstanceID == 0 {
			continue
		}
		any = true
		var ac receipt.AttemptCharge
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
		if since := a.Bid.StoppedSince; !since.IsZero() && end.After(since) {
			// Outbid until destroyed (replaced): that time was stopped too.
			secs := end.Sub(since).Seconds()
			a.Bid.StoppedSeconds += secs
			a.Bid.StoppedStorageUSD += a.StorageDPH * secs / 3600
			a.Bid.StoppedSince = time.Time{}
		}
		a.Bid.StoppedSeconds = math.Round(a.Bid.StoppedSeconds*10) / 10
		a.Bid.StoppedStorageUSD = round6(a.Bid.StoppedStorageUSD)
		if rate := a.Bid.MeanBid(end); rate > 0 {
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
