package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/preflight"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// checkBeforeRenting is the one step before anything is created (run
// directory, receipt, rental): the local checks, the stores the run writes
// to (a probe object, deleted), then the live market. Only a log line is
// written. An API failure during the market checks is
// reported and left to the run's own search, which retries it, except a
// refused key, which no retry fixes.
func checkBeforeRenting(ctx context.Context, f *Factory, cfg *config.Config, workflow string) (*preflight.MarketReport, error) {
	repo, _ := os.Getwd()
	cfg.ExpandVars(f.Getenv) // as newEngine does (config/vars.go)
	in := preflight.Input{Config: cfg, RepoDir: repo, Getenv: f.Getenv, Workflow: workflow, AgentEnv: storageEnv(f), OwnKeys: ownKeys(f, cfg)}
	if err := preflight.Local(in); err != nil {
		return nil, err
	}
	if err := preflight.Stores(ctx, in); err != nil {
		return nil, err
	}
	if w := cfg.InterruptibleWarning(workflow); w != "" {
		f.IO.Infof("%s", w)
	}
	m, err := f.Marketplace(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.checkInstanceBinary(); err != nil {
		return nil, err
	}
	rep, err := preflight.Market(ctx, m, cfg)
	var pe *preflight.Error
	switch {
	case errors.As(err, &pe):
		return rep, err
	case errors.Is(err, provider.ErrAuth):
		return nil, err
	case err != nil:
		f.IO.Infof("preflight: could not check the live offers (%v); the run's own search will retry", err)
		return nil, nil
	}
	f.IO.Infof("preflight: %s", rep.Explain())
	return rep, nil
}

// ownKeys are the keys this vastrun holds, which the preflight refuses to
// hand to a workload: the Vast API key (by the variable and by the value
// of the flag, the variable and each key file) and, with team state on S3,
// the storage credentials it keeps the team's runs with.
func ownKeys(f *Factory, cfg *config.Config) []preflight.OwnKey {
	keys := []preflight.OwnKey{{Name: "VAST_API_KEY", Source: "VAST_API_KEY, the Vast account's API key", Value: strings.TrimSpace(f.Getenv("VAST_API_KEY"))}}
	if k := strings.TrimSpace(f.APIKey); k != "" {
		keys = append(keys, preflight.OwnKey{Source: "--api-key, the Vast account's API key", Value: k})
	}
	for _, p := range vast.KeyFiles(f.Getenv, f.HomeDir) {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
			keys = append(keys, preflight.OwnKey{Source: "the Vast API key file " + p, Value: strings.TrimSpace(string(b))})
		}
	}
	if loc, err := stateLocation(nil, cfg); err == nil && loc.Kind == "s3" {
		for _, name := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
			keys = append(keys, preflight.OwnKey{Name: name, Source: name + ", a credential of the team state " + loc.String(), Value: strings.TrimSpace(f.Getenv(name))})
		}
	}
	return keys
}

// ValidateOptions are the flags of `vastrun validate`.
type ValidateOptions struct {
	f          *Factory
	ConfigPath string
	Offline    bool
}

type validateResult struct {
	Schema   string                  `json:"schema"`
	OK       bool                    `json:"ok"`
	Problems []preflight.Problem     `json:"problems"`
	Market   *preflight.MarketReport `json:"market,omitempty"`
	// MarketSkipped says why the live checks did not run.
	MarketSkipped string `json:"market_skipped,omitempty"`
	Simulated     bool   `json:"simulated"`
}

// NewCmdValidate builds `vastrun validate`.
func NewCmdValidate(f *Factory, runF func(context.Context, *ValidateOptions) error) *cobra.Command {
	o := &ValidateOptions{f: f}
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Run the preflight alone: config, image digest, uploads, secrets, stores, GPU names and live offers",
		Long: `Check everything 'vastrun ci' or 'vastrun train' checks before it creates
anything: every config value, the image reference and its digest, that
upload paths exist, that declared secrets and the ${NAME}s of store URIs
are set, that every store the run writes to (train.checkpoint_uri,
train.output_uri, evidence.uri) takes an object written, read back and
deleted with the credentials that will write it, that the policy's GPU
names exist on the marketplace, and how many live offers meet the policy
(for none: which constraint removed the last ones). Nothing is left
behind. Without an API key only the local and store checks run; with
--offline only the local ones.
Exit 0 when everything passes, 2 when something must be fixed.`,
		Example: "  vastrun validate\n  vastrun validate -f ci/vastrun.yaml --json\n  vastrun validate --sim",
		Args:    usageArgs(cobra.NoArgs),
		RunE:    runCmd(o, nil, runF, runValidate),
	}
	cmd.Flags().StringVarP(&o.ConfigPath, "file", "f", "vastrun.yaml", "config file (docs/config.md)")
	cmd.Flags().BoolVar(&o.Offline, "offline", false, "run only the local checks (no store probe, no market)")
	return cmd
}

func runValidate(ctx context.Context, o *ValidateOptions) error {
	f := o.f
	wo := &WorkflowOptions{ConfigPath: o.ConfigPath}
	cfg, err := wo.loadConfig()
	if err != nil {
		return err
	}
	res := validateResult{Schema: "vastrun.validate/v1", Problems: []preflight.Problem{}, Simulated: f.Sim}
	repo, _ := os.Getwd()
	cfg.ExpandVars(f.Getenv)
	in := preflight.Input{Config: cfg, RepoDir: repo, Getenv: f.Getenv, AgentEnv: storageEnv(f), OwnKeys: ownKeys(f, cfg)}
	lerr := preflight.Local(in)
	var pe *preflight.Error
	if errors.As(lerr, &pe) {
		res.Problems = append(res.Problems, pe.Problems...)
	} else if lerr != nil {
		return lerr
	}
	if !o.Offline { // the stores are probed over the network, as the run writes them
		serr := preflight.Stores(ctx, in)
		if errors.As(serr, &pe) {
			res.Problems = append(res.Problems, pe.Problems...)
		} else if serr != nil {
			return serr
		}
	}
	// The vastrun every instance runs (after the simulator, if any, has
	// said where its instances run).
	m, merr := f.Marketplace(ctx)
	if berr := f.checkInstanceBinary(); errors.As(berr, &pe) {
		res.Problems = append(res.Problems, pe.Problems...)
	} else if berr != nil {
		return berr
	}
	switch err := merr; {
	case o.Offline:
		res.MarketSkipped = "--offline"
	case errors.Is(err, vast.ErrNoAPIKey):
		res.MarketSkipped = "no API key (set VAST_API_KEY, or pass --sim to check against the simulator)"
	case err != nil:
		return err
	default:
		res.Market, merr = preflight.Market(ctx, m, cfg)
		if res.Market != nil {
			res.Market.Cheapest = round6(res.Market.Cheapest)
		}
		if errors.As(merr, &pe) {
			res.Problems = append(res.Problems, pe.Problems...)
		} else if merr != nil {
			return merr
		}
	}
	res.OK = len(res.Problems) == 0
	if f.JSON {
		b, _ := json.Marshal(res)
		if _, err := f.IO.Out.Write(append(f.IO.Redactor().JSON(b), '\n')); err != nil && res.OK {
			return err // with problems, the preflight error below is the one to report (its exit code)
		}
	} else {
		if res.MarketSkipped != "" {
			f.IO.Infof("preflight: live offer checks skipped: %s", res.MarketSkipped)
		} else if res.Market != nil {
			f.IO.Infof("preflight: %s", res.Market.Explain())
		}
		if res.OK {
			f.IO.Infof("preflight: %s passes every check", o.ConfigPath)
		}
	}
	if !res.OK {
		return &preflight.Error{Problems: res.Problems}
	}
	return nil
}
