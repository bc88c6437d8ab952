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
	// StepSource is where single-file snapshots' steps came from: "log"
	// (train.step_from), "file name", "json key NAME", "torch.save key
	// NAME" or "counter".
	StepSource string `json:"step_source,omitempty"`
	// Warnings are the agent's and the resumes' warnings, each once, as
	// they were printed.
	Warnings []string `json:"warnings,omitempty"`
}

// CheckpointRef names a committed checkpoint.
type CheckpointRef struct {
	Step           int64  `json:"step"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

// ResumeProof records one restart on a new (or resumed) instance: what was
// restored, and whether the workload is known to have resumed from it.
type ResumeProof struct {
	Instance     provider.InstanceID `json:"instance_id"`
	RestoredStep int64               `json:"restored_step"` // -1 with Restored "none"
	// Restored is RestoredNone when nothing was committed to restore: the
	// workload started from the beginning.
	Restored     string            `json:"restored,omitempty"`
	Skipped      []checkpoint.Skip `json:"skipped_corrupt,omitempty"`
	ReportedStep *int64            `json:"reported_step"`
	Proven       bool              `json:"proven"`
	// ProvenBy is how: ProvenReported (the workload wrote the restored
	// step to $VASTRUN_RESUME_PROOF) or ProvenObserved (the agent saw it
	// read the restored checkpoint, then report a step at or above it).
	ProvenBy string `json:"proven_by,omitempty"`
	// Read is the restored file the agent saw the workload read;
	// ObservedStep the first step it reported after that.
	Read         string `json:"read,omitempty"`
	ObservedStep *int64 `json:"observed_step,omitempty"`
	// FirstStep is the first step the workload reported there;
	// RegressedFrom is the restored step when FirstStep is below it (the
	// workload started over).
	FirstStep     *int64 `json:"first_step,omitempty"`
	RegressedFrom *int64 `json:"regressed_from,omitempty"`
	// Interrupted is why the instance was interrupted before the workload
	// reported its step (then ReportedStep is nil and Proven false): the
	// resume was not shown wrong, it had no time to be shown at all.
	Interrupted string `json:"interrupted,omitempty"`
}

// RestoredNone is ResumeProof.Restored when nothing was restored.
const RestoredNone = "none"

// How a resume was proven (ResumeProof.ProvenBy).
const (
	ProvenReported = "reported"
	ProvenObserved = "observed"
)

// MetricsFile is the evidence file of the workload's metrics: every JSON
// object it appended to $VASTRUN_METRICS, one a line, each with the
// attempt it came from ("attempt", 1-based) added.
const MetricsFile = "metrics.jsonl"
