package preflight

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/provider"
)

func TestImageReferences(t *testing.T) {
	hex := strings.Repeat("0123456789abcdef", 4)
	for ref, want := range map[string]string{
		"ghcr.io/acme/x@sha256:" + hex:                  "",
		"ghcr.io/acme/x:v1@sha256:" + hex:               "",
		"ghcr.io/acme/x:v1":                             "is not pinned",
		"ghcr.io/acme/x":                                "is not pinned",
		"ghcr.io/acme/x@sha256:1234":                    "this one has 4",
		"ghcr.io/acme/x@sha256:" + strings.ToUpper(hex): "64 lowercase hex",
		"ghcr.io/acme/x@md5:abcd":                       "sha256:<64 hex",
		"Not A/Valid::Ref":                              "is not a valid image reference",
		"UPPER/case@sha256:" + hex:                      "is not a valid image reference",
	} {
		ps := checkImage(ref)
		switch {
		case want == "" && len(ps) > 0:
			t.Errorf("%s: refused: %v", ref, ps)
		case want != "" && (len(ps) != 1 || !strings.Contains(ps[0].What, want)):
			t.Errorf("%s: got %v, want %q", ref, ps, want)
		case want != "" && ps[0].Fix == "":
			t.Errorf("%s: no fix", ref)
		}
	}
}

func TestLocalNamesFieldValueAndFix(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "here.sh"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "afile"), nil, 0o644)
	cfg, err := config.Parse([]byte("image: r@sha256:" + strings.Repeat("a", 64) + "\ntest: t\nupload: [here.sh, gone.sh]\nsecrets: [SHORT, UNSET, FINE]\nbudget: {max_spend: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(dir, "afile")
	env := map[string]string{"SHORT": "1234567", "FINE": "12345678"}
	err = Local(Input{Config: cfg, RepoDir: dir, Getenv: func(k string) string { return env[k] }})
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != 4 {
		t.Fatalf("got %v", err)
	}
	got := err.Error()
	for _, want := range []string{`upload[1] "gone.sh": does not exist`, "secrets SHORT: is 7 bytes", "secrets UNSET: is declared but not set", `state_dir "` + cfg.StateDir + `": is a file`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	if strings.Contains(got, "1234567") || len(pe.Fixes()) != 4 {
		t.Errorf("a secret's value shown, or a fix missing: %s %v", got, pe.Fixes())
	}
}

// offersOf answers every search with one offer per model.
type offersOf []string

func (o offersOf) SearchOffers(context.Context, provider.Query) ([]provider.Offer, error) {
	var out []provider.Offer
	for i, n := range o {
		out = append(out, provider.Offer{ID: provider.OfferID(i + 1), GPUName: n, NumGPUs: 1})
	}
	return out, nil
}

func TestDidYouMeanByFamily(t *testing.T) {
	market := offersOf{"RTX 3090", "RTX 4090", "A100 SXM4", "H100 NVL", "H100 SXM", "H200"}
	for in, want := range map[string]string{
		"RTX_4009": `did you mean "RTX 4090"? (write it as RTX_4090)`,
		"H100":     `did you mean "H100 NVL" or "H100 SXM"? (write it as H100_NVL or H100_SXM)`, // the family, not H200
		"H100_SMX": `did you mean "H100 SXM"? (write it as H100_SXM)`,
		"Banana":   `write a GPU name as Vast spells it (list them: vastrun offers)`,
	} {
		cfg, err := config.Parse([]byte("image: a@sha256:" + strings.Repeat("0", 64) + "\ntest: t\ngpu: {models: [" + in + "]}\nbudget: {max_spend: 1}\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Market(context.Background(), market, cfg)
		var pe *Error
		if !errors.As(err, &pe) || len(pe.Fixes()) != 1 || !strings.HasSuffix(pe.Fixes()[0], want) {
			t.Errorf("%s: %v, fixes %v; want the fix %q", in, err, pe.Fixes(), want)
		}
	}
}

// TestOwnKeysNeverReachTheWorkload: vastrun's own keys are refused under
// secrets: by name and by value, and under env: by value, without showing
// the value; a workload's own key passes.
func TestOwnKeysNeverReachTheWorkload(t *testing.T) {
	const account, team = "acct-key-0123456789abcdef", "team-secret-0123456789"
	cfg, err := config.Parse([]byte("image: r@sha256:" + strings.Repeat("a", 64) + "\ntest: t\nsecrets: [VAST_API_KEY, COPY_OF_KEY, AWS_SECRET_ACCESS_KEY, SCOPED]\nenv: {LITERAL: \"" + account + "\", FINE: \"1\"}\nbudget: {max_spend: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"VAST_API_KEY": account, "COPY_OF_KEY": " " + account + "\n", "AWS_SECRET_ACCESS_KEY": team, "SCOPED": "scoped-0123456789"}
	own := []OwnKey{{Name: "VAST_API_KEY", Source: "VAST_API_KEY", Value: account}, {Source: "the key file", Value: "file-key-0123456789"},
		{Name: "AWS_SECRET_ACCESS_KEY", Source: "the team state's", Value: team}}
	err = Local(Input{Config: cfg, RepoDir: t.TempDir(), Getenv: func(k string) string { return env[k] }, OwnKeys: own})
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != 4 {
		t.Fatalf("want 4 problems, got %v", err)
	}
	got := err.Error()
	for _, want := range []string{"secrets VAST_API_KEY: is vastrun's own key", "secrets COPY_OF_KEY: is vastrun's own key", "secrets AWS_SECRET_ACCESS_KEY: is vastrun's own key", "env LITERAL: holds vastrun's own key"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %s", want, got)
		}
	}
	for _, fix := range pe.Fixes() {
		if !strings.Contains(fix, "scoped key of its own") {
			t.Errorf("fix %q", fix)
		}
	}
	if strings.Contains(got, account) || strings.Contains(got, team) || strings.Contains(got, "SCOPED") {
		t.Errorf("a key shown, or the workload's own key refused: %s", got)
	}
	// Without vastrun's keys in play (local state, another key in use) the
	// same names are the workload's to declare.
	err = Local(Input{Config: cfg, RepoDir: t.TempDir(), Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatalf("refused without own keys: %v", err)
	}
}
