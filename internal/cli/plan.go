package cli

import (
	"fmt"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/progress"
)

// spendBound says, in the plan, what bounds the money: for a training run
// the open-ended job is stopped by the budget kill switch, so the budget is
// the bound and the deadlines only price reaching a running instance; for
// everything else every deadline used to the full is the worst case.
func spendBound(p lifecycle.Plan, workflow string) string {
	if workflow == "train" {
		return fmt.Sprintf("up to %s: the budget kill switch stops the run; $%.4f to reach a running instance and tear it down (ready + teardown deadlines at $%.4f/h)",
			progress.USD(p.MaxSpendUSD), p.WorstCase, p.TotalDPH)
	}
	return fmt.Sprintf("worst case $%.4f if every deadline is used; budget $%.2f", p.WorstCase, p.MaxSpendUSD)
}
