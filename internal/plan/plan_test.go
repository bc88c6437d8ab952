package plan

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/spec"
)

var made = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func sample(t *testing.T) *Plan {
	t.Helper()
	m := spec.Manifest{Schema: spec.SchemaV2, Workflow: "ci", Commit: "c0ffee", Image: "ghcr.io/acme/x@sha256:0123", Test: "sh gpu-test.sh",
		MaxSpendUSD: 5, ReadyDeadline: "2m0s", JobTimeout: "1m0s", TeardownLimit: "30s", Env: map[string]string{"B": "2", "A": "1"}}
	p := &Plan{Schema: Schema, Workflow: "ci", CreatedAt: made, ExpiresAt: made.Add(DefaultTTL), Marketplace: "https://console.vast.ai",
		Inputs: Inputs{Commit: "c0ffee", Image: m.Image, ConfigFile: "vastrun.yaml", ConfigSHA256: "aa", ManifestSHA256: "bb"},
		Gate:   "passed", Offer: Offer{ID: 7, MachineID: 70, GPUName: "RTX 4090", NumGPUs: 1, DPHTotal: 0.308494},
		Alternatives: []Offer{{ID: 8, GPUName: "RTX 4090", NumGPUs: 1, DPHTotal: 0.374839}},
		Limits:       Limits{DiskGB: 10, CeilingDPH: 0.4, WorstCaseUSD: 0.018, CeilingWorstCaseUSD: 0.0233, BudgetUSD: 5, SpendBound: "worst case $0.0180"},
		LabelPrefix:  "vastrun", Manifest: m}
	if err := p.Seal(); err != nil {
		t.Fatal(err)
	}
	return p
}

func reason(err error) Reason {
	var re *RefusedError
	if errors.As(err, &re) {
		return re.Reason
	}
	return ""
}

func TestSealedPlanReadsBack(t *testing.T) {
	p := sample(t)
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.SHA256) != 64 || !bytes.Contains(b, []byte(`"sha256": "`+p.SHA256+`"`)) {
		t.Fatalf("the hash is not in the file: %s", b)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA256 != p.SHA256 {
		t.Fatalf("read back %s, sealed %s", got.SHA256, p.SHA256)
	}
	again, _ := got.Marshal()
	if !bytes.Equal(b, again) {
		t.Fatalf("a plan read back does not write the same bytes:\n%s\n%s", b, again)
	}
}

func TestEditedPlansAreRefused(t *testing.T) {
	b, _ := sample(t).Marshal()
	for name, edit := range map[string]func([]byte) []byte{
		"price": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"ceiling_dph": 0.4`), []byte(`"ceiling_dph": 4`), 1)
		},
		"test": func(b []byte) []byte { return bytes.Replace(b, []byte(`sh gpu-test.sh`), []byte(`sh evil.sh`), 1) },
		"expiry": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"expires_at": "2026-12-01T11`), []byte(`"expires_at": "2026-12-09T11`), 1)
		},
		"unknown field": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"gate": "passed",`), []byte(`"gate": "passed", "extra": 1,`), 1)
		},
		"hash":           func(b []byte) []byte { return bytes.Replace(b, []byte(`"sha256": "`), []byte(`"sha256": "0`), 1) },
		"not json":       func(b []byte) []byte { return b[:len(b)/2] },
		"another schema": func(b []byte) []byte { return bytes.Replace(b, []byte(Schema), []byte("vastrun.plan/v9"), 1) },
	} {
		edited := edit(b)
		if bytes.Equal(edited, b) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		_, err := Parse(edited)
		if !errors.Is(err, ErrRefused) || reason(err) != Damaged {
			t.Errorf("%s: %v, want a damaged plan refused", name, err)
		}
	}
}

func TestCheckHashAndFresh(t *testing.T) {
	p := sample(t)
	if err := p.CheckHash(""); err != nil {
		t.Errorf("no hash named: %v", err)
	}
	if err := p.CheckHash(strings.ToUpper(p.SHA256)); err != nil {
		t.Errorf("its own hash: %v", err)
	}
	if err := p.CheckHash(strings.Repeat("0", 64)); reason(err) != WrongHash {
		t.Errorf("another hash: %v", err)
	}
	for _, tc := range []struct {
		at   time.Time
		want Reason
	}{
		{made, ""},
		{made.Add(59 * time.Minute), ""},
		{made.Add(-4 * time.Minute), ""}, // another machine's clock a little ahead
		{made.Add(time.Hour), Expired},
		{made.Add(61 * time.Minute), Expired},
		{made.Add(-10 * time.Minute), Expired}, // made in the future
	} {
		if got := reason(p.CheckFresh(tc.at)); got != tc.want {
			t.Errorf("at %s: %q, want %q", tc.at.Sub(made), got, tc.want)
		}
	}
	long := sample(t)
	long.ExpiresAt = made.Add(MaxTTL + time.Hour)
	if reason(long.CheckFresh(made)) != Expired {
		t.Error("a plan valid longer than MaxTTL is accepted")
	}
}

func TestCheckInputsNamesTheFields(t *testing.T) {
	p := sample(t)
	same := p.Manifest
	if err := p.CheckInputs(p.Inputs, same); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Inputs, *spec.Manifest)
		wants []string
	}{
		{"test", func(_ *Inputs, m *spec.Manifest) { m.Test = "sh other.sh" }, []string{"test"}},
		{"commit", func(in *Inputs, _ *spec.Manifest) { in.Commit = "beef" }, []string{"commit"}},
		{"image", func(in *Inputs, m *spec.Manifest) {
			in.Image, m.Image = "ghcr.io/acme/x@sha256:9999", "ghcr.io/acme/x@sha256:9999"
		}, []string{"image"}},
		{"budget and env", func(_ *Inputs, m *spec.Manifest) {
			m.MaxSpendUSD = 50
			m.Env = map[string]string{"A": "1", "B": "3"}
		}, []string{"env.B", "max_spend_usd"}},
		{"only the file", func(in *Inputs, _ *spec.Manifest) { in.ConfigSHA256 = "cc" }, []string{"config_sha256"}},
	} {
		in, m := p.Inputs, p.Manifest
		m.Env = map[string]string{"A": "1", "B": "2"}
		tc.edit(&in, &m)
		err := p.CheckInputs(in, m)
		var re *RefusedError
		if !errors.As(err, &re) || re.Reason != InputsChanged || !slices.Equal(re.Fields, tc.wants) {
			t.Errorf("%s: %v, want fields %v", tc.name, err, tc.wants)
		}
	}
	if err := p.CheckRun("c0ffee", p.Inputs.Image); err != nil {
		t.Errorf("the planned run: %v", err)
	}
	if err := p.CheckRun("beef", p.Inputs.Image); reason(err) != InputsChanged {
		t.Errorf("another commit at the freeze: %v", err)
	}
}

func TestAdmit(t *testing.T) {
	p := sample(t)
	for _, tc := range []struct {
		dph, worst float64
		want       Reason
	}{
		{0.308494, 0.018, ""},
		{0.4, 0.0233, ""}, // at the ceiling
		{0.4000001, 0.0233, OverCeiling},
		{0.35, 0.03, OverWorstCase},
	} {
		if got := reason(p.Admit(8, tc.dph, tc.worst)); got != tc.want {
			t.Errorf("$%v/h, worst $%v: %q, want %q", tc.dph, tc.worst, got, tc.want)
		}
	}
}

func TestSummaryNamesTheHashAndOffer(t *testing.T) {
	p := sample(t)
	s := strings.Join(p.Summary(), "\n")
	for _, want := range []string{p.SHA256, "rent offer 7", "$0.3085/h", "ceiling $0.4000/h", "8 RTX 4090 x1 $0.3748/h", "valid until 2026-12-01T11:00:00Z"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}
