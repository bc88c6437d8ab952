package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
	"github.com/vastrun/vastrun/internal/workflow/ci"
	trainflow "github.com/vastrun/vastrun/internal/workflow/train"
)

// Many runs under one plan (gpu.matrix, vastrun sweep): each child is a
// run of its own — its own run id, label, lease, checkpoint prefix,
// journal and receipt — driven by its own engine, so that it survives and
// is cleaned up exactly as a single run would be. The children share one
// concurrency limit and one budget.

// ManySchema names the combined receipt of a matrix or a sweep.
const ManySchema = "vastrun.many"

type childSpec struct {
	Name   string
	Cfg    *config.Config
	GPU    string            `json:",omitempty"`
	Params map[string]string `json:",omitempty"`
}

// ChildResult is one child in the combined receipt.
type ChildResult struct {
	Name        string            `json:"name"`
	GPU         string            `json:"gpu,omitempty"`
	Params      map[string]string `json:"params,omitempty"`
	RunID       string            `json:"run_id"`
	Outcome     receipt.Outcome   `json:"outcome"`
	Error       string            `json:"error,omitempty"`
	EstimateUSD float64           `json:"estimate_usd"`
	ChargedUSD  *float64          `json:"charged_usd,omitempty"`
	Cleanup     bool              `json:"cleanup_confirmed"`
	Unconfirmed []int64           `json:"unconfirmed_instance_ids"`
	EvidenceDir string            `json:"evidence_dir"`
}

// ManyReceipt is the combined receipt.
type ManyReceipt struct {
	Schema      string          `json:"schema"`
	V           int             `json:"v"`
	Kind        string          `json:"kind"` // matrix or sweep
	Workflow    string          `json:"workflow"`
	Outcome     receipt.Outcome `json:"outcome"` // passed or failed
	Pass        string          `json:"pass"`    // all or any
	Concurrency int             `json:"concurrency"`
	BudgetUSD   float64         `json:"budget_usd,omitempty"`
	Children    []ChildResult   `json:"children"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	FinishedAt  time.Time       `json:"finished_at,omitzero"`
}

// runMany drives the children with at most concurrency at once and, when
// budget > 0, one ledger across them: each child reserves its worst case
// at approval, and one that would pass the budget is refused there.
func runMany(ctx context.Context, f *Factory, o *WorkflowOptions, kind, workflow string, specs []childSpec, concurrency int, budget float64, pass string) (*ManyReceipt, error) {
	if concurrency <= 0 {
		concurrency = len(specs)
	}
	if pass == "" {
		pass = "all"
	}
	m, err := f.Marketplace(ctx) // once, before the children share it
	if err != nil {
		return nil, err
	}
	// The children tear down together (a Ctrl-C ends them all): their
	// destroys, each a run's own, travel together in bulk calls.
	grouped := lifecycle.CoalesceDestroys(m)
	ledger := teamstate.NewMemory(nil)
	env := cienv.Detect(f.Getenv)
	engines := make([]*lifecycle.Scope, len(specs))
	// Engines are built one by one (the factory is not for concurrent
	// set-up); they run concurrently.
	for i, s := range specs {
		co := *o
		co.team = nil
		if o.EvidenceDir != "" {
			co.EvidenceDir = filepath.Join(o.EvidenceDir, s.Name)
		}
		var e *lifecycle.Scope
		var err error
		if workflow == "train" {
			e, err = trainEngineFor(ctx, f, &co, s.Cfg)
		} else {
			e, err = newEngine(ctx, f, &co, s.Cfg, env)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, s.Name, err)
		}
		if e.Market == provider.Market(m) { // not a market of its own (a team's fence)
			e.Market = grouped
		}
		if budget > 0 {
			inner, eng := e.Approve, e
			e.Approve = func(p lifecycle.Plan) (bool, error) {
				ask := p.WorstCase
				if p.CeilingDPH > p.TotalDPH && p.TotalDPH > 0 {
					ask *= p.CeilingDPH / p.TotalDPH
				}
				id := eng.State().RunID
				err := team.Reserve(context.Background(), ledger, time.Now(), id, kind, ask, budget)
				if errors.Is(err, team.ErrOverBudget) {
					return false, &lifecycle.StepError{Step: "approve", Outcome: lifecycle.OutcomeBudget, Err: fmt.Errorf("the %s's one budget: %w", kind, err)}
				}
				if err != nil {
					return false, err
				}
				return inner(p)
			}
		}
		engines[i] = e
	}
	mr := &ManyReceipt{Schema: ManySchema, V: 1, Kind: kind, Workflow: workflow, Pass: pass, Concurrency: concurrency, BudgetUSD: budget,
		Children: make([]ChildResult, len(specs)), StartedAt: time.Now().UTC()}
	var mu sync.Mutex
	var errs []error
	g := errgroup.Group{}
	g.SetLimit(concurrency)
	for i, e := range engines {
		g.Go(func() error {
			var r *receipt.Receipt
			var err error
			if workflow == "train" {
				r, err = trainflow.Run(ctx, e)
			} else {
				r, err = ci.Run(ctx, e)
			}
			c := ChildResult{Name: specs[i].Name, GPU: specs[i].GPU, Params: specs[i].Params, Unconfirmed: []int64{}}
			if r != nil && budget > 0 && len(r.Cleanup.Unconfirmed) == 0 {
				// Settled: the run's spend replaces its reservation, so the
				// children after it may use what it did not.
				spent := team.Settlement{USD: r.Cost.EstimateUSD, Basis: team.BasisEstimate}
				if r.Cost.ChargedUSD != nil {
					spent = team.Settlement{USD: max(spent.USD, *r.Cost.ChargedUSD), Basis: team.BasisCharges}
				}
				if _, err := team.Settle(context.Background(), ledger, team.Period(mr.StartedAt), r.RunID, spent, time.Now()); err != nil {
					f.IO.Infof("%s %s: its spend was not settled in the %s's budget (%v); its reservation stands", kind, specs[i].Name, kind, err)
				}
			}
			if r != nil {
				c.RunID, c.Outcome, c.EstimateUSD, c.ChargedUSD = r.RunID, r.Outcome, r.Cost.EstimateUSD, r.Cost.ChargedUSD
				c.Cleanup, c.EvidenceDir = r.Cleanup.Confirmed, r.EvidenceDir
				for _, id := range r.Cleanup.Unconfirmed {
					c.Unconfirmed = append(c.Unconfirmed, int64(id))
				}
			}
			if err != nil {
				c.Error = f.IO.Redactor().String(err.Error())
				if c.Outcome == "" {
					c.Outcome = lifecycle.Outcome(err)
				}
				f.IO.Infof("%s %s: %s", kind, specs[i].Name, c.Error)
			} else {
				f.IO.Infof("%s %s: %s (run %s)", kind, specs[i].Name, c.Outcome, c.RunID)
			}
			mu.Lock()
			mr.Children[i] = c
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil { // each child's own error is in errs: none comes back here
		errs = append(errs, err)
	}
	mr.FinishedAt = time.Now().UTC()
	passed := 0
	for _, c := range mr.Children {
		if c.Outcome == lifecycle.OutcomePassed {
			passed++
		}
	}
	ok := passed == len(specs) || (pass == "any" && passed > 0)
	mr.Outcome = map[bool]receipt.Outcome{true: lifecycle.OutcomePassed, false: lifecycle.OutcomeFailed}[ok]
	err = nil
	// A cleanup that is not confirmed always fails the step, whatever pass says.
	for _, e := range errs {
		if errors.As(e, new(*lifecycle.CleanupError)) || !ok {
			err = errors.Join(err, e)
		}
	}
	return mr, err
}

// writeManyReceipt prints the combined receipt (stdout with --json) and
// writes it beside the children's evidence.
func writeManyReceipt(f *Factory, o *WorkflowOptions, cfg *config.Config, mr *ManyReceipt) error {
	b, err := json.MarshalIndent(mr, "", "  ")
	if err != nil {
		return err
	}
	b = f.IO.Redactor().JSON(b)
	dir := o.EvidenceDir
	if dir == "" {
		dir = cfg.EvidenceDir
		if dir == "" {
			dir = "vastrun-evidence"
		}
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		p := filepath.Join(dir, mr.Kind+"-receipt.json")
		if err := f.sink(cfg).WriteJSON(p, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write the combined receipt: %w", err)
		}
		f.IO.Infof("%s: %s, %d runs; combined receipt in %s", mr.Kind, mr.Outcome, len(mr.Children), p)
	}
	if f.JSON {
		_, err = f.IO.Out.Write(append(b, '\n'))
		return err
	}
	var out strings.Builder
	for _, c := range mr.Children {
		cost := fmt.Sprintf("est $%.4f", c.EstimateUSD)
		if c.ChargedUSD != nil {
			cost = fmt.Sprintf("charged $%.4f", *c.ChargedUSD)
		}
		fmt.Fprintf(&out, "%s\t%s\t%s\t%s\tcleanup confirmed: %v\n", c.Name, c.RunID, c.Outcome, cost, c.Cleanup)
	}
	_, err = io.WriteString(f.IO.Out, out.String())
	return err
}

// maybeMatrix runs `vastrun ci` as a GPU matrix when the config has
// gpu.matrix; done reports whether it did.
func maybeMatrix(ctx context.Context, f *Factory, o *WorkflowOptions) (done bool, err error) {
	cfg, err := o.loadConfig()
	if err != nil || len(cfg.GPU.Matrix) == 0 {
		return false, nil // the single-run path reports config errors
	}
	env := cienv.Detect(f.Getenv)
	if ok, err := checkTrust(f, o, env); !ok || err != nil {
		return true, err
	}
	var specs []childSpec
	for _, m := range cfg.GPU.Matrix {
		c, err := o.loadConfig()
		if err != nil {
			return true, err
		}
		c.GPU.Models, c.GPU.Matrix = []string{m}, nil
		if _, err := checkBeforeRenting(ctx, f, c, "ci"); err != nil {
			return true, fmt.Errorf("gpu.matrix %s: %w", m, err)
		}
		specs = append(specs, childSpec{Name: m, GPU: m, Cfg: c})
	}
	mr, runErr := runMany(ctx, f, o, "matrix", "ci", specs, len(specs), 0, cfg.GPU.MatrixPass)
	if mr == nil {
		return true, runErr
	}
	if err := writeManyReceipt(f, o, cfg, mr); err != nil && runErr == nil {
		return true, err
	}
	return true, runErr
}
