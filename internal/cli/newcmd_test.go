package cli

import (
	"context"
	"errors"
	"io"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/agent"
)

// The remaining commands in the gh shape: each table gives arguments and
// checks the options they become, captured through runF, or the usage
// error (with its hint) that bad input gets before runF is reached. No
// simulator, no network, no state directory.

// parse builds a command with a capturing runF and runs it on args. The
// options are nil when runF was not reached.
func parse[O any](build func(*Factory, func(context.Context, *O) error) *cobra.Command, f *Factory, args ...string) (*O, error) {
	var got *O
	cmd := build(f, func(_ context.Context, o *O) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetFlagErrorFunc(flagError)
	return got, cmd.Execute()
}

// badInput checks that err is a usage error matching want, with a hint
// matching hint ("" for none required), and that runF was not reached.
func badInput[O any](t *testing.T, got *O, err error, want, hint string) {
	t.Helper()
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("err %v, want a usage error %q", err, want)
	}
	if !regexp.MustCompile(want).MatchString(err.Error()) {
		t.Fatalf("err %q, want %q", err, want)
	}
	if hint != "" && !regexp.MustCompile(hint).MatchString(ue.Hint) {
		t.Fatalf("hint %q, want %q", ue.Hint, hint)
	}
	if got != nil {
		t.Fatalf("runF was called despite the bad input: %+v", got)
	}
}

func TestNewCmdCanary(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   func(o *CanaryOptions) bool
		bad  string
	}{
		{args: []string{"--yes", "-f", "c.yaml"}, ok: func(o *CanaryOptions) bool {
			return o.Workflow.Yes && o.Workflow.ConfigPath == "c.yaml" && !o.Resolve && !o.Publish && !o.AllowLocalFailure
		}},
		{args: nil, ok: func(o *CanaryOptions) bool { return o.Workflow.ConfigPath == "vastrun.yaml" && !o.Workflow.Yes }},
		{args: []string{"--resolve", "--insecure-registry", "--allow-local-failure"}, ok: func(o *CanaryOptions) bool {
			return o.Resolve && o.InsecureRegistry && o.AllowLocalFailure
		}},
		{args: []string{"--publish", "--publish-source", "build/oci", "--publish-repo", "reg.example/app", "--allow-dirty", "--write"}, ok: func(o *CanaryOptions) bool {
			p := o.PublishOpts
			return o.Publish && p.Source == "build/oci" && p.Repo == "reg.example/app" && p.AllowDirty && p.Write
		}},
		{args: []string{"--state", "s3://b/p", "--evidence-dir", "ev", "--base", "main"}, ok: func(o *CanaryOptions) bool {
			return o.Workflow.State == "s3://b/p" && o.Workflow.EvidenceDir == "ev" && o.Workflow.Base == "main"
		}},
		{args: []string{"--publish", "--resolve"}, bad: `(?i)none of the others can be|if any flags in the group`},
		{args: []string{"extra"}, bad: `unknown command "extra"`},
	} {
		got, err := parse(NewCmdCanary, opsFactory(), tc.args...)
		if tc.bad != "" {
			if err == nil || !regexp.MustCompile(tc.bad).MatchString(err.Error()) || got != nil {
				t.Errorf("%q: err %v (runF called: %v), want %q", tc.args, err, got != nil, tc.bad)
			}
			continue
		}
		if err != nil || !tc.ok(got) {
			t.Errorf("%q: err %v, options %+v", tc.args, err, got)
		}
	}
}

func TestNewCmdCanaryInitAndValidate(t *testing.T) {
	o, err := parse(NewCmdCanaryInit, opsFactory(), "--dir", "repo", "-f", "c.yaml", "--write")
	if err != nil || o.Dir != "repo" || o.File != "c.yaml" || !o.Write {
		t.Fatalf("init: %v %+v", err, o)
	}
	o, err = parse(NewCmdCanaryInit, opsFactory())
	if err != nil || o.Dir != "." || o.File != "vastrun.yaml" || o.Write {
		t.Fatalf("init defaults: %v %+v", err, o)
	}
	o, err = parse(NewCmdCanaryInit, opsFactory(), "extra")
	badInput(t, o, err, `unknown command "extra"`, `--help`)

	v, err := parse(NewCmdCanaryValidate, opsFactory(), "-f", "c.yaml")
	if err != nil || v.File != "c.yaml" {
		t.Fatalf("validate: %v %+v", err, v)
	}
	v, err = parse(NewCmdCanaryValidate, opsFactory(), "--nope")
	badInput(t, v, err, `unknown flag: --nope`, `--help`)
}

func TestNewCmdReport(t *testing.T) {
	o, err := parse(NewCmdReport, opsFactory(), "mx1abc", "--html", "r.html", "--state-dir", "st", "-f", "v.yaml")
	if err != nil || o.RunID != "mx1abc" || o.HTMLPath != "r.html" || o.Workflow.StateDir != "st" || o.Workflow.ConfigPath != "v.yaml" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = parse(NewCmdReport, opsFactory())
	if err != nil || o.RunID != "" || o.HTMLPath != "" || !o.Workflow.allowMissingConfigs {
		t.Fatalf("defaults: %v %+v", err, o)
	}
	o, err = parse(NewCmdReport, opsFactory(), "a", "b")
	badInput(t, o, err, `accepts at most 1 arg`, `--help`)
}

func TestNewCmdBudget(t *testing.T) {
	thisMonth := regexp.MustCompile(`^\d{4}-\d{2}$`)
	for _, tc := range []struct {
		args      []string
		ok        func(o *BudgetOptions) bool
		bad, hint string
	}{
		{args: []string{"--state", "s3://team/v"}, ok: func(o *BudgetOptions) bool {
			return o.Team.State == "s3://team/v" && thisMonth.MatchString(o.Period) && !o.SetLimitGiven
		}},
		{args: []string{"--period", "2026-11", "-f", "t.yaml"}, ok: func(o *BudgetOptions) bool {
			return o.Period == "2026-11" && o.Team.ConfigPath == "t.yaml"
		}},
		// --set-limit 0 is given (no limit), unlike no --set-limit at all.
		{args: []string{"--set-limit", "0", "--yes"}, ok: func(o *BudgetOptions) bool { return o.SetLimitGiven && o.SetLimit == 0 && o.Team.Yes }},
		{args: []string{"--set-limit", "200", "-y", "--period", "2027-01"}, ok: func(o *BudgetOptions) bool { return o.SetLimitGiven && o.SetLimit == 200 }},
		{args: []string{"--set-limit", "200"}, bad: `changing the team's limit for \d{4}-\d{2} needs --yes`, hint: `--yes`},
		{args: []string{"--set-limit", "-1", "--yes"}, bad: `--set-limit -1: want 0`, hint: `--set-limit 200`},
		{args: []string{"--period", "december"}, bad: `--period "december": want YYYY-MM`, hint: `2026-12`},
		{args: []string{"extra"}, bad: `unknown command "extra"`, hint: `--help`},
	} {
		got, err := parse(NewCmdBudget, opsFactory(), tc.args...)
		if tc.bad != "" {
			badInput(t, got, err, tc.bad, tc.hint)
			continue
		}
		if err != nil || !tc.ok(got) {
			t.Errorf("%q: err %v, options %+v", tc.args, err, got)
		}
	}
}

func TestNewCmdSweep(t *testing.T) {
	o, err := parse(NewCmdSweep, opsFactory(), "-f", "s.yaml", "--yes", "--evidence-dir", "ev", "--state-dir", "st", "--state", "s3://b/p")
	if err != nil || o.SweepPath != "s.yaml" || !o.Workflow.Yes || o.Workflow.EvidenceDir != "ev" || o.Workflow.StateDir != "st" || o.Workflow.State != "s3://b/p" {
		t.Fatalf("%v %+v", err, o)
	}
	o, err = parse(NewCmdSweep, opsFactory())
	if err != nil || o.SweepPath != "sweep.yaml" || o.Workflow.Yes {
		t.Fatalf("defaults: %v %+v", err, o)
	}
	// The run's config comes from sweep.yaml, never from a flag here.
	o, err = parse(NewCmdSweep, opsFactory(), "--base", "main")
	badInput(t, o, err, `unknown flag: --base`, `--help`)
}

func TestNewCmdCheckpoint(t *testing.T) {
	for name, build := range map[string]func(*Factory, func(context.Context, *CheckpointOptions) error) *cobra.Command{
		"commit": NewCmdCheckpointCommit, "restore": NewCmdCheckpointRestore,
	} {
		o, err := parse(build, opsFactory(), "--store", "s3://b/p", "--dir", "ck", "--step", "200")
		if err != nil || o.Store != "s3://b/p" || o.Dir != "ck" || o.Step != 200 {
			t.Errorf("%s: %v %+v", name, err, o)
		}
		o, err = parse(build, opsFactory(), "--dir", "ck")
		if err == nil || !regexp.MustCompile(`required flag\(s\) "store" not set`).MatchString(err.Error()) || o != nil {
			t.Errorf("%s without --store: %v (runF called: %v)", name, err, o != nil)
		}
		o, err = parse(build, opsFactory(), "--store", "s3://b/p", "--dir", "ck", "--step", "two")
		badInput(t, o, err, `invalid argument "two" for "--step"`, `--help`)
	}
}

func TestNewCmdAgentWatchFamily(t *testing.T) {
	builds := map[string]func(*Factory, func(context.Context, *AgentWatchOptions) error) *cobra.Command{
		"watch": NewCmdAgentWatch, "start": NewCmdAgentStart,
	}
	common := []string{"--store", "s3://b/ck", "--dir", "ck", "--keep", "2", "--heartbeat", "hb", "--ttl", "90s", "--status", "st.json",
		"--poll", "2s", "--quiet", "5s", "--files", "model.pt", "--check", "python check.py", "--step-from", "json:step",
		"--deadline", "2026-12-01T10:00:00Z", "--command", "python train.py"}
	for name, build := range builds {
		args := common
		if name == "watch" { // watch has --once and no --command
			args = append(append([]string{}, common[:len(common)-2]...), "--once")
		}
		o, err := parse(build, opsFactory(), args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := AgentWatchOptions{Spec: agent.WatchSpec{Store: "s3://b/ck", Dir: "ck", Keep: 2, Heartbeat: "hb", TTL: agent.Duration(90 * time.Second), Status: "st.json",
			Poll: agent.Duration(2 * time.Second), Quiet: agent.Duration(5 * time.Second), Files: "model.pt", Check: "python check.py", StepFrom: "json:step",
			Deadline: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}}
		if name == "watch" {
			want.Once = true
		} else {
			want.Command = "python train.py"
		}
		gotCmp := *o
		gotCmp.f, gotCmp.deadline = nil, ""
		if !reflect.DeepEqual(gotCmp, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, gotCmp, want)
		}
		// Each command has its own defaults (the help's), not another's.
		d, err := parse(build, opsFactory(), map[string][]string{"start": {"--command", "x"}}[name]...)
		if err != nil || d.Spec.Dir != "checkpoints" || d.Spec.Keep != 3 || d.Spec.Poll != agent.Duration(5*time.Second) || !d.Spec.Deadline.IsZero() {
			t.Errorf("%s defaults: %v %+v", name, err, d)
		}
		cmdFlag := []string{"--command", "x"}
		if name == "watch" {
			cmdFlag = nil
		}
		o, err = parse(build, opsFactory(), append([]string{"--step-from", "lines"}, cmdFlag...)...)
		badInput(t, o, err, `--step-from`, `json:FIELD or regex:RE`)
		o, err = parse(build, opsFactory(), append([]string{"--deadline", "tomorrow"}, cmdFlag...)...)
		badInput(t, o, err, `--deadline`, `RFC 3339`)
	}
	o, err := parse(NewCmdAgentStart, opsFactory(), "--store", "s3://b/ck")
	badInput(t, o, err, `--command is required`, `--command 'python train.py'`)
	o, err = parse(NewCmdAgentStart, opsFactory(), "--command", "  ")
	badInput(t, o, err, `--command is required`, ``)
}

func TestNewCmdAgentOthers(t *testing.T) {
	s, err := parse(NewCmdAgentStatus, opsFactory(), "--json", "--touch-heartbeat", "--log-offset", "10", "--log-max", "4096", "--metrics-offset", "7")
	if err != nil || s.Req != (agent.StatusRequest{TouchHeartbeat: true, LogOffset: 10, LogMax: 4096, MetricsOffset: 7}) {
		t.Fatalf("status: %v %+v", err, s)
	}
	r, err := parse(NewCmdAgentRestore, opsFactory(), "--json", "--store", "s3://b/ck")
	if err != nil || r.Store != "s3://b/ck" || r.Dir != agent.ResumeDir || r.Files != "" {
		t.Fatalf("restore: %v %+v", err, r)
	}
	u, err := parse(NewCmdAgentUpload, opsFactory(), "--store", "s3://b/out")
	if err != nil || u.Store != "s3://b/out" || u.Dir != "outputs" {
		t.Fatalf("upload: %v %+v", err, u)
	}
	m, err := parse(NewCmdAgentManifest, opsFactory(), "--json", "out", "ck/200")
	if err != nil || !reflect.DeepEqual(m.Paths, []string{"out", "ck/200"}) {
		t.Fatalf("manifest: %v %+v", err, m)
	}
	m, err = parse(NewCmdAgentManifest, opsFactory())
	badInput(t, m, err, `requires at least 1 arg`, `--help`)
	l, err := parse(NewCmdAgentRetireLost, opsFactory(), "--json")
	if err != nil || l == nil {
		t.Fatalf("retire-lost: %v", err)
	}
	l, err = parse(NewCmdAgentRetireLost, opsFactory(), "extra")
	badInput(t, l, err, `unknown command "extra"`, ``)
}

func TestNewCmdRuns(t *testing.T) {
	o, err := parse(NewCmdRuns, opsFactory(), "-f", "v.yaml", "--state-dir", "st")
	if err != nil || o.ConfigPath != "v.yaml" || o.StateDir != "st" || o.All || o.Mine || o.Now == nil {
		t.Fatalf("%v %+v", err, o)
	}
	// --all reaches runF too; the team listing gets the same config.
	o, err = parse(NewCmdRuns, opsFactory(), "--all", "--mine", "--state", "s3://b/p", "-f", "v.yaml")
	if err != nil || !o.All || !o.Mine || o.Team.State != "s3://b/p" || o.Team.ConfigPath != "v.yaml" {
		t.Fatalf("--all: %v %+v", err, o)
	}
	o, err = parse(NewCmdRuns, opsFactory(), "mx1abc")
	badInput(t, o, err, `unknown command "mx1abc"`, `--help`)
}

func TestNewCmdSimServe(t *testing.T) {
	o, err := parse(NewCmdSimServe, opsFactory(), "--listen", "127.0.0.1:8080", "--offers", "50", "--seed", "7", "--speed", "10",
		"--sim-key", "k", "--ready-file", "r.json", "--dir", "d", "--instances", "3")
	want := SimServeOptions{Listen: "127.0.0.1:8080", Offers: 50, Seed: 7, Speed: 10, APIKey: "k", ReadyFile: "r.json", Dir: "d", Instances: 3}
	if err != nil {
		t.Fatal(err)
	}
	o.IO = nil
	if !reflect.DeepEqual(*o, want) {
		t.Fatalf("got %+v\nwant %+v", *o, want)
	}
	o, err = parse(NewCmdSimServe, opsFactory(), "--speed", "0")
	badInput(t, o, err, `--speed must be positive`, `real second`)
	o, err = parse(NewCmdSimServe, opsFactory(), "--instances", "-2")
	badInput(t, o, err, `--instances must be 0 or more`, `--instances N`)
}

func TestNewCmdOffersBadInput(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		bad, hint string
	}{
		{[]string{"--limit", "0"}, `--limit must be positive`, `--limit 20`},
		{[]string{"--disk", "-1"}, `--disk must be positive`, `--disk 10`},
		{[]string{"--policy", "v.yaml", "num_gpus=1"}, `either a query or --policy`, `gpu: section`},
		{[]string{"--explain"}, `--explain needs --policy`, `--policy vastrun.yaml --explain`},
	} {
		o, err := parse(NewCmdOffers, opsFactory(), tc.args...)
		badInput(t, o, err, tc.bad, tc.hint)
	}
	o, err := parse(NewCmdOffers, opsFactory(), "--policy", "v.yaml", "--explain")
	if err != nil || o.PolicyFile != "v.yaml" || !o.Explain || o.Query != "" {
		t.Fatalf("--policy --explain: %v %+v", err, o)
	}
}

func TestNewCmdSmallCommands(t *testing.T) {
	f := opsFactory()
	f.JSON = true
	v, err := parse(NewCmdVersion, f)
	if err != nil || !v.JSON {
		t.Fatalf("version: %v %+v", err, v)
	}
	v, err = parse(NewCmdVersion, f, "1.0")
	badInput(t, v, err, `unknown command "1.0"`, `--help`)

	l, err := parse(NewCmdLogs, opsFactory(), "mx1abc", "-f", "--file", "v.yaml", "--state-dir", "st")
	if err != nil || l.RunID != "mx1abc" || !l.Follow || l.ConfigPath != "v.yaml" || l.StateDir != "st" || l.Clock == nil {
		t.Fatalf("logs: %v %+v", err, l)
	}
	l, err = parse(NewCmdLogs, opsFactory(), "a", "b")
	badInput(t, l, err, `accepts at most 1 arg`, `--help`)

	i, err := parse(NewCmdInit, opsFactory(), "train", "-f", "t.yaml", "--image", "ghcr.io/a/b:v1", "--force", "--insecure-registry")
	if err != nil || i.Kind != "train" || i.File != "t.yaml" || i.Image != "ghcr.io/a/b:v1" || !i.Force || !i.Insecure || i.Resolve == nil {
		t.Fatalf("init: %v %+v", err, i)
	}
	i, err = parse(NewCmdInit, opsFactory())
	if err != nil || i.Kind != "ci" || i.File != "vastrun.yaml" || i.Force {
		t.Fatalf("init defaults: %v %+v", err, i)
	}
	i, err = parse(NewCmdInit, opsFactory(), "canary")
	badInput(t, i, err, `vastrun init canary: unknown kind`, `vastrun canary init`)

	va, err := parse(NewCmdValidate, opsFactory(), "-f", "v.yaml", "--offline")
	if err != nil || va.ConfigPath != "v.yaml" || !va.Offline {
		t.Fatalf("validate: %v %+v", err, va)
	}

	p, err := parse(NewCmdPublish, opsFactory(), "--source", "app.tar", "--repo", "reg.example/app", "--allow-dirty", "--write", "--insecure-registry", "-f", "v.yaml")
	if err != nil || p.Source != "app.tar" || p.Repo != "reg.example/app" || !p.AllowDirty || !p.Write || !p.Insecure || p.ConfigPath != "v.yaml" {
		t.Fatalf("publish: %v %+v", err, p)
	}
	p, err = parse(NewCmdPublish, opsFactory(), "app.tar")
	badInput(t, p, err, `unknown command "app.tar"`, `--help`)
}

func TestNewCmdSSH(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   func(o *SSHOptions) bool
	}{
		{nil, func(o *SSHOptions) bool { return o.RunID == "" && len(o.Command) == 0 }},
		{[]string{"mx1abc"}, func(o *SSHOptions) bool { return o.RunID == "mx1abc" && len(o.Command) == 0 }},
		{[]string{"--", "nvidia-smi", "-L"}, func(o *SSHOptions) bool {
			return o.RunID == "" && reflect.DeepEqual(o.Command, []string{"nvidia-smi", "-L"})
		}},
		{[]string{"mx1abc", "-t", "--", "tail", "-f", "x"}, func(o *SSHOptions) bool {
			return o.RunID == "mx1abc" && o.ForcePTY && reflect.DeepEqual(o.Command, []string{"tail", "-f", "x"})
		}},
		{[]string{"-N", "-L", "6006:6006", "-L", "127.0.0.1:8080:127.0.0.1:8000"}, func(o *SSHOptions) bool {
			return o.NoCommand && len(o.Forwards) == 2 && o.Forwards[0] == Forward{Local: "127.0.0.1:6006", Remote: "127.0.0.1:6006"} &&
				o.Forwards[1] == Forward{Local: "127.0.0.1:8080", Remote: "127.0.0.1:8000"}
		}},
	} {
		o, err := parse(NewCmdSSH, opsFactory(), tc.args...)
		if err != nil || !tc.ok(o) {
			t.Errorf("%q: %v %+v", tc.args, err, o)
		}
	}
	for _, tc := range []struct {
		args      []string
		bad, hint string
	}{
		{[]string{"-N"}, `-N without -L`, `add -L`},
		{[]string{"-N", "-L", "80:80", "--", "ls"}, `-N forwards ports only`, `drop -N`},
		{[]string{"-L", "nope"}, `-L "nope"`, `-L 8000:8000`},
		{[]string{"a", "b"}, `at most one RUN before --`, `--help`},
	} {
		o, err := parse(NewCmdSSH, opsFactory(), tc.args...)
		badInput(t, o, err, tc.bad, tc.hint)
	}
}

// reap --team reaches runF too, with the shared flags handed to the team
// judgement; --at is not its business.
func TestNewCmdReapTeam(t *testing.T) {
	o, err := parse(NewCmdReap, opsFactory(), "--team", "--state", "s3://b/p", "--grace", "1m", "--label-prefix", "vastrun-acme-", "--yes", "-f", "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tm := o.Team
	if !tm.team || tm.prefix != "vastrun-acme-" || !tm.yes || tm.grace != time.Minute || tm.wf.State != "s3://b/p" || tm.wf.ConfigPath != "t.yaml" {
		t.Fatalf("team options %+v", tm)
	}
	o, err = parse(NewCmdReap, opsFactory())
	if err != nil || o.Team.team || o.Team.grace != 5*time.Minute || o.Team.wf.ConfigPath != "vastrun.yaml" {
		t.Fatalf("defaults: %v %+v", err, o.Team)
	}
}
