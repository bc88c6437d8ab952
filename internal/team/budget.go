package team

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/vastrun/vastrun/internal/teamstate"
)

// LedgerSchema names the team ledger's format.
const LedgerSchema = "vastrun.team.ledger"

// ErrOverBudget: the reservation would take the team past its limit.
var ErrOverBudget = errors.New("team budget exceeded")

// Ledger is budget/<YYYY-MM>.json: the team's limit for the period, the
// reservations made before renting (each run's worst case under its
// plan) and the spend settled from the marketplace's charges. It is
// updated only by compare-and-swap.
type Ledger struct {
	Schema   string                 `json:"schema"`
	V        int                    `json:"v"`
	Period   string                 `json:"period"`
	LimitUSD float64                `json:"limit_usd"` // 0: no limit
	Runs     map[string]*LedgerLine `json:"runs"`
}

// LedgerLine is one run in the ledger.
type LedgerLine struct {
	ReservedUSD float64   `json:"reserved_usd"`
	SettledUSD  *float64  `json:"settled_usd,omitempty"`
	Holder      string    `json:"holder"`
	Updated     time.Time `json:"updated"`
}

// Committed is what counts against the limit: settled spend where known,
// else the reservation.
func (l *LedgerLine) Committed() float64 {
	if l.SettledUSD != nil {
		return *l.SettledUSD
	}
	return l.ReservedUSD
}

// Totals sums the ledger.
func (l *Ledger) Totals() (reserved, settled, committed float64) {
	for _, r := range l.Runs {
		if r.SettledUSD != nil {
			settled += *r.SettledUSD
		} else {
			reserved += r.ReservedUSD
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
		return &Ledger{Schema: LedgerSchema, V: 1, Period: period, Runs: map[string]*LedgerLine{}}, "", nil
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
// while the ledger has none of its own.
func Reserve(ctx context.Context, b teamstate.Backend, now time.Time, run, holder string, ask, defaultLimit float64) error {
	period := Period(now)
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
		line.Holder, line.Updated = holder, now.UTC()
		return nil
	})
	return err
}

// Settle records run's spend from the marketplace's charges; it replaces
// the reservation.
func Settle(ctx context.Context, b teamstate.Backend, period, run string, usd float64, now time.Time) error {
	_, err := UpdateLedger(ctx, b, period, func(l *Ledger) error {
		line := l.Runs[run]
		if line == nil {
			line = &LedgerLine{}
			l.Runs[run] = line
		}
		line.SettledUSD, line.Updated = &usd, now.UTC()
		return nil
	})
	return err
}

// SetLimit sets the period's limit.
func SetLimit(ctx context.Context, b teamstate.Backend, period string, usd float64) (*Ledger, error) {
	return UpdateLedger(ctx, b, period, func(l *Ledger) error { l.LimitUSD = usd; return nil })
}
