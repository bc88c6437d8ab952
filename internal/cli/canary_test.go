package cli

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/smoke"
)

// canary init --write: what the config file becomes, without a repository.
func TestWithCanarySection(t *testing.T) {
	p := smoke.Proposal{Canary: config.Canary{Smoke: "python smoke.py"}, Image: "ghcr.io/acme/app:v1", Sources: []string{"compose.yaml"}}
	for _, tc := range []struct {
		name, existing string
		proposal       smoke.Proposal
		want           []string // in the text, in this order
		refused        string
	}{
		{name: "empty file gets the keys a canary needs", proposal: p,
			want: []string{"gpu:\n  max_dph: 0.50\nbudget:\n  max_spend: 1.00\n\n# Proposed by", "image: ghcr.io/acme/app:v1", "canary:"}},
		{name: "no image found: an unpinned placeholder that validate refuses", proposal: smoke.Proposal{Canary: p.Canary, Sources: p.Sources},
			want: []string{"# Replace with your image", "image: REPLACE-ME/your-image:tag\ngpu:", "canary:"}},
		{name: "existing keys become comments, the file keeps its own", existing: "image: reg/x@sha256:" + strings.Repeat("a", 64) + "\ngpu:\n  max_dph: 1", proposal: p,
			want: []string{"image: reg/x@sha256:", "  max_dph: 1\n\n# Proposed by", "# image: is already in this file; merge by hand:", "canary:"}},
		{name: "a second canary section is refused", existing: "canary:\n  smoke: x\n", proposal: p, refused: "already has a canary: section"},
		{name: "a file that is not YAML is refused", existing: "gpu: [\n", proposal: p, refused: "v.yaml: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, block, err := withCanarySection("v.yaml", []byte(tc.existing), tc.proposal)
			if tc.refused != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(ue.Hint, "without --write") {
					t.Fatalf("err %v, want a usage error %q with a hint", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(text, block) || !strings.HasPrefix(text, tc.existing) {
				t.Fatalf("text is not the file plus the section:\n%s", text)
			}
			rest := text
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("%q missing (or out of order) in:\n%s", w, text)
				}
				rest = rest[i+len(w):]
			}
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(text), &doc); err != nil || doc["canary"] == nil {
				t.Fatalf("the result does not parse with a canary: key (%v):\n%s", err, text)
			}
		})
	}
}
