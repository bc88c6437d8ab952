// Package config reads vastrun.yaml. Parsing is strict: an unknown key is
// an error naming the key, its line and the keys allowed there, because a
// misspelled price ceiling or timeout must never be silently ignored.
// docs/config.md documents every key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vastrun/vastrun/internal/notify"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/text"
)

// Duration is a time.Duration written as "10m", "90s", "1h30m".
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as 10m or 90s", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration (write 10m, 90s or 1h30m)", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }
func (d Duration) String() string            { return time.Duration(d).String() }

// Duration is the value as a time.Duration.
func (d Duration) Duration() time.Duration { return time.Duration(d) }

// Config is vastrun.yaml.
type Config struct {
	Version     int               `yaml:"version"`
	Image       string            `yaml:"image"`
	ImageLogin  ImageLogin        `yaml:"image_login"`
	Test        string            `yaml:"test"`
	Upload      []string          `yaml:"upload"`
	Gate        []string          `yaml:"gate"`
	Paths       []string          `yaml:"paths"`
	GPU         GPU               `yaml:"gpu"`
	Budget      Budget            `yaml:"budget"`
	Timeouts    Timeouts          `yaml:"timeouts"`
	Env         map[string]string `yaml:"env"`
	Secrets     []string          `yaml:"secrets"`
	EvidenceDir string            `yaml:"evidence_dir"`
	StateDir    string            `yaml:"state_dir"`
	LabelPrefix string            `yaml:"label_prefix"`
	Alert       Alert             `yaml:"alert"`
	Notify      Notify            `yaml:"notify"`
	Verify      Verify            `yaml:"verify"`
	Train       Train             `yaml:"train"`
	Canary      Canary            `yaml:"canary"`
	Evidence    Evidence          `yaml:"evidence"`

	// Workdir (e.g. ".") sends the repository's files git keeps (tracked,
	// plus untracked ones .gitignore does not exclude) with the upload:
	// extras, as one compressed archive of at most WorkdirMaxMB.
	Workdir      string  `yaml:"workdir"`
	WorkdirMaxMB float64 `yaml:"workdir_max_mb"`

	// State is where run state is authoritative: "local" (state_dir, the
	// default) or s3://bucket/prefix, shared by a team (docs/teams.md).
	State string `yaml:"state"`
	Team  Team   `yaml:"team"`

	// Unset are the ${NAME}s of the store URIs that vastrun's environment
	// did not set (ExpandVars, vars.go): the preflight refuses each.
	Unset        []UnsetVar `yaml:"-"`
	varsExpanded bool
}

// Team tunes team state on S3 (docs/teams.md).
type Team struct {
	// LeaseTTL is how long a run's lease lives unless renewed (default
	// 30s; renewed every third of it).
	LeaseTTL Duration `yaml:"lease_ttl"`
	// BudgetUSD is the team's limit per calendar month, used while the
	// ledger has none of its own (`vastrun budget --set-limit`); 0: none.
	BudgetUSD float64 `yaml:"budget_usd"`
}

// Canary configures `vastrun canary`: the same smoke contract run locally
// (CPU) and on the smallest GPU that meets the policy.
type Canary struct {
	Unit         string   `yaml:"unit"`          // local unit tests, first
	Smoke        string   `yaml:"smoke"`         // run locally and on the GPU
	ExpectExit   int      `yaml:"expect_exit"`   // default 0
	ExpectFields []string `yaml:"expect_fields"` // fields the smoke's JSON result must have
	IgnoreFields []string `yaml:"ignore_fields"` // fields allowed to differ between CPU and GPU
	CUDACheck    string   `yaml:"cuda_check"`    // an extra GPU-only command
	Ports        []int    `yaml:"ports"`
	HealthURL    string   `yaml:"health_url"`
	EnvNames     []string `yaml:"env_names"` // environment the image needs (names only)

	// HealthTimeout bounds how long health_url may take to answer 2xx on
	// the machine running the server, during the server smoke (default 1m).
	HealthTimeout Duration `yaml:"health_timeout"`

	// With health_url or ports set, the smoke is a server: it is started in
	// the background, waited for, probed with Request, and stopped.
	Request  CanaryRequest  `yaml:"request"`
	Timeouts CanaryTimeouts `yaml:"timeouts"`
	Compare  CanaryCompare  `yaml:"compare"`
	// ImageSource is what `vastrun publish` / `canary --publish` pushes: an
	// OCI layout directory, a docker/podman save tarball, or the name of an
	// image in the local container engine.
	ImageSource string `yaml:"image_source"`
	// Containerfile builds the local smoke's container (path in the
	// repository; the build context is the repository). Default:
	// Containerfile, else Dockerfile, at the repository's root.
	Containerfile string `yaml:"containerfile"`
}

// IsServer reports whether the smoke is a server to start, probe and stop.
func (c Canary) IsServer() bool { return c.HealthURL != "" || len(c.Ports) > 0 }

// CanaryRequest is the probe sent to a ready server: a command (which may
// write $VASTRUN_RESULT), or an HTTP request whose JSON answer is the result.
type CanaryRequest struct {
	Command      string            `yaml:"command"`
	Method       string            `yaml:"method"` // default GET, or POST with a body
	URL          string            `yaml:"url"`    // as the machine running the server sees it
	Headers      map[string]string `yaml:"headers"`
	Body         string            `yaml:"body"`
	ExpectStatus int               `yaml:"expect_status"` // default 200
}

// IsSet reports whether a request is configured.
func (r CanaryRequest) IsSet() bool { return r.Command != "" || r.URL != "" }

// CanaryTimeouts bound each local step (the GPU side runs under timeouts.job).
type CanaryTimeouts struct {
	Unit  Duration `yaml:"unit"`  // canary.unit locally (default 10m)
	Smoke Duration `yaml:"smoke"` // the whole local smoke, server start to stop (default 10m)
	Stop  Duration `yaml:"stop"`  // a server's grace between TERM and KILL (default 10s)
}

// CanaryCompare says how the local and GPU results are compared. Objects
// compare by key, whatever the order; arrays by position.
type CanaryCompare struct {
	Tolerance float64  `yaml:"tolerance"` // numbers within this absolute or relative difference are equal
	Ignore    []string `yaml:"ignore"`    // dotted fields (and all under them) not compared
}

// Evidence configures where a run's evidence goes besides EvidenceDir.
type Evidence struct {
	// URI (s3://bucket/prefix or file:///path; ${VAR} and ${PWD} expanded
	// from vastrun's environment) receives the evidence directory under
	// <uri>/<run id>/ at the end of every run, whatever its outcome.
	URI string `yaml:"uri"`
}

// ImageLogin names the credentials of a private registry. The file holds
// only the names of environment variables; their values are read at run
// time, sent to Vast as image_login, used to resolve tags to digests, and
// masked everywhere vastrun writes.
type ImageLogin struct {
	Registry string `yaml:"registry"`  // e.g. ghcr.io; must be the image's registry
	UserEnv  string `yaml:"user_env"`  // variable holding the user name
	TokenEnv string `yaml:"token_env"` // variable holding the token or password
}

// IsSet reports whether any image_login key is present.
func (l ImageLogin) IsSet() bool { return l.Registry != "" || l.UserEnv != "" || l.TokenEnv != "" }

// IsCanary reports whether the config has a canary contract.
func (c *Config) IsCanary() bool { return strings.TrimSpace(c.Canary.Smoke) != "" }

// Train configures `vastrun train`.
type Train struct {
	Command         string   `yaml:"command"`
	CheckpointDir   string   `yaml:"checkpoint_dir"`
	Cadence         int      `yaml:"cadence"`
	CheckpointURI   string   `yaml:"checkpoint_uri"`
	OutputDir       string   `yaml:"output_dir"`
	OutputURI       string   `yaml:"output_uri"`
	DatasetVersion  string   `yaml:"dataset_version"`
	Seed            *int64   `yaml:"seed"` // nil: not set, and not recorded
	Keep            int      `yaml:"keep"`
	RuntimeDeadline Duration `yaml:"runtime_deadline"`
	HeartbeatTTL    Duration `yaml:"heartbeat_ttl"`
	Poll            Duration `yaml:"poll"`
	MaxAttempts     int      `yaml:"max_attempts"`
	// QuietPeriod, when set, also commits a checkpoint directory whose
	// files have not changed for this long, for workloads that cannot write
	// the .complete marker.
	QuietPeriod Duration `yaml:"quiet_period"`
	// CheckpointFile is a path or glob, relative to the login directory,
	// of a checkpoint the workload saves in place (e.g. out/ckpt.pt): the
	// agent snapshots it into a numbered step whenever a save completes,
	// and restore puts it back at this path.
	CheckpointFile string `yaml:"checkpoint_file"`
	// CheckpointCheck is a command that must accept a snapshot (its path
	// is appended) before it is committed.
	CheckpointCheck string `yaml:"checkpoint_check"`
	// StepFrom names a snapshot's step: json:FIELD or regex:RE over the
	// workload's log; when empty, the file's name or a key it holds, else
	// a counter.
	StepFrom string `yaml:"step_from"`
	// RequireResume makes a replacement that restores nothing, or a
	// workload that starts below the restored step, stop the run (failed)
	// instead of paying to redo the work.
	RequireResume bool `yaml:"require_resume"`

	// OnOutbid is what an outbid interruptible rental gets: replace
	// (default), rebid (up to gpu.max_bid) or wait (up to OutbidWait).
	OnOutbid   string   `yaml:"on_outbid"`
	OutbidWait Duration `yaml:"outbid_wait"`
}

// IsTrain reports whether the config describes a training run.
func (c *Config) IsTrain() bool { return strings.TrimSpace(c.Train.Command) != "" }

// GPU is the policy an offer must meet.
type GPU struct {
	Models          []string  `yaml:"models"`
	Count           int       `yaml:"count"`
	MinVRAMGB       float64   `yaml:"min_vram_gb"`
	MinCUDA         float64   `yaml:"min_cuda"`
	MinReliability  float64   `yaml:"min_reliability"`
	Verified        *bool     `yaml:"verified"`
	Datacenter      bool      `yaml:"datacenter"`
	Countries       Countries `yaml:"countries"`
	DiskGB          float64   `yaml:"disk_gb"`
	MaxDPH          float64   `yaml:"max_dph"`
	MinInetDownMbps float64   `yaml:"min_inet_down_mbps"`
	// Prefer ranks the eligible offers: "cheapest" (default) by $/h;
	// "fast_ready" by $/h × the expected time to ready, which counts the
	// image's pull at each host's download rate.
	Prefer string `yaml:"prefer"`

	// Matrix runs `vastrun ci` once per GPU model, in parallel, each its own
	// run with models: [that one] (docs/teams.md); MatrixPass says whether
	// all (default) or any must pass.
	Matrix     []string `yaml:"matrix"`
	MatrixPass string   `yaml:"matrix_pass"`

	// Interruptible rentals (bid.go): rent by bid at min_bid × (1 +
	// bid.margin), never over max_bid ($/h, GPU + storage).
	Interruptible bool    `yaml:"interruptible"`
	Bid           Bid     `yaml:"bid"`
	MaxBid        float64 `yaml:"max_bid"`
}

// Countries allow or deny two-letter country codes.
type Countries struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
}

// Budget bounds money.
type Budget struct {
	MaxSpend float64 `yaml:"max_spend"` // $ for the whole run, all attempts
}

// Timeouts bound time.
type Timeouts struct {
	Ready    Duration `yaml:"ready"`    // rented → running and reachable
	Job      Duration `yaml:"job"`      // the test itself
	Teardown Duration `yaml:"teardown"` // destroy + confirm, after anything
	// HeartbeatTTL is the on-instance dead-man switch's TTL for ci and
	// canary: the instance destroys itself once the controller has not
	// been heard from for this long (up takes --ttl; train keeps
	// train.heartbeat_ttl).
	HeartbeatTTL Duration `yaml:"heartbeat_ttl"`
	// PullStall stops a rental whose image pull shows no progress (its
	// status message unchanged while loading) for this long; it is then
	// replaced (0: the default, 10m).
	PullStall Duration `yaml:"pull_stall"`
}

// Alert says where to report a cleanup that could not be confirmed.
type Alert struct {
	Webhook string `yaml:"webhook"`
}

// Notify sends the run's events to a webhook as Slack-compatible JSON
// (docs/config.md, notify.*). The URL is a secret: it is read from the
// environment variable WebhookEnv names, never from this file.
type Notify struct {
	WebhookEnv string   `yaml:"webhook_env"`
	Events     []string `yaml:"events"` // notify.Events; empty: notify.DefaultEvents
}

// Verify tunes the checks made before the test.
type Verify struct {
	MinFreeDiskGB float64 `yaml:"min_free_disk_gb"`
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// What gpu.prefer may say (policy.Policy.Prefer).
const (
	PreferCheapest  = policy.PreferCheapest
	PreferFastReady = policy.PreferFastReady
)

// Defaults used when a key is absent.
const (
	DefaultReady    = 10 * time.Minute
	DefaultJob      = 30 * time.Minute
	DefaultTeardown = 4 * time.Minute // inside GitHub's 5-minute cancellation window
	// DefaultHeartbeatTTL: a controller beats every third of it, so a few
	// lost beats never fire the switch, and a dead one costs minutes.
	DefaultHeartbeatTTL = 3 * time.Minute
)

// Defaults is a config with every default filled, for commands that can
// work without a vastrun.yaml (exec, down, status, reap). It is not valid
// for renting.
func Defaults() *Config {
	c := &Config{}
	c.fillDefaults()
	return c
}

// Load reads and validates a config file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse decodes strictly and fills defaults.
func Parse(b []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, errors.New("empty config: at least image and test are needed")
	}
	if err := checkKeys(root.Content[0], reflect.TypeOf(Config{}), ""); err != nil {
		return nil, err
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, typeErrors(err, &root)
	}
	explicit := map[string]bool{}
	explicitKeys(&root, "", explicit)
	// Zeros written out are judged before defaults replace them.
	zeroErrs := c.checkValues(explicit)
	c.fillDefaults()
	if err := c.validate(zeroErrs); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) fillDefaults() {
	if c.Version == 0 {
		c.Version = 1
	}
	if c.GPU.Count == 0 {
		c.GPU.Count = 1
	}
	if c.GPU.DiskGB == 0 {
		c.GPU.DiskGB = 20
	}
	if c.GPU.Verified == nil {
		t := true
		c.GPU.Verified = &t
	}
	if c.Timeouts.Ready == 0 {
		c.Timeouts.Ready = Duration(DefaultReady)
	}
	if c.Timeouts.Job == 0 {
		c.Timeouts.Job = Duration(DefaultJob)
	}
	if c.Timeouts.Teardown == 0 {
		c.Timeouts.Teardown = Duration(DefaultTeardown)
	}
	if c.Timeouts.HeartbeatTTL == 0 {
		c.Timeouts.HeartbeatTTL = Duration(DefaultHeartbeatTTL)
	}
	if c.StateDir == "" {
		c.StateDir = ".vastrun"
	}
	if c.WorkdirMaxMB == 0 {
		c.WorkdirMaxMB = 256
	}
	t := &c.Train
	if t.CheckpointDir == "" {
		t.CheckpointDir = "checkpoints"
	}
	if t.OutputDir == "" {
		t.OutputDir = "outputs"
	}
	if t.Cadence == 0 {
		t.Cadence = 100
	}
	if t.Keep == 0 {
		t.Keep = 3
	}
	if t.RuntimeDeadline == 0 {
		t.RuntimeDeadline = Duration(24 * time.Hour)
	}
	if t.HeartbeatTTL == 0 {
		t.HeartbeatTTL = Duration(2 * time.Minute)
	}
	if t.Poll == 0 {
		t.Poll = Duration(10 * time.Second)
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = 4
	}
	if t.OutputURI == "" {
		t.OutputURI = t.CheckpointURI
	}
	c.fillBidDefaults()
}

// Validate reports everything wrong at once.
func (c *Config) Validate() error { return c.validate(c.checkValues(nil)) }

func (c *Config) validate(valueErrs []string) error {
	var errs []string
	errs = append(errs, c.Notify.problems()...)
	if c.Version != 1 {
		errs = append(errs, fmt.Sprintf("version %d is not supported (use 1)", c.Version))
	}
	if strings.TrimSpace(c.Image) == "" {
		errs = append(errs, "image is required (pin it by digest: repo@sha256:...)")
	}
	if strings.TrimSpace(c.Test) == "" && !c.IsTrain() && !c.IsCanary() {
		errs = append(errs, "test is required: the command to run on the GPU instance (or train.command for a training run, or canary.smoke for a canary)")
	}
	if c.IsTrain() {
		if c.Train.CheckpointURI == "" {
			errs = append(errs, "train.checkpoint_uri is required: where committed checkpoints live (s3://bucket/prefix or file:///path)")
		} else if !strings.HasPrefix(c.Train.CheckpointURI, "s3://") && !strings.HasPrefix(c.Train.CheckpointURI, "file://") {
			errs = append(errs, fmt.Sprintf("train.checkpoint_uri %q must be s3://bucket/prefix or file:///absolute/path", c.Train.CheckpointURI))
		}
		if f := c.Train.CheckpointFile; f != "" {
			if filepath.IsAbs(f) || strings.Contains(filepath.ToSlash(f), "..") {
				errs = append(errs, fmt.Sprintf("train.checkpoint_file %q must be a path relative to the login directory, without ..", f))
			} else if _, err := filepath.Match(f, ""); err != nil {
				errs = append(errs, fmt.Sprintf("train.checkpoint_file %q is not a valid glob: %v", f, err))
			}
		}
		if c.Train.CheckpointFile == "" && (c.Train.CheckpointCheck != "" || c.Train.StepFrom != "") {
			errs = append(errs, "train.checkpoint_check and train.step_from apply to train.checkpoint_file, which is not set")
		}
		if err := CheckStepFrom(c.Train.StepFrom); err != nil {
			errs = append(errs, fmt.Sprintf("train.step_from: %v", err))
		}
		if c.Train.HeartbeatTTL.Duration() < 2*c.Train.Poll.Duration() {
			errs = append(errs, "train.heartbeat_ttl must be at least twice train.poll, or a slow poll would look like a dead controller")
		}
	}
	if st := c.State; st != "" && st != "local" && (!strings.HasPrefix(st, "s3://") || len(strings.TrimPrefix(st, "s3://")) == 0) {
		errs = append(errs, fmt.Sprintf("state %q must be local or s3://bucket/prefix (a team bucket; see docs/teams.md)", st))
	}
	if p := c.GPU.MatrixPass; p != "" && p != "all" && p != "any" {
		errs = append(errs, fmt.Sprintf("gpu.matrix_pass %q must be all or any", p))
	}
	for _, m := range c.GPU.Matrix {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, "gpu.matrix has an empty model name")
		}
	}
	if c.Team.BudgetUSD < 0 {
		errs = append(errs, "team.budget_usd must not be negative")
	}
	if t := c.Team.LeaseTTL.Duration(); t != 0 && (t < 3*time.Second || t > time.Hour) {
		errs = append(errs, fmt.Sprintf("team.lease_ttl %s must be from 3s to 1h", t))
	}
	if c.Budget.MaxSpend == 0 && !containsPrefix(valueErrs, "budget.max_spend") {
		errs = append(errs, "budget.max_spend is required: the most this run may cost, in $")
	}
	errs = append(errs, c.checkBid()...)
	errs = append(errs, c.checkLimits()...) // limits.go
	errs = append(errs, dedupe(valueErrs, errs)...)
	if err := c.Policy().Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Workdir != "" {
		w := filepath.ToSlash(filepath.Clean(c.Workdir))
		if filepath.IsAbs(c.Workdir) || w == ".." || strings.HasPrefix(w, "../") {
			errs = append(errs, fmt.Sprintf("workdir %q must be a directory inside the repository, such as .", c.Workdir))
		}
	}
	if c.WorkdirMaxMB < 0 {
		errs = append(errs, "workdir_max_mb must be positive")
	}
	if l := c.ImageLogin; l.IsSet() {
		if l.Registry == "" || l.UserEnv == "" || l.TokenEnv == "" {
			errs = append(errs, "image_login needs registry, user_env and token_env (the names of environment variables, never the values)")
		}
		for _, kv := range [][2]string{{"user_env", l.UserEnv}, {"token_env", l.TokenEnv}} {
			if kv[1] != "" && !envName().MatchString(kv[1]) {
				errs = append(errs, fmt.Sprintf("image_login.%s must be an environment variable name (letters, digits, _), not a value", kv[0]))
			}
		}
		if l.Registry != "" && c.Image != "" && ImageRegistry(c.Image) != l.Registry {
			errs = append(errs, fmt.Sprintf("image_login.registry %q is not the image's registry %q", l.Registry, ImageRegistry(c.Image)))
		}
	}
	errs = append(errs, c.checkVarSyntax()...) // vars.go
	if u := c.Evidence.URI; u != "" && !strings.HasPrefix(u, "s3://") && !strings.HasPrefix(u, "file://") {
		errs = append(errs, fmt.Sprintf("evidence.uri %q must be s3://bucket/prefix or file:///absolute/path", u))
	}
	if f := filepath.ToSlash(filepath.Clean(c.Canary.Containerfile)); c.Canary.Containerfile != "" && (filepath.IsAbs(c.Canary.Containerfile) || f == ".." || strings.HasPrefix(f, "../")) {
		errs = append(errs, fmt.Sprintf("canary.containerfile %q must be a path inside the repository (the build context)", c.Canary.Containerfile))
	}
	for _, s := range c.Secrets {
		if !envName().MatchString(s) {
			errs = append(errs, fmt.Sprintf("secrets entry %q must be an environment variable name (letters, digits, _)", s))
		}
	}
	for _, k := range c.Canary.EnvNames {
		if !envName().MatchString(k) {
			errs = append(errs, fmt.Sprintf("canary.env_names entry %q is not a variable name", k))
		}
	}
	for k := range c.Env {
		if !envName().MatchString(k) {
			errs = append(errs, fmt.Sprintf("env key %q is not a variable name (letters, digits, _; not starting with a digit)", k))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// ImageRegistry is the registry host of an image reference, as docker
// reads it: the first path element when it has a dot, a colon or is
// localhost, else Docker Hub (docker.io).
func ImageRegistry(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

// Policy is the GPU section as a selection policy.
func (c *Config) Policy() policy.Policy {
	verified := c.GPU.Verified == nil || *c.GPU.Verified
	return policy.Policy{
		Models: c.GPU.Models, Count: c.GPU.Count, MinVRAMGB: c.GPU.MinVRAMGB, MinCUDA: c.GPU.MinCUDA,
		MinReliability: c.GPU.MinReliability, Verified: verified, Datacenter: c.GPU.Datacenter,
		AllowCountries: c.GPU.Countries.Allow, DenyCountries: c.GPU.Countries.Deny, DiskGB: c.GPU.DiskGB,
		MaxDPH: c.GPU.MaxDPH, MinInetDownMbps: c.GPU.MinInetDownMbps, Prefer: c.GPU.Prefer,
		Interruptible: c.GPU.Interruptible, BidMargin: c.GPU.Bid.MarginValue(), MaxBid: c.GPU.MaxBid,
	}.Normalized()
}

// checkKeys walks a mapping node against a struct's yaml tags.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		return nil
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" {
			fields[tag] = t.Field(i).Type
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft, ok := fields[k.Value]
		if !ok {
			names := make([]string, 0, len(fields))
			for f := range fields {
				names = append(names, f)
			}
			sort.Strings(names)
			return newKeyError(k.Line, k.Value, path, names)
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration(0)) {
			if err := checkKeys(v, ft, strings.TrimPrefix(path+"."+k.Value, ".")); err != nil {
				return err
			}
		}
	}
	return nil
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// dedupe drops value errors already said another way.
func dedupe(list, have []string) []string {
	var out []string
	for _, s := range list {
		if !containsPrefix(have, strings.Fields(s)[0]) {
			out = append(out, s)
		}
	}
	return out
}

// CheckStepFrom checks a train.step_from value: "", json:FIELD, or regex:RE
// with a capture group around the step. The agent's flag takes the same.
func CheckStepFrom(s string) error {
	switch {
	case s == "":
		return nil
	case strings.HasPrefix(s, "json:"):
		if strings.TrimPrefix(s, "json:") == "" {
			return errors.New("json: needs a field name, e.g. json:iter")
		}
		return nil
	case strings.HasPrefix(s, "regex:"):
		re, err := regexp.Compile(strings.TrimPrefix(s, "regex:"))
		if err != nil {
			return err
		}
		if re.NumSubexp() < 1 {
			return errors.New(`regex: needs a capture group around the step, e.g. regex:saved step (\d+)`)
		}
		return nil
	}
	return fmt.Errorf("%q is neither json:FIELD nor regex:RE", s)
}

// problems are what is wrong with notify:, each naming the fix.
func (n Notify) problems() []string {
	var errs []string
	switch {
	case n.WebhookEnv == "" && len(n.Events) > 0:
		errs = append(errs, "notify.events needs notify.webhook_env: the name of the environment variable that holds the webhook URL")
	case n.WebhookEnv != "" && !envName().MatchString(n.WebhookEnv):
		if strings.Contains(n.WebhookEnv, "://") {
			errs = append(errs, "notify.webhook_env names an environment variable, not the URL itself (a webhook URL is a secret): write e.g. webhook_env: SLACK_WEBHOOK_URL and export the URL there")
		} else {
			errs = append(errs, fmt.Sprintf("notify.webhook_env %q is not an environment variable name", n.WebhookEnv))
		}
	}
	for _, ev := range n.Events {
		if slices.Contains(notify.Events, ev) {
			continue
		}
		msg := fmt.Sprintf("notify.events: %q is not an event (%s)", ev, strings.Join(notify.Events, ", "))
		if s := text.Suggest(ev, notify.Events, 1); len(s) > 0 {
			msg = fmt.Sprintf("notify.events: %q is not an event: did you mean %s? (%s)", ev, s[0], strings.Join(notify.Events, ", "))
		}
		errs = append(errs, msg)
	}
	return errs
}
