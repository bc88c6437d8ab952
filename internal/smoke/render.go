package smoke

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// canaryBlock is the canary: section as proposed: only what was found.
type canaryBlock struct {
	Unit       string   `yaml:"unit,omitempty"`
	Smoke      string   `yaml:"smoke,omitempty"`
	ExpectExit int      `yaml:"expect_exit"`
	Ports      []int    `yaml:"ports,omitempty"`
	HealthURL  string   `yaml:"health_url,omitempty"`
	EnvNames   []string `yaml:"env_names,omitempty"`
}

// YAML renders the whole proposal: top-level image, upload, env and
// secrets, then the canary: section, with comments.
func (p Proposal) YAML() string { return p.Render(nil) }

// Render renders the proposal for a config file that already has the
// top-level keys in have: those are written as comments to merge by hand,
// so the file never gets a key twice.
func (p Proposal) Render(have map[string]bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Proposed by `vastrun canary init` from %s.\n# Edit, then run `vastrun canary validate`. The smoke runs locally (CPU) and on\n# the GPU with exactly env:, secrets: and $VASTRUN_* (VASTRUN_DEVICE is cpu or gpu).\n", strings.Join(p.Sources, ", "))
	top := func(key string, v any, comment string) {
		if v == nil {
			return
		}
		out := marshal(map[string]any{key: v})
		if comment != "" {
			fmt.Fprintf(&b, "# %s\n", comment)
		}
		if have[key] {
			fmt.Fprintf(&b, "# %s: is already in this file; merge by hand:\n", key)
			for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
				b.WriteString("#   " + line + "\n")
			}
			return
		}
		b.Write(out)
	}
	if p.Image != "" {
		top("image", p.Image, "From the compose file or CI workflow: pin it by digest (vastrun canary --resolve pins a tag).")
	}
	if len(p.Upload) > 0 {
		top("upload", p.Upload, "What the smoke needs on the instance (the GPU side sees nothing else).")
	}
	if len(p.Env) > 0 {
		top("env", p.Env, "Inputs the repository documents; an empty value is passed as empty.")
	}
	if len(p.Secrets) > 0 {
		top("secrets", p.Secrets, "Credentials, by name: export each before validate and run; values never leave this machine's environment except to the instance.")
	}
	out := marshal(map[string]canaryBlock{"canary": {
		Unit: p.Canary.Unit, Smoke: p.Canary.Smoke, ExpectExit: p.Canary.ExpectExit,
		Ports: p.Canary.Ports, HealthURL: p.Canary.HealthURL, EnvNames: p.Canary.EnvNames,
	}})
	b.Write(out)
	if p.Check() != nil {
		b.WriteString("  # smoke: not found in the repository: the command that starts the server or runs the smoke\n")
	}
	if p.Canary.IsServer() {
		b.WriteString("  # The smoke is a server; probe it once it is ready, e.g.:\n  # request:\n  #   method: POST\n  #   url: http://localhost:PORT/...\n  #   body: '{...}'\n  #   expect_status: 200\n")
	}
	if len(p.ImageDefaults) > 0 {
		fmt.Fprintf(&b, "# Set by the image itself (defaults, not inputs): %s\n", strings.Join(p.ImageDefaults, ", "))
	}
	if len(p.Optional) > 0 {
		fmt.Fprintf(&b, "# Read from the environment, with defaults in the code: %s\n", strings.Join(p.Optional, ", "))
	}
	if len(p.ClientOnly) > 0 {
		fmt.Fprintf(&b, "# Read only by code the server does not import (clients, tools), so optional, not inputs: %s\n", strings.Join(p.ClientOnly, ", "))
	}
	notes := append([]string{}, p.Notes...)
	sort.Strings(notes)
	for _, n := range notes {
		fmt.Fprintf(&b, "# Note: %s\n", n)
	}
	return b.String()
}

// marshal renders YAML with the two-space indent config files use.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	enc.Encode(v) //nolint:errcheck // a proposal's own types always encode, into a bytes.Buffer that cannot fail
	enc.Close()   //nolint:errcheck // a proposal's own types always encode, into a bytes.Buffer that cannot fail
	return buf.Bytes()
}
