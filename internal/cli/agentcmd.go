package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// The on-instance agent's commands. The controller speaks to it through
// one of them only, `agent call`: a typed request on stdin, a typed answer
// on stdout (internal/agent/request.go). The others bind flags to the same
// requests and handlers, for a person on the instance and the tests; each
// prints one JSON document (its --json flag is always on).

// NewCmdAgent builds `vastrun agent`, which runs on the instance.
func NewCmdAgent(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "The on-instance helper: every rental's dead-man switch, and training's supervisor",
		Long: `Runs on a rented instance. On every rental it is the dead-man switch (armed
by an arm request, run as agent deadman): it destroys this instance with
CONTAINER_API_KEY and CONTAINER_ID when the controller's heartbeat lapses.
On a training instance it also starts the workload itself (agent start),
commits its checkpoints, and answers the controller in typed, versioned JSON
(agent call, one request on stdin). Storage credentials come from the
standard AWS variables in its environment.`,
	}
	cmd.AddCommand(NewCmdAgentCall(f, nil), NewCmdAgentWatch(f, nil), NewCmdAgentStart(f, nil), NewCmdAgentSupervise(f, nil), NewCmdAgentStatus(f, nil),
		NewCmdAgentRestore(f, nil), NewCmdAgentUpload(f, nil), NewCmdAgentManifest(f, nil), NewCmdAgentRetireLost(f, nil), NewCmdAgentHeartbeat(f, nil),
		NewCmdAgentDeadMan(f, nil))
	return cmd
}

// alwaysJSON adds the --json flag the agent's commands accept and ignore.
func alwaysJSON(c *cobra.Command) {
	var on bool
	c.Flags().BoolVar(&on, "json", true, "print JSON (always on)")
}

// agentHost is the handlers' frame in this process: the login directory,
// the environment (storage credentials), the clock, this binary and the
// instance's own destroy.
func agentHost(f *Factory) (*agent.Host, error) {
	l, err := agent.NewLayout("")
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return &agent.Host{Layout: l, Getenv: f.Getenv, Environ: os.Environ(), Executable: exe, Clock: f.clock(), Log: f.IO.ErrOut,
		SelfDestroy: selfDestroy(f), BeforeTransfer: func() { transferGC(f.Getenv) }}, nil
}

// answer runs one handler in this process's frame and prints its answer.
func answer[A any](f *Factory, call func(*agent.Host) (A, error)) error {
	h, err := agentHost(f)
	if err != nil {
		return err
	}
	a, err := call(h)
	if err != nil {
		return err
	}
	return json.NewEncoder(f.IO.Out).Encode(a)
}

// AgentCallOptions are `vastrun agent call`'s (none: the request is stdin).
type AgentCallOptions struct{ f *Factory }

// NewCmdAgentCall builds the hidden `vastrun agent call`: the controller's
// one command line. It reads one request document on stdin and prints its
// answer, or an error answer (and exits non-zero).
func NewCmdAgentCall(f *Factory, runF func(context.Context, *AgentCallOptions) error) *cobra.Command {
	opts := &AgentCallOptions{f: f}
	return &cobra.Command{
		Use:    "call",
		Short:  "Answer one typed request read on stdin (schema vastrun.agent.request v1)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE:   runCmd(opts, nil, runF, runAgentCall),
	}
}

func runAgentCall(ctx context.Context, opts *AgentCallOptions) error {
	h, err := agentHost(opts.f)
	if err != nil {
		return err
	}
	return h.Serve(ctx, opts.f.IO.In, opts.f.IO.Out)
}

// AgentWatchOptions are the checkpoint flags of `agent watch` and `agent
// start`.
type AgentWatchOptions struct {
	f *Factory
	// Spec is the checkpoint loop the flags describe.
	Spec     agent.WatchSpec
	Once     bool   // watch only
	Command  string // start
	deadline string
}

func (o *AgentWatchOptions) addFlags(c *cobra.Command) {
	w := &o.Spec
	c.Flags().StringVar(&w.Store, "store", "", "checkpoint store URI (s3://bucket/prefix or file:///path)")
	c.Flags().StringVar(&w.Dir, "dir", "checkpoints", "local checkpoint directory the workload writes")
	c.Flags().IntVar(&w.Keep, "keep", 3, "committed checkpoints to keep, in the store and on this instance")
	c.Flags().StringVar(&w.Heartbeat, "heartbeat", "", "file the controller touches")
	c.Flags().DurationVar((*time.Duration)(&w.TTL), "ttl", 0, "destroy this instance when the heartbeat is older than this (0: never)")
	c.Flags().StringVar(&o.deadline, "deadline", "", "destroy this instance at this RFC 3339 time")
	c.Flags().StringVar(&w.Status, "status", "", "status file to write")
	c.Flags().DurationVar((*time.Duration)(&w.Poll), "poll", 5*time.Second, "how often to look")
	c.Flags().DurationVar((*time.Duration)(&w.Quiet), "quiet", 0, "also treat a step directory as complete when its files have not changed for this long and none is open for writing (0: only the .complete marker)")
	c.Flags().StringVar(&w.Files, "files", "", "single-file checkpoints saved in place (a path or glob relative to the login directory)")
	c.Flags().StringVar(&w.Check, "check", "", "command that must accept a snapshot (its path is appended) before it is committed")
	c.Flags().StringVar(&w.StepFrom, "step-from", "", "where a snapshot's step comes from: json:FIELD or regex:RE over the log (default: the file's name or a step key it holds, else a counter)")
}

// fill checks the flags that have a syntax of their own.
func (o *AgentWatchOptions) fill(*cobra.Command, []string) error {
	if err := config.CheckStepFrom(o.Spec.StepFrom); err != nil {
		return &UsageError{Err: fmt.Errorf("--step-from: %w", err), Hint: "write json:FIELD or regex:RE (docs/config.md, train.step_from)"}
	}
	o.Spec.Deadline = time.Time{}
	if o.deadline != "" {
		t, err := time.Parse(time.RFC3339, o.deadline)
		if err != nil {
			return &UsageError{Err: fmt.Errorf("--deadline: %w", err), Hint: "use RFC 3339, e.g. 2026-12-01T00:00:00Z"}
		}
		o.Spec.Deadline = t
	}
	return nil
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
	h, err := agentHost(opts.f)
	if err != nil {
		return err
	}
	if opts.Once {
		_, err := h.Commit(ctx, agent.CommitRequest{Watch: opts.Spec})
		return err
	}
	return h.Watch(ctx, opts.Spec)
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
			return opts.fill(cmd, args)
		}, runF, runAgentStart),
	}
	opts.addFlags(c)
	c.Flags().StringVar(&opts.Command, "command", "", "the workload, run by /bin/sh -c in the login directory")
	alwaysJSON(c)
	return c
}

func runAgentStart(ctx context.Context, opts *AgentWatchOptions) error {
	return answer(opts.f, func(h *agent.Host) (agent.StartResult, error) {
		return h.Start(ctx, agent.StartRequest{Command: opts.Command, Watch: opts.Spec})
	})
}

// AgentSuperviseOptions are the hidden `agent supervise`'s (none: its
// request is stdin, handed over by agent start).
type AgentSuperviseOptions struct{ f *Factory }

// NewCmdAgentSupervise builds the hidden `vastrun agent supervise`.
func NewCmdAgentSupervise(f *Factory, runF func(context.Context, *AgentSuperviseOptions) error) *cobra.Command {
	opts := &AgentSuperviseOptions{f: f}
	return &cobra.Command{
		Use:    "supervise",
		Short:  "Run the workload and the watch loop (started by agent start, its request on stdin)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE:   runCmd(opts, nil, runF, runAgentSupervise),
	}
}

func runAgentSupervise(ctx context.Context, opts *AgentSuperviseOptions) error {
	req, err := agent.DecodeSupervise(opts.f.IO.In)
	if err != nil {
		return err
	}
	h, err := agentHost(opts.f)
	if err != nil {
		return err
	}
	// fd 4 is where Start waits for the workload's pid.
	return h.Supervise(ctx, req, os.NewFile(4, "ready"))
}

// AgentStatusOptions are `vastrun agent status`'s flags.
type AgentStatusOptions struct {
	f   *Factory
	Req agent.StatusRequest
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
	c.Flags().BoolVar(&opts.Req.TouchHeartbeat, "touch-heartbeat", false, "touch the controller's heartbeat after reading its age")
	c.Flags().Int64Var(&opts.Req.LogOffset, "log-offset", 0, "return the workload's log from this byte offset")
	c.Flags().Int64Var(&opts.Req.LogMax, "log-max", 0, "return at most this many bytes of the log (0: none)")
	c.Flags().Int64Var(&opts.Req.MetricsOffset, "metrics-offset", 0, "with --log-max: return the workload's metrics (JSON lines) from this byte offset")
	return c
}

func runAgentStatus(ctx context.Context, opts *AgentStatusOptions) error {
	return answer(opts.f, func(h *agent.Host) (agent.Report, error) { return h.Status(ctx, opts.Req) })
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
	return answer(opts.f, func(h *agent.Host) (agent.RestoreResult, error) {
		return h.Restore(ctx, agent.RestoreRequest{Store: opts.Store, Dir: opts.Dir, Files: opts.Files})
	})
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
	return answer(opts.f, func(h *agent.Host) (agent.UploadResult, error) {
		return h.Upload(ctx, agent.UploadRequest{Store: opts.Store, Dir: opts.Dir})
	})
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

func runAgentManifest(ctx context.Context, opts *AgentManifestOptions) error {
	return answer(opts.f, func(h *agent.Host) (agent.ManifestResult, error) {
		return h.Manifest(ctx, agent.ManifestRequest{Paths: opts.Paths})
	})
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

func runAgentRetireLost(ctx context.Context, opts *AgentRetireOptions) error {
	return answer(opts.f, func(h *agent.Host) (agent.RetireResult, error) { return h.RetireLost(ctx, agent.RetireRequest{}) })
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

// selfDestroy sends one destroy of this instance with its own restricted
// key to apiURL (default VASTRUN_API_URL, else VAST_URL). One request, not
// the retry decorator's: the switch retries itself, logging each try.
func selfDestroy(f *Factory) func(ctx context.Context, apiURL string) (bool, error) {
	return func(ctx context.Context, apiURL string) (bool, error) {
		key, idText := containerEnv(f, "CONTAINER_API_KEY"), containerEnv(f, "CONTAINER_ID")
		id, err := strconv.ParseInt(idText, 10, 64)
		if key == "" || err != nil {
			return false, errors.New("CONTAINER_API_KEY or CONTAINER_ID is not set: cannot destroy this instance")
		}
		base := apiURL
		if base == "" {
			base = f.Getenv("VASTRUN_API_URL")
		}
		if base == "" {
			base = f.Getenv("VAST_URL")
		}
		c, err := vast.New(vast.Options{BaseURL: base, APIKey: key, Logger: f.Logger(), UserAgent: "vastrun/" + Version, Clock: f.Clock})
		if err != nil {
			return false, err
		}
		return c.DestroyInstanceGone(ctx, provider.InstanceID(id))
	}
}

// AgentDeadManOptions are the hidden `agent deadman`'s (none: arming
// wrote its settings to the instance).
type AgentDeadManOptions struct{ f *Factory }

// NewCmdAgentDeadMan builds the hidden `vastrun agent deadman`: the
// dead-man switch that an arm request starts, detached, holding its lock
// on fd 3. It destroys this instance once the controller's heartbeat
// lapses past the TTL or the run's bound passes, and then until the API
// says the instance is gone (internal/agent/deadman.go).
func NewCmdAgentDeadMan(f *Factory, runF func(context.Context, *AgentDeadManOptions) error) *cobra.Command {
	opts := &AgentDeadManOptions{f: f}
	return &cobra.Command{
		Use:    "deadman",
		Short:  "Destroy this instance when the controller's heartbeat lapses (started by an arm request)",
		Hidden: true,
		Args:   usageArgs(cobra.NoArgs),
		RunE:   runCmd(opts, nil, runF, runAgentDeadMan),
	}
}

func runAgentDeadMan(ctx context.Context, opts *AgentDeadManOptions) error {
	h, err := agentHost(opts.f)
	if err != nil {
		return err
	}
	return h.DeadMan(ctx, 3)
}
