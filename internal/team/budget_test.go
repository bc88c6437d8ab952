package team_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

func usd(v float64) *float64 { return &v }

// SettlementOf: what a run that ended settles to, and when it may not
// settle yet.
func TestSettlementOf(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	gone := func(id provider.InstanceID, dph float64, rented time.Duration, charged *float64) *receipt.Attempt {
		return &receipt.Attempt{InstanceID: id, DPHTotal: dph, RentedAt: t0, Destroyed: true, Confirmed: true,
			ConfirmedAt: t0.Add(rented), Charged: charged}
	}
	tests := []struct {
		name     string
		outcome  receipt.Outcome
		attempts []*receipt.Attempt
		ok       bool
		want     team.Settlement
	}{
		{"charges of one rental", "passed", []*receipt.Attempt{gone(1, 0.18, 3*time.Minute, usd(0.0035))},
			true, team.Settlement{USD: 0.0035, Basis: team.BasisCharges}},
		{"charges of a failover's two rentals", "passed", []*receipt.Attempt{gone(1, 0.18, time.Minute, usd(0.001)), gone(2, 0.2, 2*time.Minute, usd(0.0065))},
			true, team.Settlement{USD: 0.0075, Basis: team.BasisCharges}},
		{"charges unread: the estimate, $/h over rented to confirmed", "failed", []*receipt.Attempt{gone(1, 0.18, 20*time.Minute, nil)},
			true, team.Settlement{USD: 0.06, Basis: team.BasisEstimate}},
		{"one rental without its charge makes it an estimate", "passed", []*receipt.Attempt{gone(1, 0.18, time.Minute, usd(0.003)), gone(2, 0.3, 10*time.Minute, nil)},
			true, team.Settlement{USD: 0.053, Basis: team.BasisEstimate}},
		{"every create failed: nothing rented", "error", []*receipt.Attempt{{Failure: "400 no_such_ask"}},
			true, team.Settlement{USD: 0, Basis: team.BasisNothingRented}},
		{"refused before renting", "budget_exceeded", nil,
			true, team.Settlement{USD: 0, Basis: team.BasisNothingRented}},
		{"no outcome yet", "", []*receipt.Attempt{gone(1, 0.18, time.Minute, usd(0.003))}, false, team.Settlement{}},
		{"kept by up: not confirmed destroyed", "up", []*receipt.Attempt{{InstanceID: 1, DPHTotal: 0.18, RentedAt: t0}}, false, team.Settlement{}},
		{"a create whose result is unknown may bill", "error", []*receipt.Attempt{{IntentAt: t0}}, false, team.Settlement{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &runstate.State{RunID: "r", Outcome: tc.outcome, Attempts: tc.attempts}
			got, ok := team.SettlementOf(st)
			if ok != tc.ok || got.Basis != tc.want.Basis || math.Abs(got.USD-tc.want.USD) > 1e-9 {
				t.Fatalf("got %+v ok=%v, want %+v ok=%v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if _, ok := team.SettlementOf(nil); ok {
		t.Fatal("a run with no state settled")
	}
}

// The ledger's arithmetic: a settlement replaces the reservation (the
// room comes back for the next run), a declined approval gives its own
// reservation back, a settled run approved again reserves on top of its
// spend, and a refused run leaves no line.
func TestLedgerSettles(t *testing.T) {
	ctx := context.Background()
	b := teamstate.NewMemory(nil)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := team.Period(now)
	committed := func() float64 {
		l, _, err := team.ReadLedger(ctx, b, p)
		if err != nil {
			t.Fatal(err)
		}
		_, _, c := l.Totals()
		return c
	}
	line := func(run string) *team.LedgerLine {
		l, _, err := team.ReadLedger(ctx, b, p)
		if err != nil {
			t.Fatal(err)
		}
		return l.Runs[run]
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	settle := func(run string, s team.Settlement, want bool) {
		t.Helper()
		got, err := team.Settle(ctx, b, p, run, s, now)
		if err != nil || got != want {
			t.Fatalf("settle %s: settled %v (%v), want %v", run, got, err, want)
		}
	}
	// Limit $0.20, worst case $0.108 a run: one fits, a second does not.
	must(team.Reserve(ctx, b, now, "r1", "h", 0.108, 0.20))
	if err := team.Reserve(ctx, b, now, "r2", "h", 0.108, 0.20); err == nil {
		t.Fatal("a second $0.108 reservation fitted a $0.20 limit before the first settled")
	}
	if line("r2") != nil {
		t.Fatal("a refused run left a line in the ledger")
	}
	settle("r1", team.Settlement{USD: 0.0035, Basis: team.BasisCharges}, true)
	if l := line("r1"); l.ReservedUSD != 0 || l.SettledUSD == nil || *l.SettledUSD != 0.0035 || l.Basis != team.BasisCharges || l.WorstCaseUSD != 0.108 {
		t.Fatalf("settled line %+v: want reserved 0, settled 0.0035 (charges), worst case 0.108", *l)
	}
	// Settled, the room is back: two more runs fit.
	must(team.Reserve(ctx, b, now, "r2", "h", 0.108, 0.20))
	if err := team.Reserve(ctx, b, now, "r3", "h", 0.108, 0.20); err == nil {
		t.Fatal("$0.0035 + $0.108 + $0.108 fitted a $0.20 limit")
	}
	// r2's approval declined: its reservation goes back, and the line
	// settles to nothing rented.
	must(team.Unreserve(ctx, b, p, "r2", 0.108, now))
	if l := line("r2"); l.ReservedUSD != 0 || l.SettledUSD == nil || *l.SettledUSD != 0 || l.Basis != team.BasisNothingRented {
		t.Fatalf("declined line %+v: want reserved 0, settled 0 (nothing rented)", *l)
	}
	// r1 approved again (resumed): committed is its spend plus the new ask.
	must(team.Reserve(ctx, b, now, "r1", "h", 0.05, 0.20))
	if c := committed(); math.Abs(c-0.0535) > 1e-9 {
		t.Fatalf("committed $%g after r1 reserved again, want $0.0535", c)
	}
	// Settled again: the run's charges so far replace both.
	settle("r1", team.Settlement{USD: 0.006, Basis: team.BasisEstimate}, true)
	if c := committed(); math.Abs(c-0.006) > 1e-9 {
		t.Fatalf("committed $%g after r1 settled again, want $0.006", c)
	}
	// A settlement of nothing for a run without a line adds none.
	settle("refused", team.Settlement{Basis: team.BasisNothingRented}, false)
	if line("refused") != nil {
		t.Fatal("a refused run's settlement added a line")
	}
}

// A version-1 ledger kept a settled line's reservation beside its
// settlement; read now, the reservation is released, not counted twice.
func TestLedgerV1(t *testing.T) {
	ctx := context.Background()
	b := teamstate.NewMemory(nil)
	v1, _ := json.Marshal(map[string]any{"schema": team.LedgerSchema, "v": 1, "period": "2026-12", "limit_usd": 0.1,
		"runs": map[string]any{"a": map[string]any{"reserved_usd": 0.08, "settled_usd": 0.0035}, "b": map[string]any{"reserved_usd": 0.01}}})
	if _, err := b.PutIfAbsent(ctx, team.LedgerKey("2026-12"), v1); err != nil {
		t.Fatal(err)
	}
	l, _, err := team.ReadLedger(ctx, b, "2026-12")
	if err != nil {
		t.Fatal(err)
	}
	if reserved, settled, committed := l.Totals(); math.Abs(reserved-0.01) > 1e-9 || settled != 0.0035 || math.Abs(committed-0.0135) > 1e-9 {
		t.Fatalf("v1 ledger read as reserved $%g settled $%g committed $%g; want 0.01, 0.0035, 0.0135", reserved, settled, committed)
	}
}
