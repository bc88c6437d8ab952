package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

var marketSeeds = seedCount("market-seeds", envMarketSeeds, 2, "randomized interruptible training schedules on a moving market")

// marketYAML is trainYAML rented by bid; the policy and the ceiling vary.
var marketYAML = trainYAMLFor("{models: [RTX_4090, RTX_3090, RTX_3060], interruptible: true, max_bid: MAXBID, bid: {margin: MARGIN}}",
	"max_attempts: 8", "on_outbid: POLICY", "outbid_wait: 2m")

// randomMarketSchedule is a training run by bid on a moving market (a
// random walk with spikes), with outbids scheduled on the first rentals,
// alone or with the training family's crashes, drops and rate limits.
func randomMarketSchedule(seed uint64) trainSchedule {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	policy := []string{"replace", "rebid", "wait"}[rng.IntN(3)]
	maxBid := []float64{0.6, 1.0}[rng.IntN(2)]
	margin := []float64{0, 0.1, 0.3}[rng.IntN(3)]
	sc := trainSchedule{maxBid: maxBid,
		market: sim.MarketConfig{Step: time.Minute, Volatility: 0.02 + 0.08*rng.Float64(), SpikeChance: 0.05 * rng.Float64(), SpikeFactor: 1.5 + rng.Float64()}}
	sc.yaml = strings.NewReplacer("MAXBID", fmt.Sprint(maxBid), "MARGIN", fmt.Sprint(margin), "POLICY", policy).Replace(marketYAML)
	sc.faults = append(sc.faults, sim.Fault{Kind: sim.FaultOutbid, Count: 1 + rng.IntN(2), Seconds: float64(20 + rng.IntN(60)), For: float64([]int{0, 30, 300}[rng.IntN(3)])})
	if rng.Float64() < 0.4 { // combined with the training family's faults
		base := randomTrainSchedule(seed)
		for _, f := range base.faults {
			if f.Kind != sim.FaultPreemptAfter {
				sc.faults = append(sc.faults, f)
			}
		}
		sc.crashAt, sc.slow = base.crashAt, base.slow
	}
	sc.what = fmt.Sprintf(" on_outbid=%s max_bid=%g margin=%g market=%+v", policy, maxBid, margin, sc.market)
	return sc
}

// TestChaosTrainMarket holds training's invariants on interruptible
// rentals (passed, final checkpoint committed and restorable, every resume
// proven, nothing left live, one live contract per label, no secret
// written), plus spend within the budget and no bid above gpu.max_bid.
func TestChaosTrainMarket(t *testing.T) {
	bin, script := trainInputs(t)
	runFamily(t, "market", *marketSeeds, func(seed uint64) ([]string, string) {
		v, summary := runTrain(t, seed, bin, script, randomMarketSchedule(seed))
		t.Logf("market seed %d: %s: %d violations", seed, summary, len(v))
		return v, summary
	})
}
