package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// The workflow commands in the gh shape: the parsing, captured through runF.

func TestNewCmdWorkflows(t *testing.T) {
	type parsed struct {
		wf       WorkflowOptions
		instance int64
		script   string
		runID    string
		accept   bool
		ttl      time.Duration
	}
	build := map[string]func(*parsed) *cobra.Command{
		"ci": func(p *parsed) *cobra.Command {
			return NewCmdCI(opsFactory(), func(_ context.Context, o *CIOptions) error { p.wf = o.Workflow; return nil })
		},
		"up": func(p *parsed) *cobra.Command {
			return NewCmdUp(opsFactory(), func(_ context.Context, o *UpOptions) error { p.wf, p.ttl = o.Workflow, o.TTL; return nil })
		},
		"exec": func(p *parsed) *cobra.Command {
			return NewCmdExec(opsFactory(), func(_ context.Context, o *ExecOptions) error {
				p.wf, p.instance, p.script = o.Workflow, o.Instance, o.Script
				return nil
			})
		},
		"train": func(p *parsed) *cobra.Command {
			return NewCmdTrain(opsFactory(), func(_ context.Context, o *TrainOptions) error { p.wf = o.Workflow; return nil })
		},
		"resume": func(p *parsed) *cobra.Command {
			return NewCmdResume(opsFactory(), func(_ context.Context, o *ResumeOptions) error {
				p.wf, p.runID, p.accept = o.Workflow, o.RunID, o.AcceptConfigChange
				return nil
			})
		},
	}
	for _, tc := range []struct {
		cmd, args string
		check     func(p parsed) bool
	}{
		{"ci", "--yes -f ci.yaml --evidence-dir ev --base origin/main --allow-pull-request-target", func(p parsed) bool {
			return p.wf.Yes && p.wf.ConfigPath == "ci.yaml" && p.wf.EvidenceDir == "ev" && p.wf.Base == "origin/main" && p.wf.AllowPRTarget
		}},
		{"ci", "", func(p parsed) bool { return !p.wf.Yes && p.wf.ConfigPath == "vastrun.yaml" }},
		{"up", "-y --state-dir st", func(p parsed) bool { return p.wf.Yes && p.wf.StateDir == "st" && p.ttl == 30*time.Minute }},
		{"up", "-y --ttl 2h", func(p parsed) bool { return p.ttl == 2*time.Hour }},
		{"exec", "--instance 42 -- nvidia-smi -L", func(p parsed) bool { return p.instance == 42 && p.script == "nvidia-smi -L" }},
		{"exec", "--run mx1abc -- python -m pytest", func(p parsed) bool { return p.wf.RunID == "mx1abc" && p.script == "python -m pytest" }},
		{"train", "--yes -f train.yaml", func(p parsed) bool { return p.wf.Yes && p.wf.ConfigPath == "train.yaml" }},
		{"resume", "mx1abc --yes --accept-config-change", func(p parsed) bool { return p.runID == "mx1abc" && p.accept && p.wf.Yes }},
		{"resume", "--yes", func(p parsed) bool { return p.runID == "" && !p.accept }},
	} {
		t.Run(tc.cmd+" "+tc.args, func(t *testing.T) {
			var p parsed
			cmd := build[tc.cmd](&p)
			cmd.SetArgs(strings.Fields(tc.args))
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if !tc.check(p) {
				t.Fatalf("parsed %+v", p)
			}
		})
	}
	// Arguments a command does not take are usage errors, before runF.
	// A lease too short to survive a slow link is refused too.
	for _, tc := range []struct{ cmd, args string }{{"ci", "extra"}, {"exec", ""}, {"resume", "a b"}, {"up", "--ttl 10s"}, {"up", "--ttl 0"}} {
		var p parsed
		cmd := build[tc.cmd](&p)
		cmd.SetArgs(strings.Fields(tc.args))
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.Execute()
		called := p != (parsed{})
		if ue := (*UsageError)(nil); !errors.As(err, &ue) || called {
			t.Errorf("%s %q: err %v (runF called: %v), want a usage error", tc.cmd, tc.args, err, called)
		}
	}
}
