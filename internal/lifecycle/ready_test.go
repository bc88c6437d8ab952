package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// TestReadySeenWithinAProbeOfSSH: while the instance boots (the
// simulator's 2 s schedule and 8 s pull, on the run's clock) with its SSH
// address published, the ready wait dials SSH every probeEvery, so the
// rental is seen ready within a probe interval of its sshd answering
// (the simulator's running moment), not at the next API poll (up to 5 s
// later while loading), and the API is not asked more often for it.
func TestReadySeenWithinAProbeOfSSH(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	if _, err := ci.Run(context.Background(), h.engine); err != nil {
		t.Fatalf("ci: %v\n%s", err, h.ui)
	}
	h.noLeaks()
	gone := h.sim.Snapshot().Gone
	if len(gone) != 1 || gone[0].RunningSince.IsZero() {
		t.Fatalf("gone %+v", gone)
	}
	recs, err := journal.Read(h.engine.RunDir())
	if err != nil {
		t.Fatal(err)
	}
	var ready, rented time.Time
	for _, r := range recs {
		switch {
		case r.Step == "ready" && r.Type == "done":
			ready = r.Time
		case r.Step == "rent" && r.Type == "done":
			rented = r.Time
		}
	}
	lag := ready.Sub(gone[0].RunningSince)
	if ready.IsZero() || lag < 0 || lag > 300*time.Millisecond {
		t.Fatalf("ready seen %s after the simulator's running moment, want within a probe interval (250ms)", lag)
	}
	// The API poll kept its cadence: 2 s, then ×1.5 up to 5 s while
	// loading, jitter fixed at 0 here; the boot took 10 s.
	if shows := h.shows.before(ready); shows > 6 {
		t.Fatalf("%d shows while booting for %s", shows, ready.Sub(rented))
	}
}
