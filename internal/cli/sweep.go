package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/ci"
	"github.com/vastrun/vastrun/internal/config"
)

// SweepFile is sweep.yaml.
type SweepFile struct {
	// Config is the run's config (train or ci), relative to sweep.yaml.
	Config string `yaml:"config"`
	// Concurrency bounds the runs at once (default 1).
	Concurrency int `yaml:"concurrency"`
	// BudgetUSD is one budget across every run of the sweep (required).
	BudgetUSD float64 `yaml:"budget_usd"`
	// Grid maps a parameter (an environment variable name) to its values;
	// the sweep runs every combination, each with those variables set.
	Grid map[string][]string `yaml:"grid"`
}

var envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

func loadSweep(path string) (*SweepFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s SweepFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var errs []string
	if s.Config == "" {
		errs = append(errs, "config is required: the run's config file (a train or ci config)")
	}
	if s.BudgetUSD <= 0 {
		errs = append(errs, "budget_usd is required: one budget, in $, across every run of the sweep")
	}
	if s.Concurrency < 0 || s.Concurrency > 64 {
		errs = append(errs, fmt.Sprintf("concurrency %d must be from 1 to 64", s.Concurrency))
	}
	if len(s.Grid) == 0 {
		errs = append(errs, "grid is required: parameter: [values...]")
	}
	n := 1
	for k, vs := range s.Grid {
		if !envName.MatchString(k) {
			errs = append(errs, fmt.Sprintf("grid key %q must be an environment variable name (A-Z, 0-9, _)", k))
		}
		if len(vs) == 0 {
			errs = append(errs, fmt.Sprintf("grid.%s has no values", k))
		}
		n *= max(len(vs), 1)
	}
	if n > 256 {
		errs = append(errs, fmt.Sprintf("the grid has %d combinations; at most 256", n))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", path, strings.Join(errs, "; "))
	}
	if !filepath.IsAbs(s.Config) {
		s.Config = filepath.Join(filepath.Dir(path), s.Config)
	}
	if s.Concurrency == 0 {
		s.Concurrency = 1
	}
	return &s, nil
}

// points is the grid's combinations, in a stable order.
func (s *SweepFile) points() []map[string]string {
	keys := make([]string, 0, len(s.Grid))
	for k := range s.Grid {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []map[string]string{{}}
	for _, k := range keys {
		var next []map[string]string
		for _, p := range out {
			for _, v := range s.Grid[k] {
				q := map[string]string{k: v}
				for kk, vv := range p {
					q[kk] = vv
				}
				next = append(next, q)
			}
		}
		out = next
	}
	return out
}

func pointName(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, strings.ToLower(k)+"="+p[k])
	}
	return regexp.MustCompile(`[^a-zA-Z0-9=._-]`).ReplaceAllString(strings.Join(parts, ","), "_")
}

// NewCmdSweep builds `vastrun sweep`.
func NewCmdSweep(f *Factory) *cobra.Command {
	o := &WorkflowOptions{}
	var sweepPath string
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Run one training (or ci) run per point of a parameter grid, with a concurrency limit and one budget",
		Long: `Run every combination of sweep.yaml's grid as a run of its own (its own run
id, label, lease, checkpoint prefix, journal and receipt), at most
concurrency at once, with the grid's values as environment variables of the
workload. One budget covers them all: each run reserves its worst case at
approval, and a run that would pass budget_usd is refused there. Each run
survives and is cleaned up exactly as a single run would be; one combined
receipt lists them (evidence dir: sweep-receipt.json).

  config: train.yaml
  concurrency: 3
  budget_usd: 20
  grid:
    LR: ["0.1", "0.01"]
    SEED: ["1", "2", "3"]`,
		Example: "  vastrun sweep --yes -f sweep.yaml\n  vastrun sweep --sim --yes -f sweep.yaml --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			sw, err := loadSweep(sweepPath)
			if errors.Is(err, fs.ErrNotExist) {
				return &UsageError{Err: err, Hint: "write a sweep.yaml: config, concurrency, budget_usd and grid (see 'vastrun sweep --help')"}
			}
			if err != nil {
				return &UsageError{Err: err}
			}
			o.ConfigPath = sw.Config
			base, err := o.loadConfig()
			if err != nil {
				return err
			}
			if ok, err := checkTrust(f, o, ci.Detect(f.Getenv)); !ok || err != nil {
				return err
			}
			workflow := "ci"
			if base.IsTrain() {
				workflow = "train"
			}
			var specs []childSpec
			for _, p := range sw.points() {
				c, err := config.Load(sw.Config)
				if err != nil {
					return err
				}
				if o.StateDir != "" {
					c.StateDir = o.StateDir
				}
				if c.Env == nil {
					c.Env = map[string]string{}
				}
				for k, v := range p {
					c.Env[k] = v
				}
				specs = append(specs, childSpec{Name: pointName(p), Cfg: c, Params: p})
			}
			if _, err := checkBeforeRenting(ctx, f, base, workflow); err != nil {
				return err
			}
			mr, runErr := runMany(ctx, f, o, "sweep", workflow, specs, sw.Concurrency, sw.BudgetUSD, "all")
			if mr == nil {
				return runErr
			}
			if err := writeManyReceipt(f, o, base, mr); err != nil && runErr == nil {
				return err
			}
			return runErr
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&sweepPath, "file", "f", "sweep.yaml", "the sweep file")
	fl.BoolVarP(&o.Yes, "yes", "y", false, "approve renting without a prompt")
	fl.StringVar(&o.EvidenceDir, "evidence-dir", "", "where to write evidence (each run in DIR/<point>; default ./vastrun-evidence/RUN)")
	fl.StringVar(&o.StateDir, "state-dir", "", "where run journals live (default: state_dir in the config, else .vastrun)")
	o.addTeamFlags(cmd)
	return cmd
}
