package team

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// LedgerSchema names the team ledger's format.
const LedgerSchema = "vastrun.team.ledger"

// ErrOverBudget: the reservation would take the team past its limit.
var ErrOverBudget = errors.New("team budget exceeded")

// Ledger is budget/<YYYY-MM>.json: the team's limit for the period, the
// reservations made before renting (each run's worst case under its
// plan) and the spend settled once a run ended. It is updated only by
// compare-and-swap.
type Ledger struct {
	Schema   string                 `json:"schema"`
	V        int                    `json:"v"`
	Period   string                 `json:"period"`
	LimitUSD float64                `json:"limit_usd"` // 0: no limit
	Runs     map[string]*LedgerLine `json:"runs"`
}

// LedgerVersion is the ledger's version: since 2, a settled line's
// reservation is released (zero) and committed is reserved plus settled.
const LedgerVersion = 2

// LedgerLine is one run in the ledger.
type LedgerLine struct {
	// ReservedUSD is the reservation still held: the worst cases of the
	// run's approvals since it last settled.
	ReservedUSD float64 `json:"reserved_usd"`
	// WorstCaseUSD is every worst case the run was admitted on, for people.
	WorstCaseUSD float64 `json:"worst_case_usd,omitempty"`
	// SettledUSD is the run's spend once it ended (Basis says from what).
	SettledUSD *float64  `json:"settled_usd,omitempty"`
	Basis      string    `json:"basis,omitempty"`
	Holder     string    `json:"holder"`
	Updated    time.Time `json:"updated"`
}

// Settlement bases: what a settled line's figure comes from.
const (
	// BasisCharges: the marketplace's charges, journaled at the run's end.
	BasisCharges = "charges"
	// BasisEstimate: the charges could not be read, so the run's estimate
	// (each rental's $/h over the time from rented to confirmed destroyed,
	// the receipt's estimate_usd).
	BasisEstimate = "estimate"
	// BasisNothingRented: declined, refused or every create failed.
	BasisNothingRented = "nothing rented"
)

// Committed is what counts against the limit: the spend settled plus the
// reservation still held.
func (l *LedgerLine) Committed() float64 {
	c := l.ReservedUSD
	if l.SettledUSD != nil {
		c += *l.SettledUSD
	}
	return c
}

// Totals sums the ledger.
func (l *Ledger) Totals() (reserved, settled, committed float64) {
	for _, r := range l.Runs {
		reserved += r.ReservedUSD
		if r.SettledUSD != nil {
			settled += *r.SettledUSD
		}
		committed += r.Committed()
	}
	return
}

// RunIDs lists the ledger's runs, sorted.
func (l *Ledger) RunIDs() []string {
	var ids []string
	for id := range l.Runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// OverBudgetError says by how much.
type OverBudgetError struct {
	Period                         string
	LimitUSD, CommittedUSD, AskUSD float64
	Run                            string
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("team budget for %s: run %s's worst case $%.4f on top of $%.4f already committed exceeds the limit $%.2f",
		e.Period, e.Run, e.AskUSD, e.CommittedUSD, e.LimitUSD)
}

func (e *OverBudgetError) Is(t error) bool { return t == ErrOverBudget }

// Period is the ledger period of t (calendar month, UTC).
func Period(t time.Time) string { return t.UTC().Format("2006-01") }

// LedgerKey is where a period's ledger lives.
func LedgerKey(period string) string { return "budget/" + period + ".json" }

// ReadLedger reads a period's ledger; a missing one is empty.
func ReadLedger(ctx context.Context, b teamstate.Backend, period string) (*Ledger, string, error) {
	o, _, err := b.Get(ctx, LedgerKey(period))
	if errors.Is(err, teamstate.ErrNotExist) {
		return &Ledger{Schema: LedgerSchema, V: LedgerVersion, Period: period, Runs: map[string]*LedgerLine{}}, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("team ledger %s: %w", period, err)
	}
	var l Ledger
	if err := json.Unmarshal(o.Data, &l); err != nil || l.Schema != LedgerSchema {
		return nil, "", fmt.Errorf("team ledger %s: not a %s object", period, LedgerSchema)
	}
	if l.Runs == nil {
		l.Runs = map[string]*LedgerLine{}
	}
	if l.V < 2 {
		// Version 1 kept a settled line's reservation beside its
		// settlement, which replaced it.
		for _, r := range l.Runs {
			if r.SettledUSD != nil {
				r.WorstCaseUSD, r.ReservedUSD = r.ReservedUSD, 0
			}
		}
		l.V = LedgerVersion
	}
	return &l, o.ETag, nil
}

// UpdateLedger applies f to the period's ledger by compare-and-swap,
// retrying when another controller wrote in between. f may refuse with
// an error, and nothing is written.
func UpdateLedger(ctx context.Context, b teamstate.Backend, period string, f func(*Ledger) error) (*Ledger, error) {
	for attempt := 0; attempt < 20; attempt++ {
		l, etag, err := ReadLedger(ctx, b, period)
		if err != nil {
			return nil, err
		}
		if err := f(l); err != nil {
			return l, err
		}
		data, _ := json.MarshalIndent(l, "", "  ")
		if etag == "" {
			_, err = b.PutIfAbsent(ctx, LedgerKey(period), data)
		} else {
			_, err = b.PutIfMatch(ctx, LedgerKey(period), data, etag)
		}
		if errors.Is(err, teamstate.ErrPrecondition) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("team ledger %s: %w", period, err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("team ledger %s: too many concurrent updates", period)
}

// Reserve adds ask to run's reservation, refusing with *OverBudgetError
// when the committed total would pass the limit. defaultLimit applies
// while the ledger has none of its own. A run that settled and is
// approved again (a resumed run) reserves on top of its settled spend.
func Reserve(ctx context.Context, b teamstate.Backend, now time.Time, run, holder string, ask, defaultLimit float64) error {
	period := Period(now)
	ask = math.Ceil(ask*1e6-1e-6) / 1e6 // whole micro-dollars, never less than asked
	_, err := UpdateLedger(ctx, b, period, func(l *Ledger) error {
		if l.LimitUSD == 0 {
			l.LimitUSD = defaultLimit
		}
		line := l.Runs[run]
		if line == nil {
			line = &LedgerLine{}
			l.Runs[run] = line
		}
		_, _, committed := l.Totals()
		if l.LimitUSD > 0 && committed+ask > l.LimitUSD+1e-9 {
			if line.ReservedUSD == 0 && line.SettledUSD == nil {
				delete(l.Runs, run)
			}
			return &OverBudgetError{Period: period, LimitUSD: l.LimitUSD, CommittedUSD: committed, AskUSD: ask, Run: run}
		}
		line.ReservedUSD += ask
		line.WorstCaseUSD += ask
		line.Holder, line.Updated = holder, now.UTC()
		return nil
	})
	return err
}

// Unreserve gives back ask, the reservation of an approval that was then
// declined. A line left with nothing reserved and nothing settled settles
// to zero: nothing was rented under it.
func Unreserve(ctx context.Context, b teamstate.Backend, period, run string, ask float64, now time.Time) error {
	_, err := UpdateLedger(ctx, b, period, func(l *Ledger) error {
		line := l.Runs[run]
		if line == nil {
			return nil
		}
		line.ReservedUSD = max(0, line.ReservedUSD-ask)
		line.WorstCaseUSD = max(0, line.WorstCaseUSD-ask)
		if line.ReservedUSD < 1e-9 && line.SettledUSD == nil {
			zero := 0.0
			line.ReservedUSD, line.SettledUSD, line.Basis = 0, &zero, BasisNothingRented
		}
		line.Updated = now.UTC()
		return nil
	})
	return err
}

// Settle records run's spend once it ended: it replaces the run's
// reservation, which is released. A run with no line (refused at
// approval) and nothing spent gets none, and settled is false.
func Settle(ctx context.Context, b teamstate.Backend, period, run string, s Settlement, now time.Time) (settled bool, err error) {
	_, err = UpdateLedger(ctx, b, period, func(l *Ledger) error {
		line := l.Runs[run]
		if line == nil {
			if s.USD == 0 {
				settled = false
				return nil
			}
			line = &LedgerLine{}
			l.Runs[run] = line
		}
		usd := s.USD
		line.ReservedUSD, line.SettledUSD, line.Basis, line.Updated = 0, &usd, s.Basis, now.UTC()
		settled = true
		return nil
	})
	return settled && err == nil, err
}

// Settlement is what a run that ended settles to, and from what.
type Settlement struct {
	USD   float64 `json:"usd"`
	Basis string  `json:"basis"` // BasisCharges, BasisEstimate or BasisNothingRented
}

// SettlementOf is what the run st settles to; ok is false while it may
// still bill: no outcome yet, an instance whose destruction is not
// confirmed (a kept `up` instance), or a create whose result is unknown.
// Each rental counts its journaled charge; one without (the charges could
// not be read) counts its estimate, and the run's basis is then
// BasisEstimate.
func SettlementOf(st *runstate.State) (s Settlement, ok bool) {
	return settlement(st, false)
}

// settlement is SettlementOf; with abandoned, a run with no outcome (its
// controller died, and reap --team destroyed what it rented) has ended too.
func settlement(st *runstate.State, abandoned bool) (s Settlement, ok bool) {
	if st == nil || (st.Outcome == "" && !abandoned) || len(st.Unconfirmed()) > 0 || st.AmbiguousRent() {
		return Settlement{}, false
	}
	s.Basis = BasisNothingRented
	for _, a := range st.Attempts {
		if a.InstanceID == 0 {
			continue // a create that failed: nothing rented
		}
		if s.Basis == BasisNothingRented {
			s.Basis = BasisCharges
		}
		if a.Charged != nil {
			s.USD += *a.Charged
			continue
		}
		s.Basis = BasisEstimate
		if !a.RentedAt.IsZero() && a.ConfirmedAt.After(a.RentedAt) {
			s.USD += a.DPHTotal*a.ConfirmedAt.Sub(a.RentedAt).Hours() - a.StoppedDiscount(a.ConfirmedAt)
		}
	}
	s.USD = math.Round(max(0, s.USD)*1e6) / 1e6
	return s, true
}

// SetLimit sets the period's limit.
func SetLimit(ctx context.Context, b teamstate.Backend, period string, usd float64) (*Ledger, error) {
	return UpdateLedger(ctx, b, period, func(l *Ledger) error { l.LimitUSD = usd; return nil })
}
