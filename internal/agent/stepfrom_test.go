package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vastrun/vastrun/internal/config"
)

func TestStepFromTheLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "train.log")
	os.WriteFile(log, []byte("iteration 290 loss 1\n{\"iter\": 300, \"val\": 2}\niteration 310 loss 1\nsaved step 300\n{\"iter\": \"x\"}\n"), 0o644)
	for from, want := range map[string]int64{"json:iter": 300, `regex:saved step (\d+)`: 300, `regex:iteration (\d+)`: 310, "": 8} {
		if err := config.CheckStepFrom(from); err != nil {
			t.Fatal(from, err)
		}
		s := &snapshotter{o: Options{StepFrom: from, LogFile: log}}
		got, err := s.step(7)
		if err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", from, got, err, want)
		}
	}
	for _, bad := range []string{"json:", "regex:no group", "regex:(", "log:iter"} {
		if config.CheckStepFrom(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := &snapshotter{o: Options{StepFrom: "json:epoch", LogFile: log}}
	if _, err := s.step(7); err == nil {
		t.Error("a field the log never printed gave a step")
	}
}
