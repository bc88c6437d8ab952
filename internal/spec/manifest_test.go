package spec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/config"
)

func TestLoadManifestChecksTheJournalHash(t *testing.T) {
	dir := t.TempDir()
	m := Manifest{Schema: "vastrun.manifest/v1", RunID: "r1", Image: "img@sha256:00", Commit: "abc", Train: &TrainSpec{Command: "python3 train.py"}}
	hash, b, err := m.Hash()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
	got, err := Load(dir, hash)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("load: %+v %v", got, err)
	}
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(string(b[:len(b)-2])+" }\n"), 0o644)
	if _, err := Load(dir, hash); !errors.Is(err, ErrManifestMismatch) {
		t.Fatalf("an edited manifest: %v", err)
	}
	if _, err := Load(dir, ""); !errors.Is(err, ErrManifestMismatch) {
		t.Fatalf("no hash in the journal: %v", err)
	}
}

func TestDiffSpecNamesConfigFieldsOnly(t *testing.T) {
	a := Manifest{RunID: "r1", Commit: "abc", EvidenceDir: "ev", Image: "img", MaxSpendUSD: 5, Train: &TrainSpec{Command: "x", Cadence: 100}}
	b := a
	bt := *a.Train
	b.Train = &bt
	b.RunID, b.Commit, b.EvidenceDir = "r2", "def", "ev2" // run facts: never a change
	if d := Diff(a, b); len(d) != 0 {
		t.Fatalf("run facts reported as changes: %v", d)
	}
	b.MaxSpendUSD, b.Train.Cadence = 6, 50
	if d := Diff(a, b); !reflect.DeepEqual(d, []string{"max_spend_usd", "train.checkpoint_every"}) {
		t.Fatalf("diff: %v", d)
	}
}

// Build freezes every step input, secrets by name only, and a changed
// canary or train setting is a named difference.
func TestBuildFreezesEveryStepInput(t *testing.T) {
	c, err := config.Parse([]byte(`
image: img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
test: make test
upload: [scripts]
secrets: [HF_TOKEN]
env: {MODE: fast}
gpu: {models: [RTX_4090], max_dph: 1}
budget: {max_spend: 2}
timeouts: {ready: 10m, job: 5m}
canary:
  smoke: python smoke.py
  timeouts: {smoke: 90s}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := Build(c, Facts{RunID: "r1", Workflow: "canary"})
	if m.Schema != SchemaV2 || m.Test != "make test" || m.Env["MODE"] != "fast" || m.Canary == nil || m.Canary.Smoke != "python smoke.py" ||
		m.Canary.Timeouts.Smoke.Duration() != 90*time.Second || m.JobTimeout != "5m0s" || !reflect.DeepEqual(m.SecretNames, []string{"HF_TOKEN"}) {
		t.Fatalf("built: %+v canary %+v", m, m.Canary)
	}
	_, b, err := m.Hash()
	if err != nil || !strings.Contains(string(b), `"smoke": "1m30s"`) {
		t.Fatalf("durations are frozen as text: %s %v", b, err)
	}
	var back Manifest
	if err := json.Unmarshal(b, &back); err != nil || back.Canary.Timeouts.Smoke != m.Canary.Timeouts.Smoke {
		t.Fatalf("round trip: %+v %v", back.Canary, err)
	}
	n := m
	nc := *m.Canary
	nc.Timeouts.Smoke = Duration(time.Minute)
	n.Canary = &nc
	if d := Diff(m, n); !reflect.DeepEqual(d, []string{"canary.timeouts.smoke"}) {
		t.Fatalf("diff: %v", d)
	}
}

// A v1 manifest (an older vastrun's) takes what v1 did not freeze from
// today's config and says so; a v2 manifest is never filled.
func TestFillV1TakesOnlyWhatV1DidNotFreeze(t *testing.T) {
	now := Manifest{Schema: SchemaV2, Test: "new", Env: map[string]string{"A": "1"}, Canary: &CanarySpec{Smoke: "s"}}
	v1 := Manifest{Schema: SchemaV1, Test: "old"}
	got, filled := FillV1(v1, now)
	if got.Test != "old" || got.Env["A"] != "1" || got.Canary == nil || !reflect.DeepEqual(filled, []string{"env", "canary"}) {
		t.Fatalf("filled %v: %+v", filled, got)
	}
	v2 := Manifest{Schema: SchemaV2, Test: "old"}
	if got, filled := FillV1(v2, now); filled != nil || got.Env != nil {
		t.Fatalf("a v2 manifest was filled: %v", filled)
	}
}

// The host bound comes from the frozen durations: ready + job + teardown,
// or a training runtime deadline + teardown; it is recomputed on load,
// never frozen, so the manifest's bytes do not change.
func TestHostTimeFromFrozenDurations(t *testing.T) {
	m := Manifest{ReadyDeadline: "10m", JobTimeout: "1h30m", TeardownLimit: "5m"}
	if got := HostTime(m); got != 105*time.Minute {
		t.Errorf("ci: %v, want 1h45m", got)
	}
	m.Train = &TrainSpec{RuntimeDeadline: "6h"}
	if got := HostTime(m); got != 6*time.Hour+5*time.Minute {
		t.Errorf("train: %v, want 6h5m", got)
	}
	m.Train.RuntimeDeadline = ""
	if got := HostTime(m); got != 0 {
		t.Errorf("open-ended training: %v, want no bound", got)
	}
	m.Policy.MinHostTime = time.Hour
	b, err := json.Marshal(m)
	if err != nil || strings.Contains(string(b), "MinHostTime") {
		t.Errorf("the bound was frozen: %s %v", b, err)
	}
}
