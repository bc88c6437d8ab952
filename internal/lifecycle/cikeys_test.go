package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// Two runs in one CI job: each keeps its own cleanup handles in the CI's
// durable state; the plain keys name the latest run only.
func TestTwoRunsInOneJobKeepSeparateCleanupHandles(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	first, err := ci.Run(context.Background(), h.engine)
	if err != nil {
		t.Fatal(err)
	}
	second := *h.engine
	second.EvidenceDir = filepath.Join(t.TempDir(), "ev2")
	r2, err := ci.Run(context.Background(), &second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(h.ghOut), "gh_state"))
	if err != nil {
		t.Fatal(err)
	}
	state := string(b)
	for _, r := range []*receipt.Receipt{first, r2} {
		for _, want := range []string{
			"label_" + r.RunID + "=" + r.Label + "\n",
			"instance_id_" + r.RunID + "=" + r.Attempts[0].InstanceID.String() + "\n",
		} {
			if !strings.Contains(state, want) {
				t.Errorf("GITHUB_STATE lacks %q:\n%s", want, state)
			}
		}
	}
	if first.RunID == r2.RunID || first.Label == r2.Label {
		t.Fatalf("the two runs share an id or label: %s %s", first.RunID, r2.RunID)
	}
	// The plain key is a convenience: its last value is the latest run.
	if i := strings.LastIndex(state, "\nlabel="); i < 0 || !strings.HasPrefix(state[i+1:], "label="+r2.Label+"\n") {
		t.Errorf("the plain label key does not end on the latest run:\n%s", state)
	}
	h.noLeaks()
}
