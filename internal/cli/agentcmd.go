package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/checkpoint"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/storage"
)

// The on-instance agent's commands. Each prints one JSON document on
// stdout (its --json flag is always on, kept so the controller's command
// lines stay explicit); the controller reads them as typed messages.

// NewCmdAgent builds `vastrun agent`, which runs on the instance.
func NewCmdAgent(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "The on-instance helper for training runs (started by vastrun train)",
		Long: `Runs on a training instance. It starts the workload itself (agent start),
commits its checkpoints, and answers the controller in typed, versioned JSON
(agent status --json). Storage credentials come from the standard AWS
variables in its environment; the dead-man switch destroys this instance
with CONTAINER_API_KEY and CONTAINER_ID against VASTRUN_API_URL.`,
	}
	cmd.AddCommand(NewCmdAgentWatch(f, nil), NewCmdAgentStart(f, nil), NewCmdAgentSupervise(f, nil), NewCmdAgentStatus(f, nil),
		NewCmdAgentRestore(f, nil), NewCmdAgentUpload(f, nil), NewCmdAgentManifest(f, nil), NewCmdAgentRetireLost(f, nil), NewCmdAgentHeartbeat(f, nil))
	return cmd
}

// alwaysJSON adds the --json flag the agent's commands accept and ignore.
func alwaysJSON(c *cobra.Command) {
	var on bool
	c.Flags().BoolVar(&on, "json", true, "print JSON (always on)")
}

// openCheckpoints opens the checkpoint store at uri.
func openCheckpoints(f *Factory, uri, prefix string) (checkpoint.Store, error) {
	s, err := storage.Open(uri, storage.Options{Getenv: f.Getenv})
	if err != nil {
		return checkpoint.Store{}, &UsageError{Err: err}
	}
	return checkpoint.Store{S: s, Prefix: prefix}, nil
}

// AgentWatchOptions are the checkpoint flags of `agent watch`, `agent
// start` and `agent supervise` (start hands its own to supervise).
type AgentWatchOptions struct {
	f                 *Factory
	Store, Dir        string
	Keep              int
	Heartbeat, Status string
	TTL, Poll, Quiet  time.Duration
	Deadline          time.Time // zero: none
	Files, Check      string
	StepFrom          string
	Once              bool   // watch only
	Command           string // start and supervise
	// SuperviseArgs (start) are the flags given, as `agent supervise`'s.
	SuperviseArgs []string
	deadline      string
}

func (o *AgentWatchOptions) addFlags(c *cobra.Command) {
	c.Flags().StringVar(&o.Store, "store", "", "checkpoint store URI (s3://bucket/prefix or file:///path)")
	c.Flags().StringVar(&o.Dir, "dir", "checkpoints", "local checkpoint directory the workload writes")
	c.Flags().IntVar(&o.Keep, "keep", 3, "committed checkpoints to keep, in the store and on this instance")
	c.Flags().StringVar(&o.Heartbeat, "heartbeat", "", "file the controller touches")
	c.Flags().DurationVar(&o.TTL, "ttl", 0, "destroy this instance when the heartbeat is older than this (0: never)")
	c.Flags().StringVar(&o.deadline, "deadline", "", "destroy this instance at this RFC 3339 time")
	c.Flags().StringVar(&o.Status, "status", "", "status file to write")
	c.Flags().DurationVar(&o.Poll, "poll", 5*time.Second, "how often to look")
	c.Flags().DurationVar(&o.Quiet, "quiet", 0, "also treat a step directory as complete when its files have not changed for this long and none is open for writing (0: only the .complete marker)")
	c.Flags().StringVar(&o.Files, "files", "", "single-file checkpoints saved in place (a path or glob relative to the login directory)")
	c.Flags().StringVar(&o.Check, "check", "", "command that must accept a snapshot (its path is appended) before it is committed")
	c.Flags().StringVar(&o.StepFrom, "step-from", "", "where a snapshot's step comes from: json:FIELD or regex:RE over the log (default: a counter)")
}

// fill checks the flags that have a syntax of their own.
func (o *AgentWatchOptions) fill(*cobra.Command, []string) error {
	if err := config.CheckStepFrom(o.StepFrom); err != nil {
		return &UsageError{Err: fmt.Errorf("--step-from: %w", err), Hint: "write json:FIELD or regex:RE (docs/config.md, train.step_from)"}
	}
	o.Deadline = time.Time{}
	if o.deadline != "" {
		t, err := time.Parse(time.RFC3339, o.deadline)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("--deadline: %w", err), Hint: "use RFC 3339, e.g. 2026-12-01T00:00:00Z"}
		}
		o.Deadline = t
	}
	return nil
}

// agentOptions are the watch loop's options, paths resolved under l.
func (o *AgentWatchOptions) agentOptions(l agent.Layout) (agent.Options, error) {
	cs, err := openCheckpoints(o.f, o.Store, "")
	if err != nil {
		return agent.Options{}, err
	}
	abs := func(p string) string {
		if p == "" {
			return ""
		}
		return l.Abs(p)
	}
	f := o.f
	return agent.Options{Checkpoints: cs, CheckpointDir: abs(o.Dir), Keep: o.Keep, HeartbeatFile: abs(o.Heartbeat), TTL: o.TTL, StatusFile: abs(o.Status),
		Poll: o.Poll, Clock: f.clock(), Log: f.IO.ErrOut, Once: o.Once, SelfDestroy: selfDestroy(f), Quiet: o.Quiet,
		Files: o.Files, Check: o.Check, StepFrom: o.StepFrom, LogFile: l.Abs(agent.LogFile), Home: l.Home, Deadline: o.Deadline}, nil
}

// watch runs the loop; a self-destroy is its job done (a failed destroy
// stays an error).
func watch(ctx context.Context, o agent.Options) error {
	err := agent.Watch(ctx, o)
	if errors.Is(err, agent.ErrSelfDestroyed) {
		return nil
	}
	return err
}

// NewCmdAgentWatch builds `vastrun agent watch`.
func NewCmdAgentWatch(f *Factory, runF func(context.Context, *AgentWatchOptions) error) *cobra.Command {
	opts := &AgentWatchOptions{f: f}
	c := &cobra.Command{
		Use:   "watch",
		Short: "Commit complete checkpoints as they appear; destroy this instance if the controller's heartbeat lapses",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, opts.fill, runF, runAgentWatch),
	}
	opts.addFlags(c)
	c.Flags().BoolVar(&opts.Once, "once", false, "commit what is complete, then exit")
	return c
}

func runAgentWatch(ctx context.Context, opts *AgentWatchOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	o, err := opts.agentOptions(l)
	if err != nil {
		return err
	}
	return watch(ctx, o)
}

// NewCmdAgentStart builds `vastrun agent start`.
func NewCmdAgentStart(f *Factory, runF func(context.Context, *AgentWatchOptions) error) *cobra.Command {
	opts := &AgentWatchOptions{f: f}
	c := &cobra.Command{
		Use:   "start",
		Short: "Start the workload under a detached agent that commits its checkpoints (never a second one)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(opts.Command) == "" {
				return &UsageError{Err: errors.New("--command is required"), Hint: "give the workload, e.g. --command 'python train.py' (run by /bin/sh -c in the login directory)"}
			}
			if err := opts.fill(cmd, args); err != nil {
				return err
			}
			opts.SuperviseArgs = []string{"agent", "supervise"}
			cmd.Flags().Visit(func(fl *pflag.Flag) {
				if fl.Name != "json" {
					opts.SuperviseArgs = append(opts.SuperviseArgs, "--"+fl.Name+"="+fl.Value.String())
				}
			})
			return nil
		}, runF, runAgentStart),
	}
	opts.addFlags(c)
	c.Flags().StringVar(&opts.Command, "command", "", "the workload, run by /bin/sh -c in the login directory")
	alwaysJSON(c)
	return c
}

func runAgentStart(_ context.Context, opts *AgentWatchOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	res, err := agent.Start(l, exe, opts.SuperviseArgs, os.Environ())
	if err != nil {
		return err
	}
	return json.NewEncoder(opts.f.IO.Out).Encode(res)
}

// NewCmdAgentSupervise builds the hidden `vastrun agent supervise`.
func NewCmdAgentSupervise(f *Factory, runF func(context.Context, *AgentWatchOptions) error) *cobra.Command {
	opts := &AgentWatchOptions{f: f}
	c := &cobra.Command{
		Use:    "supervise",
		Short:  "Run the workload and the watch loop (started by agent start)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE:   runCmd(opts, opts.fill, runF, runAgentSupervise),
	}
	opts.addFlags(c)
	c.Flags().StringVar(&opts.Command, "command", "", "the workload")
	return c
}

func runAgentSupervise(ctx context.Context, opts *AgentWatchOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	o, err := opts.agentOptions(l)
	if err != nil {
		return err
	}
	// fd 3 is the lock Start handed over: held by this process only,
	// never inherited by the workload, so it ends with the agent.
	syscall.CloseOnExec(3)
	sv := &agent.Supervisor{Layout: l, Command: opts.Command, Env: os.Environ(), Clock: opts.f.clock(), Ready: os.NewFile(4, "ready")}
	// The baseline of single-file checkpoints is taken before the
	// workload starts, so a restored file is not snapshot again.
	pre, err := agent.Prepare(o)
	if err != nil {
		return err
	}
	pid, exited, err := sv.Launch()
	if err != nil {
		return err
	}
	pre.WorkloadPID, pre.Exited = pid, exited
	pre.Finalized = func(int) { sv.Finalize() }
	return watch(ctx, pre)
}

// AgentStatusOptions are `vastrun agent status`'s flags.
type AgentStatusOptions struct {
	f     *Factory
	Touch bool
	// LogOffset, LogMax and MetricsOffset page the workload's output.
	LogOffset, LogMax, MetricsOffset int64
}

// NewCmdAgentStatus builds `vastrun agent status`.
func NewCmdAgentStatus(f *Factory, runF func(context.Context, *AgentStatusOptions) error) *cobra.Command {
	opts := &AgentStatusOptions{f: f}
	c := &cobra.Command{
		Use:   "status",
		Short: "Report the workload's state, checkpoints, resume proof, heartbeat age and disk (JSON, schema vastrun.agent.status v1)",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runAgentStatus),
	}
	alwaysJSON(c)
	c.Flags().BoolVar(&opts.Touch, "touch-heartbeat", false, "touch the controller's heartbeat after reading its age")
	c.Flags().Int64Var(&opts.LogOffset, "log-offset", 0, "return the workload's log from this byte offset")
	c.Flags().Int64Var(&opts.LogMax, "log-max", 0, "return at most this many bytes of the log (0: none)")
	c.Flags().Int64Var(&opts.MetricsOffset, "metrics-offset", 0, "with --log-max: return the workload's metrics (JSON lines) from this byte offset")
	return c
}

func runAgentStatus(_ context.Context, opts *AgentStatusOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	r := agent.BuildReport(l, agent.ReportOptions{Touch: opts.Touch, LogOffset: opts.LogOffset, LogMax: opts.LogMax, MetricsOffset: opts.MetricsOffset, Clock: opts.f.clock()})
	return json.NewEncoder(opts.f.IO.Out).Encode(r)
}

// AgentStoreOptions are the flags of `agent restore` and `agent upload`.
type AgentStoreOptions struct {
	f          *Factory
	Store, Dir string
	// Files (restore) also puts restored files matching it back in place.
	Files string
}

// NewCmdAgentRestore builds `vastrun agent restore`.
func NewCmdAgentRestore(f *Factory, runF func(context.Context, *AgentStoreOptions) error) *cobra.Command {
	opts := &AgentStoreOptions{f: f}
	c := &cobra.Command{
		Use:   "restore",
		Short: "Restore the newest committed checkpoint that verifies (falling back to older ones)",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runAgentRestore),
	}
	c.Flags().StringVar(&opts.Store, "store", "", "checkpoint store URI")
	c.Flags().StringVar(&opts.Dir, "dir", agent.ResumeDir, "directory to restore into (replaced)")
	c.Flags().StringVar(&opts.Files, "files", "", "also put restored files matching this glob back at their original paths")
	alwaysJSON(c)
	return c
}

func runAgentRestore(ctx context.Context, opts *AgentStoreOptions) error {
	transferGC(opts.f.Getenv)
	cs, err := openCheckpoints(opts.f, opts.Store, "")
	if err != nil {
		return err
	}
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	res, err := agent.Restore(ctx, l, cs, opts.Dir, opts.Files)
	if err != nil {
		return err
	}
	return json.NewEncoder(opts.f.IO.Out).Encode(res)
}

// NewCmdAgentUpload builds `vastrun agent upload`.
func NewCmdAgentUpload(f *Factory, runF func(context.Context, *AgentStoreOptions) error) *cobra.Command {
	opts := &AgentStoreOptions{f: f}
	c := &cobra.Command{
		Use:   "upload",
		Short: "Upload final outputs with a manifest of SHA-256s",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runAgentUpload),
	}
	c.Flags().StringVar(&opts.Store, "store", "", "output store URI")
	c.Flags().StringVar(&opts.Dir, "dir", "outputs", "directory to upload")
	alwaysJSON(c)
	return c
}

func runAgentUpload(ctx context.Context, opts *AgentStoreOptions) error {
	transferGC(opts.f.Getenv)
	cs, err := openCheckpoints(opts.f, opts.Store, "outputs")
	if err != nil {
		return err
	}
	cm, err := cs.Commit(ctx, opts.Dir, 0, opts.f.clock().Now())
	if err != nil {
		return err
	}
	return json.NewEncoder(opts.f.IO.Out).Encode(map[string]any{"manifest_sha256": cm.ManifestSHA256, "files": len(cm.Manifest.Files)})
}

// AgentManifestOptions are `vastrun agent manifest`'s arguments.
type AgentManifestOptions struct {
	f *Factory
	// Paths are relative to the login directory.
	Paths []string
}

// NewCmdAgentManifest builds `vastrun agent manifest`.
func NewCmdAgentManifest(f *Factory, runF func(context.Context, *AgentManifestOptions) error) *cobra.Command {
	opts := &AgentManifestOptions{f: f}
	c := &cobra.Command{
		Use:   "manifest PATH...",
		Short: "List the files under PATHs (relative to the login directory) with sizes and SHA-256s (JSON)",
		Args:  usageArgs(cobra.MinimumNArgs(1)),
		RunE: runCmd(opts, func(_ *cobra.Command, args []string) error {
			opts.Paths = args
			return nil
		}, runF, runAgentManifest),
	}
	alwaysJSON(c)
	return c
}

func runAgentManifest(_ context.Context, opts *AgentManifestOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	files, err := agent.SumTree(l.Home, opts.Paths)
	if err != nil {
		return err
	}
	return json.NewEncoder(opts.f.IO.Out).Encode(agent.ManifestResult{Schema: agent.ManifestSchema, SchemaVersion: agent.SchemaVersion, Files: files})
}

// AgentRetireOptions are `vastrun agent retire-lost`'s (none but --json).
type AgentRetireOptions struct{ f *Factory }

// NewCmdAgentRetireLost builds `agent retire-lost`: after an outbid
// interruptible instance resumed, the workload its stop killed is set
// aside so that the controller can start it again from the last committed
// checkpoint.
func NewCmdAgentRetireLost(f *Factory, runF func(context.Context, *AgentRetireOptions) error) *cobra.Command {
	opts := &AgentRetireOptions{f: f}
	c := &cobra.Command{
		Use:   "retire-lost",
		Short: "Set aside the record of a workload killed with its instance (never one alive or supervised)",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  runCmd(opts, nil, runF, runAgentRetireLost),
	}
	alwaysJSON(c)
	return c
}

func runAgentRetireLost(_ context.Context, opts *AgentRetireOptions) error {
	l, err := agent.NewLayout("")
	if err != nil {
		return err
	}
	res, err := agent.RetireLost(l, time.Now())
	if err != nil {
		return err
	}
	return json.NewEncoder(opts.f.IO.Out).Encode(res)
}

// containerEnv reads a variable from the agent's environment, falling back
// to the container's init process: Vast sets CONTAINER_API_KEY and
// CONTAINER_ID for the container, and whether SSH sessions inherit them is
// not documented, but PID 1 always has them.
func containerEnv(f *Factory, name string) string {
	if v := f.Getenv(name); v != "" {
		return v
	}
	b, err := os.ReadFile("/proc/1/environ")
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// selfDestroy destroys this instance with its own restricted key.
func selfDestroy(f *Factory) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		key, idText := containerEnv(f, "CONTAINER_API_KEY"), containerEnv(f, "CONTAINER_ID")
		id, err := strconv.ParseInt(idText, 10, 64)
		if key == "" || err != nil {
			return errors.New("CONTAINER_API_KEY or CONTAINER_ID is not set: cannot destroy this instance")
		}
		base := f.Getenv("VASTRUN_API_URL")
		if base == "" {
			base = f.Getenv("VAST_URL")
		}
		c, _, err := f.newClient(base, key)
		if err != nil {
			return err
		}
		return c.DestroyInstance(ctx, provider.InstanceID(id))
	}
}
