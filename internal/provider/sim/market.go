package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// MarketConfig sets the competing bidders of the interruptible market.
//
// Every offer has a clearing price: the highest bid of the other renters,
// which the API shows as min_bid. It starts at the catalog's min_bid and,
// when Volatility > 0, moves every Step as a mean-reverting random walk
// with occasional spikes, drawn from the simulator's seed and the offer's
// id, so one seed always gives one market. The zero value is a still
// market (min_bid never moves unless a fault moves it), which keeps every
// test that does not ask for market dynamics deterministic.
//
// An interruptible instance whose bid is under its offer's clearing price
// is stopped as Vast stops an outbid instance (actual, intended, cur and
// next state "stopped"; its processes killed; its disk kept and billed)
// and resumes (through loading) once its bid is at or above the price
// again. Moves take effect at the simulated instant they happen; the
// simulator applies them when the instance is next looked at (any call
// that reads or bills it), billing each interval at its own rate.
type MarketConfig struct {
	// Step is how often the clearing price moves (default 5m).
	Step time.Duration
	// Volatility is the standard deviation of one step's relative move
	// (0.05 = 5%); 0 is a still market.
	Volatility float64
	// SpikeChance is the chance per step that a spike starts; a spike
	// multiplies the price by SpikeFactor (default 2.5) for SpikeSteps
	// steps (default 3).
	SpikeChance float64
	SpikeFactor float64
	SpikeSteps  int
}

// DefaultMarket is a moving market for benchmarks and chaos schedules:
// a few percent per five minutes, a spike every few hours on average.
var DefaultMarket = MarketConfig{Step: 5 * time.Minute, Volatility: 0.04, SpikeChance: 0.02, SpikeFactor: 2.5, SpikeSteps: 3}

// market is the simulator's clearing-price model. Guarded by Server.mu.
type market struct {
	cfg    MarketConfig
	seed   uint64
	epoch  time.Time
	delay  time.Duration // stopped → loading → running on a resume
	offers map[int64]*offerMarket
	events []marketEvent
	// increases are the hosts' price increases, asked or scheduled, in
	// order (priceincrease.go).
	increases    []*priceIncrease
	nextIncrease int64
}

// offerMarket is one offer's walk, drawn lazily step by step.
type offerMarket struct {
	rng   *rand.Rand
	walk  float64
	spike int       // steps of the current spike left
	mult  []float64 // price multiplier per step (walk × spike)
}

// marketEvent is a fault's competing bid: on offer (0: every offer) from
// From until To (zero: until cleared), the clearing price is at least
// Price, or Factor times the walk's price.
type marketEvent struct {
	offer    int64
	from, to time.Time
	price    float64
	factor   float64
}

func newMarket(cfg MarketConfig, seed uint64, epoch time.Time, delay time.Duration) *market {
	if cfg.Step <= 0 {
		cfg.Step = 5 * time.Minute
	}
	if cfg.SpikeFactor <= 0 {
		cfg.SpikeFactor = 2.5
	}
	if cfg.SpikeSteps <= 0 {
		cfg.SpikeSteps = 3
	}
	return &market{cfg: cfg, seed: seed, epoch: epoch, delay: delay, offers: map[int64]*offerMarket{}, nextIncrease: 7_700}
}

func (m *market) moving() bool { return m.cfg.Volatility > 0 || m.cfg.SpikeChance > 0 }

// step is the walk step t falls in (0 before the epoch).
func (m *market) step(t time.Time) int {
	if !t.After(m.epoch) {
		return 0
	}
	return int(t.Sub(m.epoch) / m.cfg.Step)
}

// multiplier is the walk's factor on o's base price at step k.
func (m *market) multiplier(o *offer, k int) float64 {
	if !m.moving() {
		return 1
	}
	om := m.offers[o.ID]
	if om == nil {
		om = &offerMarket{rng: rand.New(rand.NewPCG(m.seed, uint64(o.ID))), walk: 1, mult: []float64{1}}
		m.offers[o.ID] = om
	}
	for len(om.mult) <= k {
		// Mean-reverting: a fifth of the distance back to the base per
		// step, plus noise, kept within half and twice the base.
		om.walk += 0.2*(1-om.walk) + m.cfg.Volatility*om.rng.NormFloat64()
		om.walk = math.Min(2, math.Max(0.5, om.walk))
		mult := om.walk
		switch {
		case om.spike > 0:
			om.spike--
			mult *= m.cfg.SpikeFactor
		case om.rng.Float64() < m.cfg.SpikeChance:
			om.spike = m.cfg.SpikeSteps - 1
			mult *= m.cfg.SpikeFactor
		}
		om.mult = append(om.mult, mult)
	}
	return om.mult[k]
}

// clearing is o's clearing price ($/h per machine) at t.
func (m *market) clearing(o *offer, t time.Time) float64 {
	walk := o.BaseBid * m.multiplier(o, m.step(t))
	p := walk
	for _, ev := range m.events {
		if (ev.offer != 0 && ev.offer != o.ID) || t.Before(ev.from) || (!ev.to.IsZero() && !t.Before(ev.to)) {
			continue
		}
		p = math.Max(p, math.Max(ev.price, walk*ev.factor))
	}
	return round(p, 4)
}

// changes lists the instants in (from, to] at which o's clearing price
// may change: walk steps and the edges of events.
func (m *market) changes(o *offer, from, to time.Time) []time.Time {
	if !to.After(from) {
		return nil
	}
	var out []time.Time
	if m.moving() {
		for k := m.step(from) + 1; ; k++ {
			t := m.epoch.Add(time.Duration(k) * m.cfg.Step)
			if t.After(to) {
				break
			}
			out = append(out, t)
		}
	}
	for _, ev := range m.events {
		if ev.offer != 0 && ev.offer != o.ID {
			continue
		}
		for _, t := range []time.Time{ev.from, ev.to} {
			if !t.IsZero() && t.After(from) && !t.After(to) {
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// evalMarket stops an interruptible instance its market has outbid and
// resumes one whose bid is back above the market, at instant t. It sets
// fields directly: it runs inside advance.
func (in *instance) evalMarket(t time.Time) {
	if in.mkt == nil || !in.IsBid || in.Destroyed {
		return
	}
	price := in.mkt.clearing(in.Offer, t)
	outbid := in.Bid < price-1e-9
	switch {
	case outbid && !in.outbid && in.Intended == "running" && in.Actual != "offline" && in.Actual != "exited":
		in.outbid = true
		in.Outbids++
		in.nextAt = time.Time{}
		in.Actual, in.Intended, in.Cur, in.Next, in.StatusMsg = "stopped", "stopped", "stopped", "stopped", ""
		in.killPending = true
		in.logf(t, "instance paused: outbid (bid $%.4f/h under the clearing price $%.4f/h)", in.Bid, price)
	case !outbid && in.outbid:
		in.outbid = false
		if in.Actual == "stopped" {
			in.Actual, in.Intended, in.Cur, in.Next, in.StatusMsg = "loading", "running", "running", "running", "resuming: the bid is above the market again"
			in.nextAt, in.nextState = t.Add(in.mkt.delay), "running"
			in.logf(t, "instance resuming: bid $%.4f/h is at or above the clearing price $%.4f/h", in.Bid, price)
		}
	}
}

// marketTo applies o's market moves in (in.marketAt, now] in time order,
// running the boot sequence and billing up to each.
func (in *instance) marketTo(now time.Time) {
	if in.mkt == nil || !in.IsBid {
		in.marketAt = now
		in.runTo(now)
		return
	}
	// One change at a time: running the boot sequence to it can arm a new
	// event (an outbid scheduled from the moment it runs).
	for {
		ts := in.mkt.changes(in.Offer, in.marketAt, now)
		if len(ts) == 0 {
			break
		}
		in.runTo(ts[0])
		in.evalMarket(ts[0])
		in.marketAt = ts[0]
	}
	in.marketAt = now
	in.runTo(now)
	in.evalMarket(now)
}

// refreshMinBid sets every offer's min_bid to its clearing price now.
// Called with s.mu held.
func (s *Server) refreshMinBid() {
	now := s.clock.Now()
	for _, o := range s.offers {
		o.MinBid = s.mkt.clearing(o, now)
	}
}

// clearingNow is o's clearing price now, also stored as its min_bid.
// Called with s.mu held.
func (s *Server) clearingNow(o *offer) float64 {
	if s.mkt == nil { // a zero Server rendering a sample row
		return o.MinBid
	}
	o.MinBid = s.mkt.clearing(o, s.clock.Now())
	return o.MinBid
}

// injectMarket adds an outbid or a spike. Called with s.mu held.
func (s *Server) injectMarket(f Fault, now time.Time) error {
	from := now.Add(time.Duration(f.Seconds * float64(time.Second)))
	var to time.Time
	if f.For > 0 {
		to = from.Add(time.Duration(f.For * float64(time.Second)))
	}
	switch f.Kind {
	case FaultOutbid:
		if f.Instance == 0 && f.Count > 0 {
			s.faults.outbidAfter = f
			return nil
		}
		var targets []*instance
		if f.Instance != 0 {
			in := s.instances[f.Instance]
			if in == nil || in.Destroyed {
				return fmt.Errorf("fault %s: no live instance %d", f.Kind, f.Instance)
			}
			if !in.IsBid {
				return fmt.Errorf("fault %s: instance %d is on demand, not interruptible", f.Kind, f.Instance)
			}
			targets = append(targets, in)
		} else {
			for _, id := range s.order {
				if in := s.instances[id]; !in.Destroyed && in.IsBid {
					targets = append(targets, in)
				}
			}
			if len(targets) == 0 {
				return fmt.Errorf("fault %s: no live interruptible instance", f.Kind)
			}
		}
		for _, in := range targets {
			s.advance(in) // everything before the outbid at the old price
			price := f.Price
			if price <= 0 {
				price = round(in.Bid*1.25+0.001, 4)
			}
			s.mkt.events = append(s.mkt.events, marketEvent{offer: in.Offer.ID, from: from, to: to, price: price})
			s.advance(in) // an outbid now acts now
		}
	case FaultMarketSpike:
		factor := f.Factor
		if factor <= 0 {
			factor = 2.5
		}
		if f.For <= 0 {
			to = from.Add(10 * time.Minute)
		}
		ev := marketEvent{from: from, to: to, factor: factor}
		switch {
		case f.Instance != 0:
			in := s.instances[f.Instance]
			if in == nil {
				return fmt.Errorf("fault %s: no instance %d", f.Kind, f.Instance)
			}
			ev.offer = in.Offer.ID
		case f.Machine != 0:
			for _, o := range s.offers {
				if o.MachineID == f.Machine {
					ev.offer = o.ID
				}
			}
			if ev.offer == 0 {
				return fmt.Errorf("fault %s: no offer on machine %d", f.Kind, f.Machine)
			}
		}
		for _, id := range s.order {
			if in := s.instances[id]; !in.Destroyed {
				s.advance(in)
			}
		}
		s.mkt.events = append(s.mkt.events, ev)
		for _, id := range s.order {
			if in := s.instances[id]; !in.Destroyed {
				s.advance(in)
			}
		}
	}
	return nil
}
