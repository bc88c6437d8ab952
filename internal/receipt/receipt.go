package receipt

import (
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// Schema versions the receipt; docs/receipt.md documents it.
const Schema = "vastrun.receipt/v1"

// Receipt is the run's evidence summary (docs/receipt.md).
type Receipt struct {
	Schema         string        `json:"schema"`
	Workflow       string        `json:"workflow"`
	RunID          string        `json:"run_id"`
	Label          string        `json:"label"`
	Outcome        Outcome       `json:"outcome"`
	Error          string        `json:"error,omitempty"`
	Simulated      bool          `json:"simulated"`
	SimInstance    string        `json:"sim_instance,omitempty"`
	PlanSHA256     string        `json:"plan_sha256,omitempty"` // the saved plan the run applied (vastrun apply)
	CI             CI            `json:"ci"`
	Commit         string        `json:"commit"`
	Image          string        `json:"image"`
	ManifestSHA256 string        `json:"manifest_sha256"`
	Attempts       []*Attempt    `json:"attempts"`
	Test           *TestOutcome  `json:"test,omitempty"`
	Verify         *VerifyReport `json:"verify,omitempty"`
	// The workflows' own sections (train, canary), in their place in
	// the JSON; the core renders them without naming one.
	Sections
	Timings        map[string]float64 `json:"timings_s"`
	Cost           Cost               `json:"cost"`
	Cleanup        Cleanup            `json:"cleanup"`
	StartedAt      time.Time          `json:"started_at,omitzero"`
	FinishedAt     time.Time          `json:"finished_at,omitzero"`
	EvidenceDir    string             `json:"evidence_dir"`
	EvidenceUpload *EvidenceUpload    `json:"evidence_upload,omitempty"` // evidence.uri's copy (evidence.go)
	// SimTime is set when the simulator ran scaled: the receipt's own times
	// and timings are wall-clock, these are the simulated ones.
	SimTime *SimTime `json:"sim_time,omitempty"`
	// Notify is what the run's notifications did (notify: in the config).
	Notify *Notify `json:"notify,omitempty"`
}

// Notify records the run's webhook notifications: the setting, and what
// became of each event (docs/config.md, notify.*).
type Notify struct {
	WebhookEnv string           `json:"webhook_env"`
	Events     []string         `json:"events"`
	Deliveries []NotifyDelivery `json:"deliveries"`
	Dropped    int              `json:"dropped,omitempty"` // events that found the queue full
	Error      string           `json:"error,omitempty"`   // why nothing was sent
}

// NotifyDelivery is one event's delivery.
type NotifyDelivery struct {
	Event     string    `json:"event"`
	At        time.Time `json:"at"`
	Delivered bool      `json:"delivered"`
	Attempts  int       `json:"attempts"`
	Status    int       `json:"status,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// SimTime labels the figures of a scaled simulator run in simulated time.
type SimTime struct {
	Speed      float64            `json:"speed"`
	Timings    map[string]float64 `json:"timings_s"`
	StartedAt  time.Time          `json:"started_at,omitzero"`
	FinishedAt time.Time          `json:"finished_at,omitzero"`
}

// CI identifies the CI run.
type CI struct {
	System string `json:"system,omitempty"`
	RunID  string `json:"run_id,omitempty"`
	RunURL string `json:"run_url,omitempty"`
	Repo   string `json:"repo,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Event  string `json:"event,omitempty"`
}

// Cleanup says whether every rental is confirmed gone, and how.
type Cleanup struct {
	Confirmed   bool                  `json:"confirmed"`
	Unconfirmed []provider.InstanceID `json:"unconfirmed_instance_ids"`
	AlertSent   bool                  `json:"alert_sent"`
	// Warnings are what the cleanup could not check although every
	// instance the run knew of is confirmed destroyed (a label listing
	// that never completed): no failure, but worth a look.
	Warnings []string `json:"warnings,omitempty"`
	// LateInstanceIDs are instances that appeared with the run's label
	// after a create was judged not rented (Vast processed it late); the
	// teardown destroyed them, confirmed like any other.
	LateInstanceIDs []provider.InstanceID `json:"late_instance_ids,omitempty"`
}

// Cost is what the run cost: the estimate, what Vast charged when it
// could be read, and the budget.
type Cost struct {
	EstimateUSD float64  `json:"estimate_usd"`
	ChargedUSD  *float64 `json:"charged_usd"`
	// DiscrepancyUSD is charged minus estimated, when charges were read.
	DiscrepancyUSD *float64 `json:"discrepancy_usd,omitempty"`
	MaxSpendUSD    float64  `json:"max_spend_usd"`
	ChargesNote    string   `json:"charges_note,omitempty"`
	Interruptible  *BidCost `json:"interruptible,omitempty"` // bid rentals (bidreceipt.go)
	AlertSent      bool     `json:"-"`
}

// BidCost is the run's interruptible money, from Vast's charges: what was
// charged, what the same GPU-seconds would have cost on demand (the same
// offers' on-demand GPU price, and storage without the time stopped), and
// the difference.
type BidCost struct {
	ChargedUSD    float64 `json:"charged_usd"`
	OnDemandUSD   float64 `json:"on_demand_usd"`
	SavingUSD     float64 `json:"saving_usd"`
	SavingPercent float64 `json:"saving_percent"`
	GPUSeconds    float64 `json:"gpu_seconds"`
	Interruptions int     `json:"interruptions"`
	// StoppedStorageUSD is the storage billed while outbid, in ChargedUSD.
	StoppedStorageUSD float64 `json:"stopped_storage_usd"`
}

// TestOutcome is how the test ended and what it reported.
type TestOutcome struct {
	// ExitCode is the test's exit status; nil when it did not end on its
	// own: Interrupted (a signal stopped the run) or TimedOut (stopped at
	// the job timeout). An interrupted test never reads as a pass.
	ExitCode    *int           `json:"exit_code,omitempty"`
	Signal      string         `json:"signal,omitempty"`
	Interrupted bool           `json:"interrupted,omitempty"`
	Result      map[string]any `json:"result,omitempty"`
	ResultErr   string         `json:"result_error,omitempty"`
	Log         string         `json:"log"`
	TimedOut    bool           `json:"timed_out,omitempty"`
}

// Exited records the test's exit status.
func (t *TestOutcome) Exited(code int) { t.ExitCode = &code }

// Code is the exit status, -1 when the test did not end on its own.
func (t *TestOutcome) Code() int {
	if t.ExitCode == nil {
		return -1
	}
	return *t.ExitCode
}

// Passed reports a test that ended on its own with status 0.
func (t *TestOutcome) Passed() bool { return t.ExitCode != nil && *t.ExitCode == 0 }

// Status is how the test ended, in words: "exit 3", "exit 137 (signal
// KILL)", "interrupted" or "timed out".
func (t *TestOutcome) Status() string {
	switch {
	case t.Interrupted:
		return "interrupted"
	case t.TimedOut:
		return "timed out"
	case t.ExitCode == nil:
		return "no exit status"
	case t.Signal != "":
		return fmt.Sprintf("exit %d (signal %s)", *t.ExitCode, t.Signal)
	}
	return fmt.Sprintf("exit %d", *t.ExitCode)
}

// Check is one verify check: what was checked, whether it held, and what
// was seen.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// VerifyReport is what verify found on the instance: its image, GPUs,
// CUDA and disk, and each check against the policy.
type VerifyReport struct {
	ImageUUID  string    `json:"image_uuid"`
	GPUs       []GPUInfo `json:"gpus"`
	CUDA       float64   `json:"cuda_version"`
	FreeDiskGB float64   `json:"free_disk_gb"`
	Checks     []Check   `json:"checks"`
}

// EvidenceUpload is the receipt's record of the copy.
type EvidenceUpload struct {
	URI            string `json:"uri"`                       // <evidence.uri>/<run id>/
	Manifest       string `json:"manifest"`                  // key of the manifest under URI
	ManifestSHA256 string `json:"manifest_sha256,omitempty"` // of the manifest's bytes
	Files          int    `json:"files"`                     // listed in the manifest
	Bytes          int64  `json:"bytes"`
	Uploaded       bool   `json:"uploaded"` // manifest and files are at URI
	Error          string `json:"error,omitempty"`
}

// Next says how a run that did not finish goes on, for people: resumed
// from its journal, or torn down. "" when its outcome is final.
func (r *Receipt) Next() string {
	if !r.Outcome.Resumable() || r.RunID == "" {
		return ""
	}
	switch r.Workflow {
	case "train", "ci", "canary":
		return fmt.Sprintf("continue it with `vastrun resume %s --yes` (and the -f config it started with), or tear it down with `vastrun down --run %s --yes`", r.RunID, r.RunID)
	}
	return fmt.Sprintf("tear it down with `vastrun down --run %s --yes`", r.RunID)
}
