package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/checkpoint"
)

// The agent protocol: the controller asks `vastrun agent status --json` (and
// `agent start --json`, `agent restore --json`) over SSH and decides only on
// these typed answers. Everything the controller acts on — whether the
// workload runs, how it exited, which step it resumed from — is read and
// parsed here, on the instance, by the agent; the controller never parses
// free text the workload could have written.
const (
	// StatusSchema names the document `agent status --json` prints.
	StatusSchema = "vastrun.agent.status"
	// StartSchema names the document `agent start --json` prints.
	StartSchema = "vastrun.agent.start"
	// RestoreSchema names the document `agent restore --json` prints.
	RestoreSchema = "vastrun.agent.restore"
	// SchemaVersion is the only protocol version this binary speaks. The
	// controller uploads its own binary as the agent, so both ends match;
	// a different version means a stale or foreign agent and is refused.
	SchemaVersion = 1
)

// Workload states.
const (
	WorkloadAbsent  = "absent"  // never started on this instance
	WorkloadRunning = "running" // started and not exited
	WorkloadExited  = "exited"  // exited; ExitCode holds its status
	// WorkloadLost: started, but the agent that owns it is gone and the
	// process with it, so how it ended is unknown. Never a success.
	WorkloadLost = "lost"
)

// ErrSchema means an answer is not a protocol document this controller
// understands (another schema, another version, or malformed).
var ErrSchema = errors.New("agent protocol: unsupported answer")

// Report is the answer to `vastrun agent status --json`.
type Report struct {
	Schema        string    `json:"schema"`
	SchemaVersion int       `json:"schema_version"`
	Time          time.Time `json:"time"`
	Home          string    `json:"home"` // the login directory every path is anchored at
	Agent         AgentInfo `json:"agent"`
	Workload      Workload  `json:"workload"`
	Checkpoint    Progress  `json:"checkpoint"`
	// Resume is set when a checkpoint was restored on this instance.
	Resume *Resume `json:"resume,omitempty"`
	// HeartbeatAgeSeconds is the age of the controller's heartbeat before
	// this call touched it; nil when there was none yet.
	HeartbeatAgeSeconds *float64 `json:"heartbeat_age_seconds"`
	Disk                Disk     `json:"disk"`
	// Log is the part of the workload's log from the requested offset.
	Log LogChunk `json:"log"`
	// Metrics is the part of the workload's $VASTRUN_METRICS file (JSON
	// lines) from the requested offset; absent when no log was asked for.
	Metrics *LogChunk `json:"metrics,omitempty"`
}

// AgentInfo says whether the agent process that owns the workload is alive.
type AgentInfo struct {
	Running bool     `json:"running"`
	Errors  []string `json:"errors"`
	// Warnings are the agent's advice to the person (each once; the
	// controller prints them): a file it ignores, a step line that never
	// comes, saves it cannot label.
	Warnings          []string `json:"warnings,omitempty"`
	SelfDestroyed     bool     `json:"self_destroyed,omitempty"`
	SelfDestroyReason string   `json:"self_destroy_reason,omitempty"`
}

// Workload is the workload's life as the agent that started it saw it.
type Workload struct {
	State    string     `json:"state"`
	PID      int        `json:"pid,omitempty"`
	Started  *time.Time `json:"started,omitempty"`
	Ended    *time.Time `json:"ended,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"` // from wait(2), 128+N for signal N
	Signal   string     `json:"signal,omitempty"`
	// Finalized: after the exit, the agent's final checkpoint pass is done,
	// so Checkpoint holds the run's last checkpoint.
	Finalized bool   `json:"finalized"`
	Error     string `json:"error,omitempty"`
}

// Progress is what has been committed, and what is still on local disk.
type Progress struct {
	LastStep   int64   `json:"last_committed_step"`
	LastSHA256 string  `json:"last_manifest_sha256,omitempty"`
	Committed  []int64 `json:"committed_steps"`
	Local      []int64 `json:"local_steps"`
	LastSize   int64   `json:"last_size_bytes"`
	// StepSource is where single-file snapshots' steps come from: "log"
	// (train.step_from), "file name", "json key NAME", "torch.save key
	// NAME" or "counter".
	StepSource string `json:"step_source,omitempty"`
}

// Resume is the restore on this instance and the proof of it: the
// workload's own report, or what the agent observed (observe.go).
type Resume struct {
	RestoredStep int64 `json:"restored_step"`
	// ReportedStep is what the workload wrote to VASTRUN_RESUME_PROOF,
	// when that is a step number; anything else is in Error.
	ReportedStep *int64 `json:"reported_step"`
	Proven       bool   `json:"proven"`
	// ProvenBy is how: ProvenReported or ProvenObserved ("" not proven).
	ProvenBy string `json:"proven_by,omitempty"`
	// Read is a restored file the workload was seen reading.
	Read string `json:"read,omitempty"`
	// FirstStep is the first step the workload reported here (below
	// RestoredStep: it started over); ObservedStep the first after Read.
	FirstStep    *int64 `json:"first_step,omitempty"`
	ObservedStep *int64 `json:"observed_step,omitempty"`
	// Unobservable says why the agent cannot see reads here.
	Unobservable string `json:"unobservable,omitempty"`
	Error        string `json:"error,omitempty"`
}

// Regressed reports whether the workload started below the restored step.
func (r Resume) Regressed() bool { return r.FirstStep != nil && *r.FirstStep < r.RestoredStep }

// Disk is the free space where the workload writes.
type Disk struct {
	FreeBytes  uint64 `json:"free_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
	// Low: a warning; Full: too little room for another checkpoint, so the
	// run should stop with the last committed one.
	Low  bool `json:"low,omitempty"`
	Full bool `json:"full,omitempty"`
}

// LogChunk is a slice of the workload's log.
type LogChunk struct {
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"` // base64 in JSON
	Size   int64  `json:"size"` // the whole log's size
}

// StartResult is the answer to `vastrun agent start --json`.
type StartResult struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
	Started       bool   `json:"started"`
	// Refused says why nothing was started (a workload already runs or ran
	// on this instance: the agent never starts a second one).
	Refused string `json:"refused,omitempty"`
	PID     int    `json:"pid,omitempty"`
}

// RestoreResult is the answer to `vastrun agent restore --json`.
type RestoreResult struct {
	Schema         string            `json:"schema"`
	SchemaVersion  int               `json:"schema_version"`
	Step           int64             `json:"step"` // -1: nothing committed
	ManifestSHA256 string            `json:"manifest_sha256,omitempty"`
	Skipped        []checkpoint.Skip `json:"skipped"`
	Placed         []string          `json:"placed,omitempty"` // single-file checkpoints put back at these paths
}

func checkSchema(schema string, version int, want string) error {
	if schema != want || version != SchemaVersion {
		return fmt.Errorf("%w: %s version %d (this vastrun speaks %s version %d)", ErrSchema, orNone(schema), version, want, SchemaVersion)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "no schema"
	}
	return s
}

// DecodeReport parses and checks an `agent status --json` answer.
func DecodeReport(b []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := checkSchema(r.Schema, r.SchemaVersion, StatusSchema); err != nil {
		return Report{}, err
	}
	switch r.Workload.State {
	case WorkloadAbsent, WorkloadRunning, WorkloadLost:
	case WorkloadExited:
		if r.Workload.ExitCode == nil {
			return Report{}, fmt.Errorf("%w: workload exited without an exit code", ErrSchema)
		}
	default:
		return Report{}, fmt.Errorf("%w: unknown workload state %q", ErrSchema, r.Workload.State)
	}
	return r, nil
}

// DecodeStart parses and checks an `agent start --json` answer.
func DecodeStart(b []byte) (StartResult, error) {
	var r StartResult
	if err := json.Unmarshal(b, &r); err != nil {
		return StartResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return r, checkSchema(r.Schema, r.SchemaVersion, StartSchema)
}

// DecodeRestore parses and checks an `agent restore --json` answer.
func DecodeRestore(b []byte) (RestoreResult, error) {
	var r RestoreResult
	if err := json.Unmarshal(b, &r); err != nil {
		return RestoreResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return r, checkSchema(r.Schema, r.SchemaVersion, RestoreSchema)
}

// ArmSchema names the answer to an arm request.
const ArmSchema = "vastrun.agent.arm"

// ArmResult is the answer to an arm request: the switch's settings as the
// instance counts them.
type ArmResult struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
	// Armed: a switch is armed on this instance (false only for a refresh
	// of an instance never armed).
	Armed bool `json:"armed"`
	// Started: this call started the switch's process (PID); otherwise
	// the running one reads the new settings.
	Started bool     `json:"started,omitempty"`
	PID     int      `json:"pid,omitempty"`
	TTL     Duration `json:"ttl"`
	Bound   Duration `json:"bound,omitempty"`
	// BeatEvery is how often the controller must beat, on the wall clock.
	BeatEvery Duration `json:"beat_every"`
	// ClockSpeed is how much faster than the wall clock the instance
	// counts the TTL: 1, except under vastrun's simulator.
	ClockSpeed float64 `json:"clock_speed"`
}

// DecodeArm parses and checks an arm answer.
func DecodeArm(b []byte) (ArmResult, error) {
	var r ArmResult
	if err := json.Unmarshal(b, &r); err != nil {
		return ArmResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	if err := checkSchema(r.Schema, r.SchemaVersion, ArmSchema); err != nil {
		return ArmResult{}, err
	}
	if r.Armed && (r.TTL <= 0 || r.BeatEvery <= 0 || r.ClockSpeed < 1) {
		return ArmResult{}, fmt.Errorf("%w: an armed switch without a TTL, a beat or a clock speed", ErrSchema)
	}
	return r, nil
}

// ManifestSchema names the document `agent manifest --json` prints.
const ManifestSchema = "vastrun.agent.manifest"

// FileSum is one file of an upload manifest.
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ManifestResult is the answer to `vastrun agent manifest --json PATH...`:
// every regular file under the paths, relative to the login directory.
type ManifestResult struct {
	Schema        string             `json:"schema"`
	SchemaVersion int                `json:"schema_version"`
	Files         map[string]FileSum `json:"files"`
}

// DecodeManifest parses and checks an `agent manifest --json` answer.
func DecodeManifest(b []byte) (ManifestResult, error) {
	var r ManifestResult
	if err := json.Unmarshal(b, &r); err != nil {
		return ManifestResult{}, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	return r, checkSchema(r.Schema, r.SchemaVersion, ManifestSchema)
}
