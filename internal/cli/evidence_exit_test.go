package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vastrun/vastrun/internal/lifecycle"
)

// A failed evidence upload is exit 11 only when the run itself passed; the
// run's own class wins otherwise, and an unconfirmed cleanup wins over all.
func TestExitCodeEvidenceUpload(t *testing.T) {
	ev := &lifecycle.EvidenceUploadError{URI: "s3://b/p/run/", Err: errors.New("connection refused")}
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"alone", ev, ExitEvidence},
		{"joined alone", errors.Join(nil, ev), ExitEvidence},
		{"receipt too", errors.Join(ev, ev), ExitEvidence},
		{"with a failed test", errors.Join(&lifecycle.TestFailedError{Code: 1}, ev), ExitTestFailed},
		{"with an unconfirmed cleanup", errors.Join(&lifecycle.CleanupError{Label: "l", Err: errors.New("x")}, ev), ExitUnconfirmed},
		{"with an interruption", errors.Join(fmt.Errorf("test: %w", context.Canceled), ev), ExitInterrupted},
		{"no upload error", &lifecycle.TestFailedError{Code: 2}, ExitTestFailed},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
	if !errors.Is(ev, lifecycle.ErrEvidenceUpload) {
		t.Error("EvidenceUploadError does not match ErrEvidenceUpload")
	}
}
