package spec

import (
	"sort"
	"time"

	"github.com/vastrun/vastrun/internal/config"
)

// What train.on_outbid may say (the frozen TrainSpec.OnOutbid).
const (
	OnOutbidReplace = config.OnOutbidReplace
	OnOutbidRebid   = config.OnOutbidRebid
	OnOutbidWait    = config.OnOutbidWait
)

// Facts are what a manifest records about the run itself rather than its
// configuration: they are never a difference on resume (see [Diff]).
type Facts struct {
	RunID, Label, Workflow string
	Commit, CIRun          string
	EvidenceDir            string
	EvidenceURI            string // evidence.uri, already expanded
	CreatedAt              time.Time
}

// Build is the one place a configuration becomes a spec: every section
// the configuration has is filled, and the run's workflow then drops the
// sections it does not own. Nothing after the freeze reads c.
func Build(c *config.Config, f Facts) Manifest {
	env := map[string]string{}
	names := make([]string, 0, len(c.Env))
	for k, v := range c.Env {
		env[k] = v
		names = append(names, k)
	}
	if len(env) == 0 {
		env = nil
	}
	m := Manifest{
		Schema: SchemaV2, RunID: f.RunID, Label: f.Label, Workflow: f.Workflow,
		Commit: f.Commit, CIRun: f.CIRun, Image: c.Image, Test: c.Test,
		Upload: c.Upload, Policy: c.Policy(), MaxSpendUSD: c.Budget.MaxSpend,
		ReadyDeadline: c.Timeouts.Ready.String(), JobTimeout: c.Timeouts.Job.String(), TeardownLimit: c.Timeouts.Teardown.String(),
		EvidenceDir: f.EvidenceDir, EvidenceURI: f.EvidenceURI, EnvNames: sorted(names), SecretNames: sorted(c.Secrets), CreatedAt: f.CreatedAt,
		Gate: c.Gate, Paths: c.Paths, Env: env, Workdir: c.Workdir, WorkdirMaxMB: c.WorkdirMaxMB, MinFreeDiskGB: c.Verify.MinFreeDiskGB,
		HeartbeatTTL: c.Timeouts.HeartbeatTTL.String(),
	}
	if l := c.ImageLogin; l.IsSet() {
		m.ImageLogin = &ImageLogin{Registry: l.Registry, UserEnv: l.UserEnv, TokenEnv: l.TokenEnv}
	}
	if c.IsTrain() {
		t := c.Train
		m.Train = &TrainSpec{Command: t.Command, DatasetVersion: t.DatasetVersion, Seed: t.Seed, CheckpointDir: t.CheckpointDir,
			Cadence: t.Cadence, CheckpointURI: RunScoped(t.CheckpointURI, f.RunID), OutputDir: t.OutputDir, OutputURI: RunScoped(t.OutputURI, f.RunID),
			Keep: t.Keep, RuntimeDeadline: t.RuntimeDeadline.String(), HeartbeatTTL: t.HeartbeatTTL.String(),
			Poll: Duration(t.Poll), MaxAttempts: t.MaxAttempts, QuietPeriod: Duration(t.QuietPeriod), CheckpointFile: t.CheckpointFile,
			CheckpointCheck: t.CheckpointCheck, StepFrom: t.StepFrom, RequireResume: t.RequireResume, OnOutbid: t.OnOutbid, OutbidWait: Duration(t.OutbidWait)}
	}
	if c.IsCanary() {
		k := c.Canary
		m.Canary = &CanarySpec{Unit: k.Unit, Smoke: k.Smoke, ExpectExit: k.ExpectExit, ExpectFields: k.ExpectFields, IgnoreFields: k.IgnoreFields,
			CUDACheck: k.CUDACheck, Ports: k.Ports, HealthURL: k.HealthURL, EnvNames: k.EnvNames, HealthTimeout: Duration(k.HealthTimeout),
			Request: CanaryRequest{Command: k.Request.Command, Method: k.Request.Method, URL: k.Request.URL, Headers: k.Request.Headers,
				Body: k.Request.Body, ExpectStatus: k.Request.ExpectStatus},
			Timeouts:    CanaryTimeouts{Unit: Duration(k.Timeouts.Unit), Smoke: Duration(k.Timeouts.Smoke), Stop: Duration(k.Timeouts.Stop)},
			Compare:     CanaryCompare{Tolerance: k.Compare.Tolerance, Ignore: k.Compare.Ignore},
			ImageSource: k.ImageSource, Containerfile: k.Containerfile}
	}
	if c.Timeouts.PullStall > 0 {
		m.PullStall = c.Timeouts.PullStall.String()
	}
	m.Derive()
	return m
}

// HostTime is how long after renting the run may still need its host, at
// worst, from the manifest's frozen durations: the ready deadline, the
// job timeout and the teardown limit, or for training its runtime deadline
// and the teardown limit (0 without one: open-ended training outlives any
// host and is replaced, not bounded here). The policy rejects offers whose
// host leaves sooner (vast-api.md §12.4: no rental outlives its host's end
// date, and an expired instance cannot restart).
func HostTime(m Manifest) time.Duration {
	teardown := ParseDuration(m.TeardownLimit)
	if m.Train != nil {
		if rt := m.Train.Runtime(); rt > 0 {
			return rt + teardown
		}
		return 0
	}
	return ParseDuration(m.ReadyDeadline) + ParseDuration(m.JobTimeout) + teardown
}

// FillV1 upgrades a manifest frozen as v1 (by an older vastrun) for a
// resume: the fields v1 did not freeze are taken from now (today's
// configuration), and their names are returned so the caller can journal
// them. A v2 manifest is returned as it is.
func FillV1(frozen, now Manifest) (Manifest, []string) {
	if frozen.Schema != SchemaV1 {
		return frozen, nil
	}
	var filled []string
	fill := func(name string, set bool, apply func()) {
		if set {
			apply()
			filled = append(filled, name)
		}
	}
	fill("gate", now.Gate != nil, func() { frozen.Gate = now.Gate })
	fill("paths", now.Paths != nil, func() { frozen.Paths = now.Paths })
	fill("env", now.Env != nil, func() { frozen.Env = now.Env })
	fill("workdir", now.Workdir != "", func() { frozen.Workdir, frozen.WorkdirMaxMB = now.Workdir, now.WorkdirMaxMB })
	fill("verify_min_free_disk_gb", now.MinFreeDiskGB != 0, func() { frozen.MinFreeDiskGB = now.MinFreeDiskGB })
	fill("image_login", now.ImageLogin != nil, func() { frozen.ImageLogin = now.ImageLogin })
	fill("canary", now.Canary != nil, func() { frozen.Canary = now.Canary })
	if frozen.Train != nil && now.Train != nil {
		t, n := *frozen.Train, now.Train
		t.Poll, t.MaxAttempts, t.QuietPeriod, t.CheckpointFile = n.Poll, n.MaxAttempts, n.QuietPeriod, n.CheckpointFile
		t.CheckpointCheck, t.StepFrom, t.OnOutbid, t.OutbidWait = n.CheckpointCheck, n.StepFrom, n.OnOutbid, n.OutbidWait
		frozen.Train = &t
		filled = append(filled, "train (poll, max_attempts, quiet_period, checkpoint_file, checkpoint_check, step_from, on_outbid, outbid_wait)")
	}
	return frozen, filled
}

func sorted(s []string) []string {
	if s == nil {
		return nil
	}
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
