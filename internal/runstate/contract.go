package runstate

import (
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// StepPriceIncrease is an event: a host asked more for the run's contract
// and the run answered (lifecycle/contract.go).
const StepPriceIncrease = "price_increase"

// PriceIncreaseData is one host's increase and the run's answer: prices
// are the contract's total $/h (GPU and storage) before and after.
type PriceIncreaseData struct {
	Instance    provider.InstanceID `json:"instance_id"`
	ID          int64               `json:"pending_price_increase_id"`
	OldDPH      float64             `json:"old_dph"`
	NewDPH      float64             `json:"new_dph"`
	CeilingDPH  float64             `json:"ceiling_dph"`
	Decision    string              `json:"decision"` // receipt.PriceAccepted, PriceRejected, PriceUnanswered
	Reason      string              `json:"reason,omitempty"`
	ContractEnd time.Time           `json:"contract_end,omitzero"`
}

// applyContract applies the contract's records to the state; Apply calls
// it for every record. An accepted increase is the attempt's price from
// then on.
func applyContract(s *State, r journal.Record) error {
	if r.Step != StepPriceIncrease || r.Type != "done" { // the answer, not its intent
		return nil
	}
	var d PriceIncreaseData
	if err := decode(r, &d); err != nil {
		return err
	}
	a := s.AttemptFor(d.Instance)
	if a == nil {
		return nil
	}
	a.PriceIncreases = append(a.PriceIncreases, receipt.PriceIncrease{ID: d.ID, At: r.Time, OldDPH: d.OldDPH, NewDPH: d.NewDPH,
		CeilingDPH: d.CeilingDPH, Decision: d.Decision, Reason: d.Reason, ContractEnd: d.ContractEnd})
	if d.Decision == receipt.PriceAccepted && d.NewDPH > 0 {
		a.DPHBase += d.NewDPH - a.DPHTotal
		a.DPHTotal = d.NewDPH
	}
	return nil
}
