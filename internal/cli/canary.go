package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/smoke"
	canaryflow "github.com/vastrun/vastrun/internal/workflow/canary"
)

// CanaryOptions are `vastrun canary`'s parsed flags and dependencies.
type CanaryOptions struct {
	f        *Factory
	Workflow WorkflowOptions
	// Resolve pins a tagged image through the registry first; Publish
	// pushes canary.image_source and pins the run to it (PublishOpts).
	Resolve, Publish  bool
	InsecureRegistry  bool
	AllowLocalFailure bool
	PublishOpts       PublishOptions
}

// NewCmdCanary builds `vastrun canary` and its init/validate subcommands.
func NewCmdCanary(f *Factory, runF func(context.Context, *CanaryOptions) error) *cobra.Command {
	opts := &CanaryOptions{f: f}
	o := &opts.Workflow
	cmd := &cobra.Command{
		Use:   "canary",
		Short: "Prove the smoke contract locally, then on the smallest GPU, and compare",
		Long: `The local dev loop. First locally: canary.unit, then canary.smoke (in docker
or podman when present, otherwise directly on this host in CPU mode). A local
failure rents nothing (outcome local_failed). Then the cheapest verified offer
meeting the gpu: policy runs the same smoke command with VASTRUN_DEVICE=gpu,
plus nvidia-smi and canary.cuda_check. The image must be pinned by digest
(--resolve pins a tag through the registry); if the instance runs other bytes,
the outcome is remote_bytes_differ. Outcomes: match, gpu_only_failure (with
driver, CUDA, image and command evidence kept), local_only_failure,
output_delta (field-level diff of the JSON results), both_failed.

With canary.ports or canary.health_url set, the smoke is a server: it is
started in the background, waited for (ports accept, health_url answers 2xx,
within canary.health_timeout), probed with canary.request, then stopped
(SIGTERM, then SIGKILL after canary.timeouts.stop), the same way locally and
on the instance. Local steps are bounded by canary.timeouts.unit and .smoke
and get only env:, secrets:, VASTRUN_* and PATH/HOME. Results compare with
canary.compare.tolerance and canary.compare.ignore (docs/config.md).`,
		Example: `  vastrun canary init            # propose a canary: section from the repo
  vastrun canary validate
  vastrun canary --sim --yes -f examples/canary/vastrun.yaml
  vastrun canary --resolve --yes # pin image: tag -> digest first`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, nil, runF, runCanary),
	}
	o.addFlags(cmd, true)
	cmd.Flags().BoolVar(&opts.Resolve, "resolve", false, "pin a tagged image to its digest through the registry (auth from the docker config)")
	cmd.Flags().BoolVar(&opts.InsecureRegistry, "insecure-registry", false, "with --resolve: allow a plain-HTTP registry")
	cmd.Flags().BoolVar(&opts.Publish, "publish", false, "first publish canary.image_source under <repo>:<git sha> and pin the run to its digest (see 'vastrun publish')")
	opts.PublishOpts.addFlags(cmd, "publish-")
	cmd.MarkFlagsMutuallyExclusive("publish", "resolve")
	cmd.Flags().BoolVar(&opts.AllowLocalFailure, "allow-local-failure", false, "rent even when the local smoke fails, to compare (outcome local_only_failure or both_failed)")
	cmd.AddCommand(NewCmdCanaryInit(f, nil), NewCmdCanaryValidate(f, nil))
	return cmd
}

func runCanary(ctx context.Context, opts *CanaryOptions) error {
	f, o := opts.f, &opts.Workflow
	cfg, err := o.loadConfig()
	if err != nil {
		return err
	}
	if !cfg.IsCanary() {
		return &UsageError{Err: fmt.Errorf("%s has no canary.smoke", o.ConfigPath), Hint: "run 'vastrun canary init' to propose one"}
	}
	if opts.Publish { // push the bytes built here and pin the run to them
		opts.PublishOpts.ConfigPath, opts.PublishOpts.Insecure = o.ConfigPath, opts.InsecureRegistry
		if _, err := runPublish(ctx, f, &opts.PublishOpts, cfg); err != nil {
			return err
		}
	} else if opts.Resolve && !image.IsPinned(cfg.Image) {
		ro := image.Options{Insecure: opts.InsecureRegistry}
		if l := cfg.ImageLogin; l.IsSet() { // the credentials Vast will pull with
			ro.Login = &image.Login{Registry: l.Registry, User: f.Getenv(l.UserEnv), Token: f.Getenv(l.TokenEnv)}
		}
		pinned, err := image.Resolve(ctx, cfg.Image, ro)
		if err != nil {
			return err
		}
		f.IO.Infof("resolved %s to %s", cfg.Image, pinned)
		cfg.Image = pinned
	}
	if err := image.CheckPinned(cfg.Image); err != nil {
		return &UsageError{Err: err}
	}
	env := cienv.Detect(f.Getenv)
	if ok, err := checkTrust(f, o, env); !ok || err != nil {
		return err
	}
	if err := checkBaseImages(ctx, f, cfg); err != nil {
		return err
	}
	if _, err := checkBeforeRenting(ctx, f, cfg, "canary"); err != nil {
		return err
	}
	e, err := newEngine(ctx, f, o, cfg, env)
	if err != nil {
		return err
	}
	r, runErr := canaryflow.Run(ctx, e, opts.AllowLocalFailure)
	return reportRun(f, r, withRunHints(f, o, interruptedRun(o, r, runErr)))
}

// CanaryInitOptions are `vastrun canary init`'s flags.
type CanaryInitOptions struct {
	f *Factory
	// Dir is the repository read; File the config --write adds to.
	Dir, File string
	Write     bool
}

// NewCmdCanaryInit builds `vastrun canary init`.
func NewCmdCanaryInit(f *Factory, runF func(context.Context, *CanaryInitOptions) error) *cobra.Command {
	opts := &CanaryInitOptions{f: f}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Propose a canary: section from the repository's Dockerfile, compose file and test targets",
		Long: `Read the repository and propose a contract: the one compose service that
serves (it builds the repository's Dockerfile, reserves a GPU or publishes
the port the Dockerfile exposes; dev tools, observability and database
services are never picked or merged in; variant files such as
compose.cuda.yaml that name the same service extend it: image, build target,
command, ports, environment, env_file, healthcheck), the served stage of the
Dockerfile (Dockerfile.gpu first: ENTRYPOINT, CMD, EXPOSE, HEALTHCHECK, COPY,
globs expanded), .env/sample.env files, the CI workflow step that runs the
tests (and its env and secrets), the health route the server's code defines,
the names the server's code reads from the environment, and the repository's
test runner (Taskfile, Makefile, nox, poetry, uv, npm, go). Image ENV names
are defaults, not inputs; names that look like credentials become secrets:
(names only, never values); names only client scripts read (code the server
does not import) are optional. Prints the proposal, or with --write adds it
to vastrun.yaml (which must not have a canary: section yet; keys it already
has are added as comments). A proposal with no smoke command is never
written.`,
		Example: "  vastrun canary init\n  vastrun canary init --write",
		Args:    usageArgs(cobra.NoArgs),
		RunE:    runCmd(opts, nil, runF, runCanaryInit),
	}
	cmd.Flags().StringVar(&opts.Dir, "dir", ".", "repository to read")
	cmd.Flags().StringVarP(&opts.File, "file", "f", "vastrun.yaml", "config to add the section to")
	cmd.Flags().BoolVar(&opts.Write, "write", false, "add the section to the config file")
	return cmd
}

func runCanaryInit(_ context.Context, opts *CanaryInitOptions) error {
	f, file := opts.f, opts.File
	p, err := smoke.Init(opts.Dir)
	if err != nil {
		return &UsageError{Err: err}
	}
	if !opts.Write {
		block := p.YAML()
		if f.JSON {
			return writeJSON(f.IO, canaryInitJSON{Schema: "vastrun.canary.init/v1", YAML: block, Sources: nonNil(p.Sources)})
		}
		_, err := fmt.Fprint(f.IO.Out, block)
		return err
	}
	// A proposal with no smoke is a contract validate rejects: it is
	// shown, never written.
	if err := p.Check(); err != nil {
		return &UsageError{Err: fmt.Errorf("canary init: %w; nothing was written to %s", err, file), Hint: "run `vastrun canary init` without --write to see what was found, and write canary.smoke by hand"}
	}
	existing, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	text, block, err := withCanarySection(file, existing, p)
	if err != nil {
		return err
	}
	if err := f.sink(nil).WriteFile(file, []byte(text), 0o644); err != nil {
		return err
	}
	f.IO.Infof("wrote a canary: section to %s (from %s); edit it, then run 'vastrun canary validate'", file, strings.Join(p.Sources, ", "))
	if f.JSON {
		return writeJSON(f.IO, canaryInitJSON{Schema: "vastrun.canary.init/v1", YAML: block, Sources: nonNil(p.Sources), Written: file})
	}
	return nil
}

// withCanarySection is the config file existing (named file) with the
// proposal's canary: section added, and the section itself. A file that
// does not parse, or already has a canary: section, is refused; an empty
// one gets the keys a canary needs first.
func withCanarySection(file string, existing []byte, p smoke.Proposal) (text, block string, err error) {
	have, err := topLevelKeys(existing)
	if err != nil {
		return "", "", &UsageError{Err: fmt.Errorf("%s: %w", file, err), Hint: "fix the file, or run without --write to see the proposal"}
	}
	if have["canary"] {
		return "", "", &UsageError{Err: fmt.Errorf("%s already has a canary: section", file), Hint: "edit it, or run without --write to see the proposal"}
	}
	text = string(existing)
	if text == "" {
		text = "gpu:\n  max_dph: 0.50\nbudget:\n  max_spend: 1.00\n"
		if p.Image == "" {
			// An unpinned placeholder: validate refuses it until a
			// real image is pinned.
			text = "# Replace with your image, pinned by digest (vastrun canary --resolve pins a tag).\nimage: REPLACE-ME/your-image:tag\n" + text
		}
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	block = p.Render(have)
	return text + "\n" + block, block, nil
}

// CanaryValidateOptions are `vastrun canary validate`'s flags.
type CanaryValidateOptions struct {
	f    *Factory
	File string
}

// NewCmdCanaryValidate builds `vastrun canary validate`.
func NewCmdCanaryValidate(f *Factory, runF func(context.Context, *CanaryValidateOptions) error) *cobra.Command {
	opts := &CanaryValidateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check the canary contract in vastrun.yaml",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runCanaryValidate),
	}
	cmd.Flags().StringVarP(&opts.File, "file", "f", "vastrun.yaml", "config file")
	return cmd
}

func runCanaryValidate(_ context.Context, opts *CanaryValidateOptions) error {
	f, file := opts.f, opts.File
	cfg, err := config.Load(file)
	if err != nil {
		return configError(file, err)
	}
	problems := smoke.Validate(cfg, f.Getenv)
	if f.JSON {
		if err := writeJSON(f.IO, canaryValidateJSON{Schema: "vastrun.canary.validate/v1", File: file, Valid: len(problems) == 0,
			Problems: nonNil(problems), Smoke: cfg.Canary.Smoke, ExpectExit: cfg.Canary.ExpectExit, Fields: nonNil(cfg.Canary.ExpectFields)}); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &UsageError{Err: errors.New("canary contract: " + strings.Join(problems, "; ")), Hint: canaryFixes(cfg, file, f.Getenv)}
	}
	f.IO.Infof("canary contract in %s is valid: smoke %q, expect exit %d, fields %v", file, cfg.Canary.Smoke, cfg.Canary.ExpectExit, cfg.Canary.ExpectFields)
	return nil
}

// topLevelKeys lists the top-level keys of a YAML config (none when empty).
func topLevelKeys(b []byte) (map[string]bool, error) {
	have := map[string]bool{}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	for k := range doc {
		have[k] = true
	}
	return have, nil
}

// canaryFixes are the fixes for what smoke.Validate found, one a line:
// each kind of problem has its own, never a fix for a problem not there.
func canaryFixes(cfg *config.Config, file string, getenv func(string) string) string {
	var fixes []string
	if !cfg.IsCanary() {
		fixes = append(fixes, fmt.Sprintf("%s has no canary: section: propose one from this repository with 'vastrun canary init --write -f %s' (docs/config.md, canary.*)", file, file))
	}
	if image.CheckPinned(cfg.Image) != nil {
		fixes = append(fixes, "pin image: by digest (repo@sha256:…): 'vastrun canary --resolve --yes' resolves the tag through its registry first")
	}
	envProblem := false
	for _, name := range cfg.Canary.EnvNames {
		if _, inEnv := cfg.Env[name]; !inEnv && !slices.Contains(cfg.Secrets, name) {
			envProblem = true
		}
	}
	for _, name := range cfg.Secrets {
		if len(getenv(name)) < redact.MinSecretLen {
			envProblem = true
		}
	}
	if envProblem {
		fixes = append(fixes, "put the names the image needs under env: (an empty value is allowed) or secrets:, and export each declared secret (8 bytes at least) before validating")
	}
	for _, ig := range append(append([]string{}, cfg.Canary.IgnoreFields...), cfg.Canary.Compare.Ignore...) {
		if slices.Contains(cfg.Canary.ExpectFields, ig) {
			fixes = append(fixes, fmt.Sprintf("field %q: keep it in canary.expect_fields or in canary.ignore_fields, not both", ig))
		}
	}
	return strings.Join(fixes, "\n")
}
