package chaos

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

var marketSeeds = flag.Int("market-seeds", 2, "randomized interruptible training schedules on a moving market")

// marketYAML is trainYAML rented by bid; the policy and the ceiling vary.
const marketYAML = `
image: ` + image + `
upload: [train.py]
gpu: {models: [RTX_4090, RTX_3090, RTX_3060], interruptible: true, max_bid: MAXBID, bid: {margin: MARGIN}}
budget: {max_spend: 5}
timeouts: {ready: 10m, teardown: 4m}
env: {TRAIN_STEPS: "300", TRAIN_STEP_DELAY: "0.01"}
secrets: [CANARY_SECRET]
train:
  command: echo "secret $CANARY_SECRET" >&2; python3 train.py
  checkpoint_uri: STORE
  cadence: 50
  keep: 3
  poll: 1s
  heartbeat_ttl: 5m
  max_attempts: 8
  on_outbid: POLICY
  outbid_wait: 2m
`

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
	bin := agentBinary(t)
	script, err := os.ReadFile(filepath.Join("..", "..", "examples", "train", "train.py"))
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for i := 0; i < *marketSeeds; i++ {
		seed := *firstSeed + uint64(i)
		v, summary := runTrain(t, seed, bin, script, randomMarketSchedule(seed))
		t.Logf("market seed %d: %s: %d violations", seed, summary, len(v))
		if len(v) > 0 {
			failed = append(failed, fmt.Sprintf("seed %d (%s): %s", seed, summary, strings.Join(v, "; ")))
		}
	}
	fmt.Printf("chaos market: %d schedules, %d violations\n", *marketSeeds, len(failed))
	for _, f := range failed {
		fmt.Println("  " + f)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d market schedules violated an invariant", len(failed), *marketSeeds)
	}
}
