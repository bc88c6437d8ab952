package lifecycle_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

// unkeepable makes the evidence file name a link to dev, a device: a
// device cannot be synced (EINVAL), so the log's Close fails as it does
// on a disk that filled up or a failing device; /dev/full also refuses
// every write (ENOSPC).
func unkeepable(t *testing.T, h *harness, name, dev string) {
	t.Helper()
	if _, err := os.Stat(dev); err != nil {
		t.Skipf("no %s here", dev)
	}
	if err := os.MkdirAll(h.engine.EvidenceDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dev, filepath.Join(h.engine.EvidenceDir, name)); err != nil {
		t.Fatal(err)
	}
}

// test.log is the test's evidence: a test whose output could not be kept
// does not pass. Its one line has no newline, so nothing reaches the file
// before the log is closed: only the close can tell. /dev/null, not
// /dev/full: the receipt's summary reads the log's tail back, and
// /dev/full reads as endless zeros.
func TestTestLogUnwritableFailsTheStep(t *testing.T) {
	h := newHarness(t, strings.Replace(baseConfig, "test: sh scripts/gpu-test.sh", "test: printf all-good", 1), true)
	unkeepable(t, h, "test.log", "/dev/null")
	r, err := ci.Run(context.Background(), h.engine)
	if err == nil || !strings.Contains(err.Error(), "write test.log") {
		t.Fatalf("err %v, want the test.log write error", err)
	}
	if r == nil || r.Outcome == lifecycle.OutcomePassed || !r.Cleanup.Confirmed {
		t.Fatalf("receipt: %+v", r)
	}
	h.noLeaks()
}

// gate.log likewise: a gate whose log could not be written rents nothing.
func TestGateLogUnwritableRentsNothing(t *testing.T) {
	h := newHarness(t, baseConfig+"gate: [\"printf cpu-ok\"]\n", true)
	unkeepable(t, h, "gate.log", "/dev/full")
	r, err := ci.Run(context.Background(), h.engine)
	if err == nil || !strings.Contains(err.Error(), "write gate.log") {
		t.Fatalf("err %v, want the gate.log write error", err)
	}
	if r == nil || r.Outcome == lifecycle.OutcomePassed {
		t.Fatalf("receipt: %+v", r)
	}
	if st := h.sim.Snapshot(); len(st.Live)+len(st.Gone) != 0 {
		t.Fatal("rented although the gate's log could not be written")
	}
}
