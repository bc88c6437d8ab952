package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// priceMarket is a fakeMarket with the price-increase routes: it lists
// pending and records the answers.
type priceMarket struct {
	*fakeMarket
	pending  []provider.PriceIncrease
	reads    int
	answers  map[int64]string
	onRead   func(n int) // called with each read's number
	answerOK error
}

func (m *priceMarket) PendingPriceIncreases(context.Context) ([]provider.PriceIncrease, error) {
	m.reads++
	if m.onRead != nil {
		m.onRead(m.reads)
	}
	return m.pending, nil
}

func (m *priceMarket) answer(id int64, what string) error {
	if m.answers == nil {
		m.answers = map[int64]string{}
	}
	m.answers[id] = what
	return m.answerOK
}

func (m *priceMarket) AcceptPriceIncrease(_ context.Context, id int64) error {
	return m.answer(id, "accept")
}
func (m *priceMarket) RejectPriceIncrease(_ context.Context, id int64) error {
	return m.answer(id, "reject")
}

// contractRig is a begun ci run holding instance 7 rented at $0.50/h.
func contractRig(t *testing.T, pm *priceMarket) *stepRig {
	t.Helper()
	r := newStepRig(t, stepConfig, pm.fakeMarket)
	r.s.Market = pm
	if err := r.s.Record("intent", stepRent, runstate.RentIntent{Label: r.s.state.Label, Offer: 1, Attempt: receipt.Attempt{MachineID: 70, DPHTotal: 0.5, DPHBase: 0.49, StorageDPH: 0.01}}); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Record("done", stepRent, runstate.InstanceData{Instance: 7}); err != nil {
		t.Fatal(err)
	}
	return r
}

// perHour is a $/h GPU price as Vast's cost per second.
func perHour(dph float64) float64 { return dph / 3600 }

// The lesson of a lost attempt: beside work on a self-advancing test
// clock (each wait advances it at once), a watch that polls on its own
// raced simulated time far past the work and the budget. The watch stops
// at the work's deadline by itself, even when the work never ends, having
// read no more often than every 10 s of the run's clock.
func TestContractWatchNeverOutlivesTheWorksDeadline(t *testing.T) {
	pm := &priceMarket{fakeMarket: newFakeMarket()}
	r := contractRig(t, pm)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A safety stop, so that a watch that would not stop fails the test
	// instead of hanging it: it cancels far past any honest count.
	pm.onRead = func(n int) {
		if n > 1000 {
			cancel()
		}
	}
	start := r.clk.Now()
	until := start.Add(5 * time.Minute)
	w := r.s.WatchContract(provider.Instance{ID: 7}, until)
	var stopped error
	w.watchBeside(ctx, func(err error) { stopped = err })
	if now := r.clk.Now(); now.After(until) {
		t.Errorf("the watch moved the run's clock %v past the work's deadline %v", now.Sub(until), until.Sub(start))
	}
	if pm.reads < 2 || pm.reads > 31 {
		t.Errorf("%d reads of the pending list over 5m, want one per 10 s at most (31) and more than one", pm.reads)
	}
	if stopped != nil {
		t.Errorf("the watch stopped the work: %v", stopped)
	}
}

// Increases on the run's contract are answered once each, journaled
// intent first: within gpu.max_dph accepted (the attempt's price from
// then on), above it rejected (the contract then ends at its date); those
// on other contracts are not the run's to answer.
func TestContractWatchAnswersWithinTheCeiling(t *testing.T) {
	pm := &priceMarket{fakeMarket: newFakeMarket()}
	r := contractRig(t, pm)
	now := r.clk.Now()
	end := now.Add(time.Hour)
	pm.pending = []provider.PriceIncrease{
		{ID: 1, ContractID: 7, OldGPUCostPerSec: perHour(0.49), NewGPUCostPerSec: perHour(0.89), ContractEnd: end},
		{ID: 2, ContractID: 8, OldGPUCostPerSec: perHour(0.49), NewGPUCostPerSec: perHour(5), ContractEnd: end},
	}
	w := r.s.WatchContract(provider.Instance{ID: 7, EndDate: now.Add(30 * 24 * time.Hour)}, now.Add(5*time.Minute))
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := r.s.state.AttemptFor(7)
	if pm.answers[1] != "accept" || pm.answers[2] != "" || len(a.PriceIncreases) != 1 || a.PriceIncreases[0].Decision != receipt.PriceAccepted || a.DPHTotal != 0.9 {
		t.Fatalf("answers %v, attempt at $%v/h with %+v; want increase 1 accepted at $0.90/h and 2 left alone", pm.answers, a.DPHTotal, a.PriceIncreases)
	}
	if e, _ := w.End(); e.Before(now.Add(24 * time.Hour)) {
		t.Errorf("an accepted increase ended the contract at %v", e)
	}
	// Within contractPoll nothing is read; after it, only new ones are answered.
	pm.pending = append(pm.pending, provider.PriceIncrease{ID: 3, ContractID: 7, OldGPUCostPerSec: perHour(0.89), NewGPUCostPerSec: perHour(2), ContractEnd: end})
	reads := pm.reads
	r.clk.Advance(5 * time.Second)
	w.Check(context.Background())
	if pm.reads != reads {
		t.Errorf("read again after 5 s")
	}
	r.clk.Advance(5 * time.Second)
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pm.answers[3] != "reject" || len(a.PriceIncreases) != 2 || a.PriceIncreases[1].Decision != receipt.PriceRejected || a.DPHTotal != 0.9 {
		t.Fatalf("answers %v, attempt %+v; want increase 3 rejected, the price kept", pm.answers, a.PriceIncreases)
	}
	if e, why := w.End(); !e.Equal(end) || why != "price increase 3 not accepted" {
		t.Errorf("the contract ends %v (%s), want %v for the rejected increase", e, why, end)
	}
	j := r.journal()
	if count(j, "intent:"+runstate.StepPriceIncrease) != 2 || count(j, "done:"+runstate.StepPriceIncrease) != 2 || !before(j, "intent:"+runstate.StepPriceIncrease, "done:"+runstate.StepPriceIncrease) {
		t.Errorf("journal %v: want each answer's intent before it and its outcome after", j)
	}
}

// An answer that fails leaves the increase unanswered: the contract ends
// at its date all the same, and the receipt says so.
func TestContractWatchAnswerFailedIsUnanswered(t *testing.T) {
	pm := &priceMarket{fakeMarket: newFakeMarket(), answerOK: errors.New("503")}
	r := contractRig(t, pm)
	end := r.clk.Now().Add(time.Hour)
	pm.pending = []provider.PriceIncrease{{ID: 4, ContractID: 7, OldGPUCostPerSec: perHour(0.49), NewGPUCostPerSec: perHour(3), ContractEnd: end}}
	w := r.s.WatchContract(provider.Instance{ID: 7}, r.clk.Now().Add(5*time.Minute))
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := r.s.state.AttemptFor(7).PriceIncreases; len(p) != 1 || p[0].Decision != receipt.PriceUnanswered {
		t.Fatalf("price increases %+v, want one unanswered", p)
	}
	if e, _ := w.End(); !e.Equal(end) {
		t.Errorf("the contract ends %v, want %v", e, end)
	}
}

// Work is stopped when the contract ends before the work's deadline, in
// time for stopping (the teardown limit, at most a minute) and one poll;
// a contract that outlives the work stops nothing.
func TestContractWatchStopsWorkBeforeTheEnd(t *testing.T) {
	pm := &priceMarket{fakeMarket: newFakeMarket()}
	r := contractRig(t, pm)
	now := r.clk.Now()
	w := r.s.WatchContract(provider.Instance{ID: 7, EndDate: now.Add(10 * time.Minute)}, now.Add(5*time.Minute))
	if at := w.StopAt(time.Second); !at.IsZero() {
		t.Errorf("a contract that outlives the work stops it at %v", at)
	}
	w.Observe(provider.Instance{ID: 7, EndDate: now.Add(3 * time.Minute)})
	want := now.Add(3*time.Minute - time.Minute - time.Second) // the default teardown limit is over a minute
	if at := w.StopAt(time.Second); !at.Equal(want) {
		t.Errorf("stop at %v, want %v", at, want)
	}
	if w.Ending(time.Second) != nil {
		t.Error("stopped two minutes early")
	}
	r.clk.Advance(2 * time.Minute)
	ended := w.Ending(time.Second)
	if ended == nil || ended.Why != "the host's end date" || Outcome(ended) != OutcomeContractEnded {
		t.Errorf("at the moment to stop: %v (outcome %s), want the host's end date, contract_ended", ended, Outcome(ended))
	}
	// Beside work, the watch stops it at that moment.
	var stopped error
	w.watchBeside(context.Background(), func(err error) { stopped = err })
	if _, ok := errContractEnded(stopped); !ok {
		t.Errorf("beside the work: %v, want the contract's end", stopped)
	}
}

// Within gpu.max_dph but past the budget: work approved for its whole
// bound must still fit budget.max_spend at the new price, or the
// increase is rejected.
func TestContractWatchRejectsWhatTheBudgetCannotCover(t *testing.T) {
	pm := &priceMarket{fakeMarket: newFakeMarket()}
	r := contractRig(t, pm)
	end := r.clk.Now().Add(time.Hour)
	pm.pending = []provider.PriceIncrease{{ID: 5, ContractID: 7, OldGPUCostPerSec: perHour(0.49), NewGPUCostPerSec: perHour(0.95), ContractEnd: end}}
	// Three hours left at $0.96/h is over the $2 budget.
	w := r.s.WatchContract(provider.Instance{ID: 7}, r.clk.Now().Add(3*time.Hour))
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := r.s.state.AttemptFor(7).PriceIncreases
	if pm.answers[5] != "reject" || len(p) != 1 || p[0].Decision != receipt.PriceRejected || !strings.Contains(p[0].Reason, "budget.max_spend") {
		t.Fatalf("answers %v, %+v: want it rejected for the budget", pm.answers, p)
	}
}
