package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/vastrun/vastrun/internal/spec"
)

// The frozen spec lives in package spec; these names keep the engine's
// callers (the CLI, tests) unchanged.
type (
	// Manifest is the run's frozen spec (spec.Manifest).
	Manifest = spec.Manifest
	// TrainSpec is training's section of it.
	TrainSpec = spec.TrainSpec
	// CanarySpec is the canary's section of it.
	CanarySpec = spec.CanarySpec
	// CanaryRequest is the canary's frozen request to a ready server.
	CanaryRequest = spec.CanaryRequest
	// ConfigChangedError names the fields a resumed run's config changed.
	ConfigChangedError = spec.ConfigChangedError
)

var (
	// ErrConfigChanged: see spec.ErrConfigChanged.
	ErrConfigChanged = spec.ErrConfigChanged
	// ErrManifestMismatch: see spec.ErrManifestMismatch.
	ErrManifestMismatch = spec.ErrManifestMismatch
)

// LoadManifest is spec.Load.
func LoadManifest(runDir, hash string) (Manifest, error) { return spec.Load(runDir, hash) }

func runScoped(uri, runID string) string { return spec.RunScoped(uri, runID) }

// adoptFrozen makes a resumed run use its frozen manifest: it checks
// manifest.json against the journal's hash and refuses, naming the fields,
// when the configuration now differs — unless AcceptConfigChange, which
// is journaled with the fields.
func adoptFrozen(ctx context.Context, e *Scope) error {
	frozen, err := LoadManifest(e.runDir, e.state.ManifestHash)
	if err != nil {
		return &StepError{Step: stepFreeze, Err: err}
	}
	now := draft(ctx, e, e.state.RunID, e.state.Label)
	// A manifest an older vastrun froze (v1) lacks some step inputs: they
	// come from today's configuration, and the journal says which.
	if up, filled := spec.FillV1(frozen, now); len(filled) > 0 {
		if err := e.Record("event", "manifest_v1", map[string]any{"filled_from_config": filled}); err != nil {
			return err
		}
		frozen = up
	}
	if fields := spec.Diff(frozen, now); len(fields) > 0 {
		if !e.AcceptConfigChange {
			return &StepError{Step: stepFreeze, Err: &ConfigChangedError{Run: e.state.RunID, Fields: fields}}
		}
		if err := e.Record("event", "config_change", map[string]any{"fields": fields, "frozen_manifest_sha256": e.state.ManifestHash}); err != nil {
			return err
		}
		e.Infof("continuing with a changed configuration (%s), as --accept-config-change asks", strings.Join(fields, ", "))
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
		err = e.writeFileAtomic(filepath.Join(e.EvidenceDir, "manifest.json"), b, 0o644)
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
