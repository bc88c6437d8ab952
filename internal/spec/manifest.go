// Package spec is a run's frozen specification: the manifest built once,
// before anything is rented, from the configuration, the commit and the CI
// run; its SHA-256 goes into the journal. A resumed run loads it back with
// [Load], which checks it against that hash, and [Diff] names the
// configuration fields that differ from what vastrun.yaml says now. The
// lifecycle's steps read the spec, never the live configuration.
package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
)

// Manifest schemas. v2 added every input a step reads after the freeze
// (gate, paths, env values, workdir, verify, image login names, the
// canary's contract, training's agent and monitoring settings); its JSON
// is v1's plus those fields. A v1 manifest is still loaded; see [FillV1].
const (
	SchemaV1 = "vastrun.manifest/v1"
	SchemaV2 = "vastrun.manifest/v2"
)

// Manifest is frozen before anything is rented: what will run, where,
// under which limits. Its SHA-256 goes into the journal and the receipt.
// Secrets appear by name only (SecretNames, ImageLogin); Env holds the
// config's env: values, which are non-secret by contract (docs/config.md).
type Manifest struct {
	Schema        string        `json:"schema"`
	RunID         string        `json:"run_id"`
	Label         string        `json:"label"`
	Workflow      string        `json:"workflow"`
	Commit        string        `json:"commit"`
	CIRun         string        `json:"ci_run,omitempty"`
	Image         string        `json:"image"`
	Test          string        `json:"test"`
	Upload        []string      `json:"upload,omitempty"`
	Policy        policy.Policy `json:"gpu_policy"`
	MaxSpendUSD   float64       `json:"max_spend_usd"`
	ReadyDeadline string        `json:"ready_deadline"`
	JobTimeout    string        `json:"job_timeout"`
	TeardownLimit string        `json:"teardown_limit"`
	EvidenceDir   string        `json:"evidence_dir"`
	EvidenceURI   string        `json:"evidence_uri,omitempty"` // expanded; the run's copy is under <uri>/<run id>/
	EnvNames      []string      `json:"env_names,omitempty"`
	SecretNames   []string      `json:"secret_names,omitempty"`
	Train         *TrainSpec    `json:"train,omitempty"`
	CreatedAt     time.Time     `json:"created_at"`

	// v2: the rest of what the steps read.
	Gate          []string          `json:"gate,omitempty"`
	Paths         []string          `json:"paths,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Workdir       string            `json:"workdir,omitempty"`
	WorkdirMaxMB  float64           `json:"workdir_max_mb,omitempty"`
	MinFreeDiskGB float64           `json:"verify_min_free_disk_gb,omitempty"`
	ImageLogin    *ImageLogin       `json:"image_login,omitempty"`
	Canary        *CanarySpec       `json:"canary,omitempty"`
	// HeartbeatTTL is the dead-man switch's TTL (timeouts.heartbeat_ttl,
	// or up's --ttl; training keeps Train.HeartbeatTTL).
	HeartbeatTTL string `json:"heartbeat_ttl,omitempty"`
	// PullStall is timeouts.pull_stall when set ("" for the default).
	PullStall string `json:"pull_stall,omitempty"`
	// ImageBytes is the image's compressed size as its registry manifest
	// said at the freeze (0: not known): a fact of the run, read for the
	// pull-aware ready deadline and fast_ready.
	ImageBytes int64 `json:"image_bytes,omitempty"`
}

// Duration is a duration frozen as its text ("1m30s").
type Duration time.Duration

// Duration is d as a time.Duration.
func (d Duration) Duration() time.Duration { return time.Duration(d) }

// String is d as Go writes durations.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as text, so the manifest reads as the config does.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ImageLogin names the variables that hold a private registry's login
// (names only: the values are read from vastrun's environment when used).
type ImageLogin struct {
	Registry string `json:"registry"`
	UserEnv  string `json:"user_env"`
	TokenEnv string `json:"token_env"`
}

// CanarySpec is the canary's contract as frozen: the local part runs after
// the freeze, so a resumed canary proves the same contract.
type CanarySpec struct {
	Unit          string         `json:"unit,omitempty"`
	Smoke         string         `json:"smoke"`
	ExpectExit    int            `json:"expect_exit"`
	ExpectFields  []string       `json:"expect_fields,omitempty"`
	IgnoreFields  []string       `json:"ignore_fields,omitempty"`
	CUDACheck     string         `json:"cuda_check,omitempty"`
	Ports         []int          `json:"ports,omitempty"`
	HealthURL     string         `json:"health_url,omitempty"`
	EnvNames      []string       `json:"env_names,omitempty"`
	HealthTimeout Duration       `json:"health_timeout"`
	Request       CanaryRequest  `json:"request"`
	Timeouts      CanaryTimeouts `json:"timeouts"`
	Compare       CanaryCompare  `json:"compare"`
	ImageSource   string         `json:"image_source,omitempty"`
	Containerfile string         `json:"containerfile,omitempty"`
}

// IsServer reports whether the smoke is a server (health URL or ports).
func (c CanarySpec) IsServer() bool { return c.HealthURL != "" || len(c.Ports) > 0 }

// CanaryRequest is what is sent to a server smoke once it is ready. Its
// ${NAME} templates are frozen unexpanded (values never enter the spec).
type CanaryRequest struct {
	Command      string            `json:"command,omitempty"`
	Method       string            `json:"method,omitempty"`
	URL          string            `json:"url,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
	Body         string            `json:"body,omitempty"`
	ExpectStatus int               `json:"expect_status,omitempty"`
}

// IsSet reports whether a request is configured.
func (r CanaryRequest) IsSet() bool { return r.Command != "" || r.URL != "" }

// CanaryTimeouts bound the canary's local steps.
type CanaryTimeouts struct {
	Unit  Duration `json:"unit"`
	Smoke Duration `json:"smoke"`
	Stop  Duration `json:"stop"`
}

// CanaryCompare is how CPU and GPU results are compared.
type CanaryCompare struct {
	Tolerance float64  `json:"tolerance"`
	Ignore    []string `json:"ignore,omitempty"`
}

// TrainSpec is what a training run freezes before renting.
type TrainSpec struct {
	Command         string `json:"command"`
	DatasetVersion  string `json:"dataset_version"`
	Seed            *int64 `json:"seed,omitempty"` // only when the config sets one
	CheckpointDir   string `json:"checkpoint_dir"`
	Cadence         int    `json:"checkpoint_every"`
	CheckpointURI   string `json:"checkpoint_uri"`
	OutputDir       string `json:"output_dir"`
	OutputURI       string `json:"output_uri"`
	Keep            int    `json:"keep"`
	RuntimeDeadline string `json:"runtime_deadline"`
	HeartbeatTTL    string `json:"heartbeat_ttl"`

	// v2: the agent's and the monitoring loop's settings.
	Poll            Duration `json:"poll,omitempty"`
	MaxAttempts     int      `json:"max_attempts,omitempty"`
	QuietPeriod     Duration `json:"quiet_period,omitempty"`
	CheckpointFile  string   `json:"checkpoint_file,omitempty"`
	CheckpointCheck string   `json:"checkpoint_check,omitempty"`
	StepFrom        string   `json:"step_from,omitempty"`
	RequireResume   bool     `json:"require_resume,omitempty"`
	OnOutbid        string   `json:"on_outbid,omitempty"`
	OutbidWait      Duration `json:"outbid_wait,omitempty"`
}

// Runtime is the frozen runtime deadline (0 when none).
func (t TrainSpec) Runtime() time.Duration { return ParseDuration(t.RuntimeDeadline) }

// ParseDuration reads a duration the manifest froze as text (0 when absent).
func ParseDuration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// DropSections removes every workflow's own section, for a run whose
// workflow reads none of them (ci, up, and the runs exec and down begin).
func (m *Manifest) DropSections() {
	m.Train, m.Canary = nil, nil
	m.Derive()
}

// Derive sets what the policy reads from the manifest but never freezes
// itself: the host time bound (HostTime) and the image's size.
func (m *Manifest) Derive() {
	m.Policy.MinHostTime = HostTime(*m)
	m.Policy.ImageBytes = m.ImageBytes
}

// Hash is the SHA-256 of the manifest's canonical JSON.
func (m Manifest) Hash() (string, []byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), append(b, '\n'), nil
}

// ErrConfigChanged means the configuration no longer matches the run's
// frozen manifest; *ConfigChangedError names the fields.
var ErrConfigChanged = errors.New("the configuration differs from the run's frozen manifest")

// ConfigChangedError lists the manifest fields (JSON paths) that differ.
type ConfigChangedError struct {
	Run    string
	Fields []string
}

func (e *ConfigChangedError) Error() string {
	return fmt.Sprintf("run %s: %v: %s", e.Run, ErrConfigChanged, strings.Join(e.Fields, ", "))
}

// Is makes errors.Is(err, ErrConfigChanged) true.
func (e *ConfigChangedError) Is(target error) bool { return target == ErrConfigChanged }

// ErrManifestMismatch means manifest.json is not the one the journal froze.
var ErrManifestMismatch = errors.New("manifest.json does not match the hash in the journal")

// Load reads a run directory's manifest.json and checks it against
// the hash its journal recorded at freeze time.
func Load(runDir, hash string) (Manifest, error) {
	p := path.Join(runDir, "manifest.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return Manifest{}, fmt.Errorf("read the frozen manifest: %w", err)
	}
	body := bytes.TrimSuffix(b, []byte("\n")) // Hash covers the JSON without the final newline
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); hash == "" || got != hash {
		return Manifest{}, fmt.Errorf("%s: %w (journal %q, file %s): it was damaged or edited", p, ErrManifestMismatch, hash, got)
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", p, err)
	}
	// Derived from the frozen durations, never frozen itself: a manifest
	// an older vastrun froze gets the same bound as a new one.
	m.Derive()
	return m, nil
}

// RunScoped is a store URI with the run's own prefix: a new run never
// resumes another's checkpoints, and resume finds its own by run id.
func RunScoped(uri, runID string) string { return strings.TrimRight(uri, "/") + "/" + runID }

// runFacts are manifest fields that describe the run, not its
// configuration: they are not compared on resume.
var runFacts = []string{"schema", "run_id", "label", "workflow", "commit", "ci_run", "evidence_dir", "created_at", "image_bytes"}

// Diff lists the JSON paths of the configuration fields that differ
// between two manifests, sorted; the run's facts are never a difference.
func Diff(frozen, now Manifest) []string {
	if frozen.HeartbeatTTL == "" {
		// Frozen before the switch's TTL was: the default serves, and
		// today's value is no change to the run.
		now.HeartbeatTTL = ""
	}
	toMap := func(m Manifest) map[string]any {
		b, _ := json.Marshal(m)
		var out map[string]any
		json.Unmarshal(b, &out) //nolint:errcheck // decodes what json.Marshal of a Manifest just wrote
		for _, k := range runFacts {
			delete(out, k)
		}
		return out
	}
	var diffs []string
	var walk func(prefix string, a, b any)
	walk = func(prefix string, a, b any) {
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for k := range keys {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, am[k], bm[k])
			}
			return
		}
		ab, _ := json.Marshal(a)
		bb, _ := json.Marshal(b)
		if !bytes.Equal(ab, bb) {
			diffs = append(diffs, prefix)
		}
	}
	walk("", toMap(frozen), toMap(now))
	sort.Strings(diffs)
	return diffs
}
