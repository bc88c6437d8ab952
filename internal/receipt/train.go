package receipt

import (
	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/provider"
)

// Training's section of the receipt (`train`, docs/receipt.md): the train
// workflow (internal/workflow/train) fills it.

// TrainReport is the training part of the receipt.
type TrainReport struct {
	CheckpointURI  string         `json:"checkpoint_uri"`
	LastCheckpoint *CheckpointRef `json:"last_checkpoint,omitempty"`
	Resumes        []ResumeProof  `json:"resumes"`
	OutputsURI     string         `json:"outputs_uri,omitempty"`
	OutputsSHA256  string         `json:"outputs_manifest_sha256,omitempty"`
	Result         map[string]any `json:"result,omitempty"`
	ExitCode       *int           `json:"exit_code,omitempty"`
}

// CheckpointRef names a committed checkpoint.
type CheckpointRef struct {
	Step           int64  `json:"step"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

// ResumeProof records one restore and what the workload said it resumed from.
type ResumeProof struct {
	Instance     provider.InstanceID `json:"instance_id"`
	RestoredStep int64               `json:"restored_step"`
	Skipped      []checkpoint.Skip   `json:"skipped_corrupt,omitempty"`
	ReportedStep *int64              `json:"reported_step"`
	Proven       bool                `json:"proven"`
	// Interrupted is why the instance was interrupted before the workload
	// reported its step (then ReportedStep is nil and Proven false): the
	// resume was not shown wrong, it had no time to be shown at all.
	Interrupted string `json:"interrupted,omitempty"`
}

// MetricsFile is the evidence file of the workload's metrics: every JSON
// object it appended to $VASTRUN_METRICS, one a line, each with the
// attempt it came from ("attempt", 1-based) added.
const MetricsFile = "metrics.jsonl"
