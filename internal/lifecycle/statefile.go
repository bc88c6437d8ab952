package lifecycle

import (
	"encoding/json"
	"path/filepath"
	"sort"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// stateFile is a small summary beside the journal for scripts and the
// GitHub Action's post step; the journal stays the source of truth.
type stateFile struct {
	Schema      string                `json:"schema"`
	RunID       string                `json:"run_id"`
	Label       string                `json:"label"`
	Instances   []provider.InstanceID `json:"instance_ids"`
	Unconfirmed []provider.InstanceID `json:"unconfirmed_instance_ids"`
	Outcome     string                `json:"outcome,omitempty"`
	EvidenceDir string                `json:"evidence_dir,omitempty"`
}

func (e *Deps) writeStateFile(runDir string, s *runstate.State, evidence string) error {
	ids := s.Instances()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	b, _ := json.MarshalIndent(stateFile{Schema: "vastrun.state/v1", RunID: s.RunID, Label: s.Label, Instances: ids,
		Unconfirmed: s.Unconfirmed(), Outcome: string(s.Outcome), EvidenceDir: evidence}, "", "  ")
	return e.writeFileAtomic(filepath.Join(runDir, "state.json"), append(b, '\n'), 0o600)
}
