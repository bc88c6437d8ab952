package spec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
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
