package providertest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// PriceFaults lets the suite make a host raise its price: the simulator's
// hosts. Nil against the live API, whose hosts are not ours to move.
type PriceFaults interface {
	// RaisePrice makes id's host ask dph $/h (GPU) now; unless accepted,
	// the contract ends term later.
	RaisePrice(id provider.InstanceID, dph float64, term time.Duration) error
}

// contractCases pin a contract's end and its host's price increases
// (vast-api.md §12.2, §12.4).
var contractCases = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"PriceIncreaseAnsweredAndContractEnds", testPriceIncrease},
}

// pendingFor is the pending increase on contract id, or nil.
func pendingFor(t *testing.T, h Harness, ops provider.Operations, id provider.InstanceID) *provider.PriceIncrease {
	t.Helper()
	list, err := ops.PendingPriceIncreases(ctxFor(t))
	if err != nil {
		t.Fatalf("list pending price increases: %v", err)
	}
	var found *provider.PriceIncrease
	for i := range list {
		if list[i].ContractID == id {
			if found != nil {
				t.Fatalf("two pending increases on contract %d: %+v", id, list)
			}
			found = &list[i]
		}
	}
	return found
}

// testPriceIncrease: a host's increase is listed in the documented shape;
// answering it takes exactly its id, once (a second answer is 404
// no_pending_price_increase); rejected, the contract keeps its price and
// ends at the increase's contract_end_date, after which the instance is
// expired and not running; accepted, the new price is billed and the
// contract goes on past that date.
func testPriceIncrease(t *testing.T, h Harness) {
	ops := needOps(t, h)
	ctx := ctxFor(t)
	for _, answer := range []func(context.Context, int64) error{ops.AcceptPriceIncrease, ops.RejectPriceIncrease} {
		err := answer(ctx, 1)
		var ae *provider.APIError
		if !errors.Is(err, provider.ErrNotFound) || !errors.As(err, &ae) || ae.Code != "no_pending_price_increase" {
			t.Errorf("answering an increase that is not pending: %v, want 404 no_pending_price_increase", err)
		}
	}
	pf, _ := h.Faults.(PriceFaults)
	if h.Live || pf == nil {
		return // no host of ours to raise a price
	}
	const term = 10 * time.Minute
	for _, accept := range []bool{false, true} {
		_, res := rentCheapest(t, h, uniqueLabel("vastrun-conformance-price"))
		id := res.InstanceID
		inst := waitRunning(t, h, id)
		if p := pendingFor(t, h, ops, id); p != nil {
			t.Fatalf("a pending increase on a new contract: %+v", p)
		}
		newDPH := math.Round(inst.DPHBase*2*1e4) / 1e4
		if err := pf.RaisePrice(id, newDPH, term); err != nil {
			t.Fatal(err)
		}
		asked := h.now()
		p := pendingFor(t, h, ops, id)
		switch {
		case p == nil:
			t.Fatalf("the raised price is not listed as pending on contract %d", id)
		case p.ID == 0 || math.Abs(p.NewGPUDPH()-newDPH) > 1e-4 || math.Abs(p.OldGPUDPH()-inst.DPHBase) > 1e-4:
			t.Errorf("pending increase %+v, want id, old $%v/h, new $%v/h", p, inst.DPHBase, newDPH)
		case p.ContractEnd.Sub(asked.Add(term)).Abs() > 2*time.Second:
			t.Errorf("the contract ends %v, want %v (the increase's term)", p.ContractEnd, asked.Add(term))
		}
		cur, err := h.Market.ShowInstance(ctx, id)
		if err != nil || math.Abs(cur.DPHTotal-inst.DPHTotal) > 1e-6 || cur.EndDate.Sub(p.ContractEnd).Abs() > time.Second {
			t.Errorf("while pending the contract shows $%v/h ending %v (%v); want its old $%v/h, ending %v", cur.DPHTotal, cur.EndDate, err, inst.DPHTotal, p.ContractEnd)
		}
		answer, other := ops.RejectPriceIncrease, ops.AcceptPriceIncrease
		if accept {
			answer, other = other, answer
		}
		if err := answer(ctx, p.ID); err != nil {
			t.Fatalf("answer increase %d: %v", p.ID, err)
		}
		if q := pendingFor(t, h, ops, id); q != nil {
			t.Errorf("increase %d still pending after its answer", q.ID)
		}
		for _, again := range []func(context.Context, int64) error{answer, other} {
			if err := again(ctx, p.ID); !errors.Is(err, provider.ErrNotFound) {
				t.Errorf("a second answer to increase %d: %v, want not found", p.ID, err)
			}
		}
		if err := h.Sleep(ctx, term+time.Second); err != nil {
			t.Fatal(err)
		}
		cur, err = h.Market.ShowInstance(ctx, id)
		switch {
		case err != nil:
			t.Fatalf("show after the increase's term: %v", err)
		case accept && (!cur.Running() || math.Abs(cur.DPHTotal-inst.DPHTotal-(newDPH-inst.DPHBase)) > 1e-4 || !cur.EndDate.After(h.now())):
			t.Errorf("accepted: the contract shows %s at $%v/h ending %v; want running at $%v/h past the term", cur.ActualStatus, cur.DPHTotal, cur.EndDate, inst.DPHTotal+newDPH-inst.DPHBase)
		case !accept && (cur.Running() || cur.EndDate.After(h.now())):
			t.Errorf("rejected: the contract shows %s ending %v after its end; want it expired", cur.ActualStatus, cur.EndDate)
		case !accept && math.Abs(cur.DPHBase-inst.DPHBase) > 1e-6:
			t.Errorf("rejected: the contract's price became $%v/h, want its old $%v/h", cur.DPHBase, inst.DPHBase)
		}
	}
}
