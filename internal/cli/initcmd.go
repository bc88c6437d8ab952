package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/image"
	"github.com/vastrun/vastrun/internal/redact"
)

// DefaultInitImage is the image a fresh config starts from: a public CUDA
// image people recognise, which init pins to its digest.
const DefaultInitImage = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"

// InitOptions are the inputs of `vastrun init`.
type InitOptions struct {
	IO       *IOStreams
	JSON     bool
	Kind     string // ci or train
	File     string
	Image    string
	Force    bool
	Insecure bool
	// Resolve pins a tag to its digest; tests replace it.
	Resolve func(ctx context.Context, ref string) (string, error)
}

// NewCmdInit builds `vastrun init`; runF replaces the run in tests.
func NewCmdInit(f *Factory, runF func(context.Context, *InitOptions) error) *cobra.Command {
	opts := &InitOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "init [ci|train]",
		Short: "Write a commented vastrun.yaml for a GPU test (ci) or a training run (train)",
		Long: `Write a vastrun.yaml to start from, every key commented, with the lines to
edit marked EDIT: the image (pinned to its digest when the registry answers;
auth from the docker config), the test or training command, the GPU policy and
a budget. It never overwrites a file unless --force. Then run
'vastrun validate' and try it offline with --sim.`,
		Example: "  vastrun init\n  vastrun init train --image ghcr.io/acme/trainer:v3\n  vastrun init ci -f gpu.yaml --force",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			opts.JSON = f.JSON
			opts.Kind = "ci"
			if len(args) == 1 {
				opts.Kind = args[0]
			}
			if opts.Kind != "ci" && opts.Kind != "train" {
				return &UsageError{Err: fmt.Errorf("vastrun init %s: unknown kind", opts.Kind), Hint: "write 'vastrun init ci' (a GPU test) or 'vastrun init train' (a checkpointed training run); for canaries: vastrun canary init"}
			}
			if opts.Resolve == nil {
				opts.Resolve = func(ctx context.Context, ref string) (string, error) {
					return image.Resolve(ctx, ref, image.Options{Insecure: opts.Insecure})
				}
			}
			return nil
		}, runF, runInit),
	}
	cmd.Flags().StringVarP(&opts.File, "file", "f", "vastrun.yaml", "config file to write")
	cmd.Flags().StringVar(&opts.Image, "image", DefaultInitImage, "image to start from (a tag is pinned to its digest)")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "overwrite an existing file")
	cmd.Flags().BoolVar(&opts.Insecure, "insecure-registry", false, "reach the image's registry over plain HTTP (a local registry)")
	return cmd
}

type initResult struct {
	Schema string `json:"schema"`
	Kind   string `json:"kind"`
	File   string `json:"file"`
	Image  string `json:"image"`
	Pinned bool   `json:"pinned"`
	// Edit lists the keys a person must still change.
	Edit []string `json:"edit"`
}

func runInit(ctx context.Context, opts *InitOptions) error {
	if _, err := os.Stat(opts.File); err == nil && !opts.Force {
		return &UsageError{Err: fmt.Errorf("%s already exists", opts.File), Hint: "edit it, pass -f OTHER.yaml, or --force to overwrite it"}
	}
	img, pinned, note := opts.Image, image.IsPinned(opts.Image), ""
	if !pinned {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		d, err := opts.Resolve(rctx, opts.Image)
		cancel()
		if err == nil {
			img, pinned = d, true
			note = fmt.Sprintf("# Pinned by vastrun init from %s on %s.\n", opts.Image, time.Now().UTC().Format("2006-01-02"))
		} else {
			note = "# EDIT: pin this image by digest: vastrun init could not reach its registry\n# (" + oneLine(err.Error()) + ").\n# vastrun refuses a tag; find the digest with: crane digest IMAGE\n"
		}
	}
	text := initTemplate(opts.Kind, img, note)
	// What init writes must load: a template that does not is a bug here,
	// not the user's to find.
	if _, err := config.Parse([]byte(text)); err != nil {
		return fmt.Errorf("init template for %s does not load: %w", opts.Kind, err)
	}
	if err := redact.NewSink(opts.IO.Redactor()).WriteFile(opts.File, []byte(text), 0o644); err != nil {
		return err
	}
	res := initResult{Schema: "vastrun.init/v1", Kind: opts.Kind, File: opts.File, Image: img, Pinned: pinned, Edit: initEdits(opts.Kind, pinned)}
	if opts.JSON {
		return writeJSON(opts.IO, res)
	}
	opts.IO.Infof("wrote %s (%s)", opts.File, map[string]string{"ci": "a GPU test", "train": "a checkpointed training run"}[opts.Kind])
	opts.IO.Infof("edit the lines marked EDIT: %s", strings.Join(res.Edit, ", "))
	opts.IO.Infof("then: vastrun validate -f %s; try it offline: vastrun %s --sim --yes -f %s", opts.File, opts.Kind, opts.File)
	return nil
}

func initEdits(kind string, pinned bool) []string {
	var e []string
	if !pinned {
		e = append(e, "image (pin it by digest)")
	}
	if kind == "train" {
		return append(e, "upload", "train.command", "train.checkpoint_uri", "budget.max_spend")
	}
	return append(e, "test", "upload", "budget.max_spend")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func initTemplate(kind, img, note string) string {
	head := `# vastrun.yaml, written by 'vastrun init ` + kind + `'. Every key is documented in
# docs/config.md. Lines marked EDIT are yours to change; then run
#   vastrun validate          # checks everything checkable, rents nothing
#   vastrun ` + kind + ` --sim --yes    # the whole run offline, nothing billed
version: 1

# The image the instance runs, pinned by digest: a tag can change under you.
` + note + `image: ` + img + `

`
	gpu := `# Which GPUs may be rented, and the most they may cost ($/h, storage
# included). vastrun rents the cheapest offer meeting all of it.
gpu:
  models: [RTX_4090, RTX_3090]
  count: 1
  min_vram_gb: 20
  min_reliability: 0.95
  disk_gb: 20
  max_dph: 0.60
`
	if kind == "train" {
		return head + `# EDIT: files and directories copied to the instance (relative to here).
upload: []

` + gpu + `
# EDIT: $ for every attempt together. The budget kill switch stops training
# with the last committed checkpoint before the spend would pass it.
budget:
  max_spend: 2.00

timeouts:
  ready: 10m     # from renting to a running, reachable instance
  teardown: 4m   # destroy and confirm

# The workload contract (checkpoints, resume, metrics) is in docs/train.md.
train:
  # EDIT: the training command, run in the instance's login directory.
  command: python3 train.py
  checkpoint_dir: checkpoints
  cadence: 100           # steps between checkpoints (VASTRUN_CHECKPOINT_EVERY)
  # EDIT: where checkpoints are kept between attempts: s3://bucket/prefix
  # (credentials from AWS_* variables), or file:// with the simulator.
  checkpoint_uri: file://${PWD}/.vastrun/checkpoints
  keep: 3
  runtime_deadline: 2h
`
	}
	return head + `# EDIT: the test, run on the instance in its login directory after upload.
# It passes when it exits 0.
test: nvidia-smi

# EDIT: files and directories copied to the instance (relative to here),
# e.g. [tests/gpu, pyproject.toml].
upload: []

# CPU checks run here first; a failure rents nothing. e.g. [make lint]
gate: []

` + gpu + `
# EDIT: $ for the whole run, every attempt included. Before renting,
# vastrun refuses when price x (ready + job + teardown) would pass it.
budget:
  max_spend: 1.00

timeouts:
  ready: 10m     # from renting to a running, reachable instance
  job: 20m       # the test
  teardown: 4m   # destroy and confirm
`
}

// writeJSON prints one indented JSON document on stdout.
func writeJSON(s *IOStreams, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = s.Out.Write(append(s.Redactor().JSON(b), '\n'))
	return err
}
