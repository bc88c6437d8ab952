package run

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/policy"
)

// Manifest is frozen before anything is rented: what will run, where,
// under which limits. Its SHA-256 goes into the journal and the receipt.
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
	EnvNames      []string      `json:"env_names,omitempty"`
	SecretNames   []string      `json:"secret_names,omitempty"`
	Train         *TrainSpec    `json:"train,omitempty"`
	CreatedAt     time.Time     `json:"created_at"`
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

// LoadManifest reads a run directory's manifest.json and checks it against
// the hash its journal recorded at freeze time.
func LoadManifest(runDir, hash string) (Manifest, error) {
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
	return m, nil
}

// runScoped is a store URI with the run's own prefix: a new run never
// resumes another's checkpoints, and resume finds its own by run id.
func runScoped(uri, runID string) string { return strings.TrimRight(uri, "/") + "/" + runID }

// runFacts are manifest fields that describe the run, not its
// configuration: they are not compared on resume.
var runFacts = []string{"schema", "run_id", "label", "workflow", "commit", "ci_run", "evidence_dir", "created_at"}

// diffSpec lists the JSON paths of the configuration fields that differ
// between two manifests, sorted.
func diffSpec(frozen, now Manifest) []string {
	toMap := func(m Manifest) map[string]any {
		b, _ := json.Marshal(m)
		var out map[string]any
		json.Unmarshal(b, &out)
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

// adoptFrozen makes a resumed run use its frozen manifest: it checks
// manifest.json against the journal's hash and refuses, naming the fields,
// when the configuration now differs — unless AcceptConfigChange, which
// is journaled with the fields.
func (e *Engine) adoptFrozen(ctx context.Context) error {
	frozen, err := LoadManifest(e.runDir, e.state.ManifestHash)
	if err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	now := e.spec(ctx)
	if fields := diffSpec(frozen, now); len(fields) > 0 {
		if !e.AcceptConfigChange {
			return &StepError{Step: stepFreeze, Err: &ConfigChangedError{Run: e.state.RunID, Fields: fields}}
		}
		if err := e.record("event", "config_change", map[string]any{"fields": fields, "frozen_manifest_sha256": e.state.ManifestHash}); err != nil {
			return err
		}
		e.infof("continuing with a changed configuration (%s), as --accept-config-change asks", strings.Join(fields, ", "))
		// The accepted spec drives the rest of the run; the run's facts
		// (id, label, commit, CI run, creation) stay the frozen ones.
		now.RunID, now.Label, now.Commit, now.CIRun, now.CreatedAt = frozen.RunID, frozen.Label, frozen.Commit, frozen.CIRun, frozen.CreatedAt
		frozen = now
	}
	// The new evidence directory gets the manifest the run was frozen with.
	if err := os.MkdirAll(e.EvidenceDir, 0o755); err != nil {
		return fmt.Errorf("create evidence directory: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(e.runDir, "manifest.json")) // the very bytes the hash covers
	if err == nil {
		err = writeFileAtomic(filepath.Join(e.EvidenceDir, "manifest.json"), b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	e.manifest = frozen
	return nil
}

var digestRef = regexp.MustCompile(`^[a-z0-9]+(?:[._/:-][a-z0-9]+)*@sha256:[a-f0-9]{64}$`)

// ErrMutableImage means the image is not pinned by digest.
var ErrMutableImage = errors.New("image is not pinned by digest")

// CheckImagePinned accepts only repo@sha256:<64 hex>.
func CheckImagePinned(image string) error {
	if !digestRef.MatchString(image) {
		return fmt.Errorf("%q: %w (write it as repo@sha256:<digest>; a tag can change under you)", image, ErrMutableImage)
	}
	return nil
}

// gitCommit reads HEAD in dir, falling back to the CI's commit.
func gitCommit(ctx context.Context, dir, fallback string) string {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	cmd.Dir = dir
	if out, err := cmd.Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	if fallback != "" {
		return fallback
	}
	return "unknown"
}

// changedFiles lists files changed between base and HEAD (merge-base diff).
func changedFiles(ctx context.Context, dir, base string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "diff", "--name-only", base+"...HEAD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("git diff against %s: %s", base, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("git diff against %s: %w", base, err)
	}
	var files []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			files = append(files, l)
		}
	}
	return files, nil
}

// MatchGlob matches slash-separated paths; "**" spans any number of
// directories, other segments use path.Match.
func MatchGlob(pattern, name string) bool {
	return matchSegs(strings.Split(strings.Trim(pattern, "/"), "/"), strings.Split(name, "/"))
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegs(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
