package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// A resumed finished run exits as the run did: its own class, by its
// outcome; a teardown still unconfirmed wins (7).
func TestFinishedRunExitsWithItsOwnClass(t *testing.T) {
	finished := func(o receipt.Outcome) error {
		return &lifecycle.FinishedError{RunID: "r1", Workflow: "ci", Outcome: o}
	}
	for _, tc := range []struct {
		err  error
		want int
		hint string
	}{
		{finished(receipt.Failed), ExitTestFailed, "start a new one (vastrun ci --yes)"},
		{finished(receipt.GPUOnlyFailure), ExitTestFailed, "vastrun report r1"},
		{finished(receipt.Budget), ExitBudget, "never run again"},
		{finished(receipt.ReadyFailed), ExitProvision, "never run again"},
		{finished(receipt.Interrupted), ExitInterrupted, "never run again"},
		{finished(receipt.Error), ExitError, "never run again"},
		{errors.Join(finished(receipt.Passed), &lifecycle.CleanupError{Label: "l1", Instances: []provider.InstanceID{7}, Err: errors.New("503")}), ExitUnconfirmed, "vastrun down --label l1 --yes"},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.err, got, tc.want)
		}
		if h := strings.Join(hints(tc.err), "\n"); !strings.Contains(h, tc.hint) {
			t.Errorf("%v: hints %q lack %q", tc.err, h, tc.hint)
		}
	}
}
