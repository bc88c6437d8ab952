package train

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
)

// A checkpoint the agent reports is journaled, and when that write fails
// (a full disk) noteStatus says so after taking the rest of the answer:
// training must not go on past a record the journal lacks. The error was
// dropped, so the controller went on training, hours perhaps, on a run
// that could only end as an error.
func TestUnjournaledCheckpointIsAnError(t *testing.T) {
	cfg, err := config.Parse([]byte("image: ubuntu:22.04\ntest: true\ngpu:\n  models: [RTX_4090]\n  max_dph: 1.0\nbudget:\n  max_spend: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	errFull := errors.New("no space left on device")
	s := lifecycle.New(&lifecycle.Deps{Config: cfg, Clock: clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)), Log: slog.New(slog.DiscardHandler), Redactor: redact.New(),
		StateRoot: filepath.Join(root, "state"), EvidenceDir: filepath.Join(root, "evidence"),
		JournalFault: func(r journal.Record) error {
			if r.Step == "checkpoint" {
				return errFull
			}
			return nil
		}})
	if err := s.Begin("train"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := newFlow(s)
	e.report = &receipt.TrainReport{}
	st := agent.Report{Checkpoint: agent.Progress{LastStep: 100, LastSHA256: "ab12"}, Agent: agent.AgentInfo{Warnings: []string{"w"}}}
	err = e.noteStatus(7, st, map[string]bool{})
	if !errors.Is(err, lifecycle.ErrJournal) || !errors.Is(err, errFull) {
		t.Fatalf("noteStatus with the checkpoint record refused: %v, want the journal's error", err)
	}
	// The rest of the answer is taken all the same.
	if e.report.LastCheckpoint == nil || e.report.LastCheckpoint.Step != 100 || len(e.report.Warnings) != 1 {
		t.Fatalf("report after the failed record: %+v", e.report)
	}
	// A checkpoint already journaled is not journaled again: no error.
	if err := e.noteStatus(7, st, map[string]bool{}); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
}
