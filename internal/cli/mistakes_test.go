package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mistake is something a person gets wrong, and what vastrun must
// answer: the exit code, the first line of the error, and a hint that
// names the fix. notHint holds words of hints that do not fit this
// mistake (a flag the command lacks, a fix for another problem).
type mistake struct {
	name    string
	files   map[string]string // written into the case's directory (the cwd)
	env     map[string]string // beside the simulator's VAST_URL and key
	api     string            // "" no API; "sim": the simulator's URL and key; "badkey"
	instant bool              // retry backoff on a clock that never waits
	podman  string            // when set, a fake podman on PATH runs this script
	before  [][]string        // command lines run first (they must succeed)
	args    []string
	code    int
	first   string // in the error's first line
	hint    string // in a hint line
	notHint []string
}

// ciYAML is examples/ci.yaml with one change applied.
func ciYAML(t *testing.T, from, to string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/ci.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), from) {
		t.Fatalf("examples/ci.yaml has no %q", from)
	}
	return strings.Replace(string(b), from, to, 1)
}

func TestMistakes(t *testing.T) {
	gpuTest, err := os.ReadFile("../../examples/gpu-test.sh")
	if err != nil {
		t.Fatal(err)
	}
	ci := func(from, to string) map[string]string {
		return map[string]string{"vastrun.yaml": ciYAML(t, from, to), "examples/gpu-test.sh": string(gpuTest)}
	}
	good := ci("version: 1", "version: 1")
	noCanary := good
	canaryUnset := ci("budget:", "secrets: [HF_TOKEN]\ncanary:\n  smoke: sh examples/gpu-test.sh\nbudget:")
	offlineBase := ci("budget:", "canary:\n  smoke: sh examples/gpu-test.sh\nbudget:")
	offlineBase["Containerfile"] = "FROM registry.example/acme/base:1\nCOPY examples/gpu-test.sh /t.sh\n"
	validate := []string{"validate", "--sim"}
	mistakes := []mistake{
		{name: "no config file", args: []string{"ci", "--sim", "--yes"},
			code: ExitUsage, first: "config file vastrun.yaml: file does not exist", hint: "vastrun init"},
		{name: "train with a ci config", files: good, args: []string{"train", "--sim", "--yes"},
			code: ExitUsage, first: "has no train.command", hint: "vastrun init train"},
		{name: "misspelt top-level key", files: ci("budget:", "bugdet:"), args: validate,
			code: ExitUsage, first: `unknown key "bugdet" at the top level: did you mean budget?`, hint: "rename bugdet: to budget:"},
		{name: "misspelt gpu key", files: ci("max_dph:", "max_dhp:"), args: validate,
			code: ExitUsage, first: `unknown key "max_dhp" in gpu: did you mean max_dph?`, hint: "rename max_dhp: to max_dph:"},
		{name: "wrong type", files: ci("count: 1", "count: one"), args: validate,
			code: ExitUsage, first: `gpu.count is "one", but it must be a whole number`, hint: "write gpu.count as a whole number", notHint: []string{"unmarshal"}},
		{name: "duration without a unit", files: ci("job: 10m", "job: 10"), args: validate,
			code: ExitUsage, first: `"10" is not a duration (write 10m, 90s or 1h30m)`, hint: "fix it in vastrun.yaml"},
		{name: "GPU name of a family", files: ci("models: [RTX_4090, RTX_3090]", "models: [H100]"), args: validate,
			code: ExitUsage, first: `gpu.models "H100": no offer on the marketplace is a "H100"`, hint: `did you mean "H100 NVL" or "H100 SXM"?`, notHint: []string{"H200"}},
		{name: "GPU name typo", files: ci("models: [RTX_4090, RTX_3090]", "models: [RTX_4009]"), args: validate,
			code: ExitUsage, first: `gpu.models "RTX_4009"`, hint: `did you mean "RTX 4090"? (write it as RTX_4090)`},
		{name: "secret declared, not set", files: ci("budget:", "secrets: [HF_TOKEN]\nbudget:"), args: validate,
			code: ExitUsage, first: "secrets HF_TOKEN: is declared but not set", hint: "export HF_TOKEN"},
		{name: "secret too short to mask", files: ci("budget:", "secrets: [HF_TOKEN]\nbudget:"), env: map[string]string{"HF_TOKEN": "abc"}, args: validate,
			code: ExitUsage, first: "secrets HF_TOKEN: is 3 bytes", hint: "use a secret of at least 8 bytes"},
		{name: "image tag instead of digest", files: ci("@sha256:8f5d2f2a4e0c3b6a7d9e1f0a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e", ":2.4.0"), args: validate,
			code: ExitUsage, first: "is not pinned: a tag can change under you", hint: "pin it by digest"},
		{name: "short digest", files: ci("8f5d2f2a4e0c3b6a7d9e1f0a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e", "1234"), args: validate,
			code: ExitUsage, first: "a sha256 digest is 64 lowercase hex characters", hint: "copy the whole digest"},
		{name: "upload that does not exist", files: ci("upload: [examples/gpu-test.sh]", "upload: [tests/gpu-test.sh]"), args: validate,
			code: ExitUsage, first: `upload[0] "tests/gpu-test.sh": does not exist`, hint: "correct the path"},
		{name: "no offer under the price ceiling", files: ci("max_dph: 0.60", "max_dph: 0.01"), args: []string{"ci", "--sim", "--yes"},
			code: ExitNoOffer, first: "no offer", hint: "vastrun offers --sim --policy vastrun.yaml --explain"},
		{name: "no API key", args: []string{"offers"},
			code: ExitAuth, first: "no Vast API key", hint: "--sim"},
		{name: "wrong API key", api: "badkey", args: []string{"offers"},
			code: ExitAuth, first: "auth_error: Invalid user key", hint: "check VAST_API_KEY"},
		{name: "API unreachable", env: map[string]string{"VAST_API_KEY": "k", "VAST_URL": "http://127.0.0.1:1"}, instant: true, args: []string{"offers"},
			code: ExitUnavailable, first: "connection refused", hint: "check the network and VAST_URL"},
		{name: "API URL without a scheme", env: map[string]string{"VAST_API_KEY": "k", "VAST_URL": "console.vast.ai"}, args: []string{"offers"},
			code: ExitUsage, first: "is not an http(s) URL", hint: "https://console.vast.ai"},
		{name: "status with no run", args: []string{"status", "--offline"},
			code: ExitUsage, first: "no run to act on in .vastrun", hint: "vastrun ci", notHint: []string{"--instance", "--label", "--run"}},
		{name: "report with no run", args: []string{"report"},
			code: ExitUsage, first: "no run to act on in .vastrun", hint: "vastrun ci", notHint: []string{"--instance", "--label", "--run"}},
		{name: "logs with no run", args: []string{"logs"},
			code: ExitUsage, first: "no run to act on in .vastrun", hint: "vastrun ci", notHint: []string{"--instance", "--label", "--run"}},
		{name: "down with no run", api: "sim", args: []string{"down", "--yes"},
			code: ExitUsage, first: "no run to act on in .vastrun", hint: "vastrun down --instance ID --yes"},
		{name: "down without --yes, no terminal", api: "sim", args: []string{"down", "--label", "vastrun-x"},
			code: ExitNeedsYes, first: "destroying needs approval", hint: "read what will be destroyed above", notHint: []string{"rent", "plan"}},
		{name: "ci without --yes, no terminal", files: good, args: []string{"ci", "--sim"},
			code: ExitNeedsYes, first: "renting needs approval", hint: "read the plan above, then re-run with --yes"},
		{name: "offers --type spot", args: []string{"offers", "--sim", "--type", "spot"},
			code: ExitUsage, first: "--type spot: no such offer type", hint: "--type interruptible", notHint: []string{"query"}},
		{name: "offers --type misspelt", args: []string{"offers", "--sim", "--type", "reserverd"},
			code: ExitUsage, first: "--type reserverd: no such offer type", hint: "did you mean --type reserved?"},
		{name: "canary validate without a canary section", files: noCanary, args: []string{"canary", "validate"},
			code: ExitUsage, first: "canary.smoke is empty", hint: "vastrun canary init --write", notHint: []string{"env:", "secret"}},
		{name: "canary validate with a secret unset", files: canaryUnset, args: []string{"canary", "validate"},
			code: ExitUsage, first: "secrets HF_TOKEN are declared but not set", hint: "export each declared secret", notHint: []string{"canary init"}},
		{name: "doctor --strict with a full-access key", api: "sim", args: []string{"doctor", "--strict"},
			code: ExitAuth, first: "the API key can do more than vastrun needs", hint: "vastai create api-key --name vastrun-ci --permission_file perms.json"},
		{name: "doctor with a wrong key", api: "badkey", args: []string{"doctor"},
			code: ExitAuth, first: "auth_error", hint: "https://cloud.vast.ai/manage-keys/", notHint: []string{"vastrun doctor"}},
		{name: "--sim-fault without --sim", api: "sim", args: []string{"offers", "--sim-fault", `{"kind":"preempt_after","seconds":60}`},
			code: ExitUsage, first: "--sim-fault needs --sim", hint: "add --sim"},
		{name: "--sim-fault that is not JSON", args: []string{"offers", "--sim", "--sim-fault", "{kind"},
			code: ExitUsage, first: "--sim-fault {kind", hint: `write faults as JSON, e.g. '{"kind":"preempt_after","seconds":60}'`},
		{name: "unknown command", args: []string{"dwon"},
			code: ExitUsage, first: `unknown command "dwon"`, hint: "did you mean 'vastrun down'?"},
		{name: "misspelt flag", files: good, args: []string{"ci", "--sim", "--yess"},
			code: ExitUsage, first: "unknown flag: --yess", hint: "did you mean --yes?"},
		{name: "exec with the command's flags", args: []string{"exec", "nvidia-smi", "-L"},
			code: ExitUsage, first: "unknown shorthand flag: 'L'", hint: "vastrun exec -- nvidia-smi -L"},
		{name: "query field typo", args: []string{"offers", "--sim", "gpu_nam=RTX_4090"},
			code: ExitUsage, first: `unknown field "gpu_nam" (did you mean gpu_name?`, hint: "gpu_name=RTX_4090"},
		{name: "offers --limit 0", args: []string{"offers", "--sim", "--limit", "0"},
			code: ExitUsage, first: "--limit must be positive", hint: "--limit 20"},
		{name: "canary whose base image cannot be pulled", files: offlineBase, env: map[string]string{"VASTRUN_CONTAINER_ENGINE": "podman"},
			podman: `case "$1 $2" in "info ") exit 0;; "image exists") exit 1;; "pull registry.example/acme/base:1") echo "Error: initializing source docker://registry.example/acme/base:1: dial tcp: lookup registry.example: no such host" >&2; exit 125;; esac; exit 2`,
			args:   []string{"canary", "--sim", "--yes"},
			code:   ExitUsage, first: "Containerfile builds FROM registry.example/acme/base:1, which podman does not have and could not pull", hint: "podman pull registry.example/acme/base:1"},
		{name: "status of a --sim run without a key", files: good, before: [][]string{{"ci", "--sim", "--yes"}}, args: []string{"status"},
			code: ExitAuth, first: "no Vast API key", hint: "vastrun status --offline"},
	}
	if len(mistakes) < 25 {
		t.Fatalf("%d mistakes; the table holds 25 at least", len(mistakes))
	}
	s, srv := newSimServer(t)
	for _, m := range mistakes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range m.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			t.Chdir(dir)
			if m.podman != "" {
				bin := t.TempDir()
				if err := os.WriteFile(filepath.Join(bin, "podman"), []byte("#!/bin/sh\n"+m.podman+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			}
			env := map[string]string{"VASTRUN_CONTAINER_ENGINE": "none"}
			switch m.api {
			case "sim":
				env["VAST_URL"], env["VAST_API_KEY"] = srv.URL, s.APIKey()
			case "badkey":
				env["VAST_URL"], env["VAST_API_KEY"] = srv.URL, "deadbeef"+strings.Repeat("0", 56)
			}
			for k, v := range m.env {
				env[k] = v
			}
			run := func(args []string) (*Factory, *bytes.Buffer, error) {
				var out, errOut bytes.Buffer
				f := &Factory{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
					Getenv: func(k string) string { return env[k] }, HomeDir: dir}
				if m.instant {
					f.Clock = instantClock{}
				}
				err := execute(context.Background(), f, args)
				return f, &errOut, err
			}
			for _, args := range m.before {
				if _, errOut, err := run(args); err != nil {
					t.Fatalf("vastrun %s: %v\n%s", strings.Join(args, " "), err, errOut)
				}
			}
			f, errOut, err := run(m.args)
			if err == nil {
				t.Fatalf("vastrun %s succeeded; stderr:\n%s", strings.Join(m.args, " "), errOut)
			}
			reportError(f, err) // what Run prints, into the same stream
			printed := strings.Split(strings.TrimRight(errOut.String(), "\n"), "\n")
			hs := hints(err)
			first := strings.SplitN(f.IO.Redactor().String(err.Error()), "\n", 2)[0]
			// The error and its hints end what a person reads.
			if !strings.Contains("\n"+errOut.String(), "\nvastrun: "+first+"\n") || len(printed) < len(hs) {
				t.Fatalf("stderr does not hold the error's first line %q:\n%s", first, errOut)
			}
			for i, h := range hs {
				if got := printed[len(printed)-len(hs)+i]; got != "vastrun: hint: "+h {
					t.Errorf("hint line %q, want %q", got, "vastrun: hint: "+h)
				}
			}
			code := exitCode(err)
			t.Logf("exit %d | %s | %s", code, first, strings.Join(hs, " / "))
			if code != m.code {
				t.Errorf("exit %d, want %d", code, m.code)
			}
			if !strings.Contains(first, m.first) {
				t.Errorf("first line %q, want it to hold %q", first, m.first)
			}
			all := strings.Join(hs, "\n")
			if !strings.Contains(all, m.hint) {
				t.Errorf("hints %q, want one naming the fix %q", hs, m.hint)
			}
			for _, no := range m.notHint {
				if strings.Contains(all, no) {
					t.Errorf("hints %q say %q, which does not fit this mistake", hs, no)
				}
			}
		})
	}
}
