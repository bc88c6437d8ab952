package run

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"regexp"
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
