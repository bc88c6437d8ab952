package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// The price-increase routes (provider.PriceIncreases) go through the crash
// and slow markets as every other call does: the engine finds them by type
// assertion, and hiding them would leave the contract watch idle in every
// schedule. It must stay within the run's bounds on the harness's
// self-advancing clock (a lost attempt's watch raced it and overspent).

func (m *crashMarket) PendingPriceIncreases(ctx context.Context) ([]provider.PriceIncrease, error) {
	m.hit("price_increases")
	return pricesOf(m.Market).PendingPriceIncreases(ctx)
}
func (m *crashMarket) AcceptPriceIncrease(ctx context.Context, id int64) error {
	m.hit("accept_price_increase")
	return pricesOf(m.Market).AcceptPriceIncrease(ctx, id)
}
func (m *crashMarket) RejectPriceIncrease(ctx context.Context, id int64) error {
	m.hit("reject_price_increase")
	return pricesOf(m.Market).RejectPriceIncrease(ctx, id)
}

func (m slowMarket) PendingPriceIncreases(ctx context.Context) ([]provider.PriceIncrease, error) {
	m.wait(ctx)
	return pricesOf(m.Market).PendingPriceIncreases(ctx)
}
func (m slowMarket) AcceptPriceIncrease(ctx context.Context, id int64) error {
	m.wait(ctx)
	return pricesOf(m.Market).AcceptPriceIncrease(ctx, id)
}
func (m slowMarket) RejectPriceIncrease(ctx context.Context, id int64) error {
	m.wait(ctx)
	return pricesOf(m.Market).RejectPriceIncrease(ctx, id)
}

// noPrices answers for a wrapped market without the routes.
type noPrices struct{}

func (noPrices) PendingPriceIncreases(context.Context) ([]provider.PriceIncrease, error) {
	return nil, nil
}
func (noPrices) AcceptPriceIncrease(_ context.Context, id int64) error {
	return fmt.Errorf("accept price increase %d: the wrapped market has no price routes", id)
}
func (noPrices) RejectPriceIncrease(_ context.Context, id int64) error {
	return fmt.Errorf("reject price increase %d: the wrapped market has no price routes", id)
}

func pricesOf(m provider.Market) provider.PriceIncreases {
	if p, ok := m.(provider.PriceIncreases); ok {
		return p
	}
	return noPrices{}
}

// priceFault schedules, for three ci schedules in ten, a host's increase
// on the first instance: above or within gpu.max_dph ($1/h), asked within
// half a minute of its start, its contract ending half a minute to five
// and a half minutes later unless accepted (often within the 2m job). It draws from its own stream of the seed, so the
// schedule's other faults stay as they were.
func priceFault(seed uint64, s *sim.Server) []string {
	rng := rand.New(rand.NewPCG(seed, seed*31+7))
	if rng.Float64() >= 0.3 {
		return nil
	}
	f := sim.Fault{Kind: sim.FaultPriceIncrease, Count: 1, Price: 0.5 + 1.5*rng.Float64(),
		Seconds: float64(rng.IntN(30)), For: float64(30 + rng.IntN(300))}
	if err := s.Inject(f); err != nil {
		return []string{"price_increase: " + err.Error()}
	}
	b, _ := json.Marshal(f)
	return []string{string(b)}
}
