// Package chaos runs the real lifecycle engine (`vastrun ci` runs) against
// the simulator under randomized fault schedules, and checks vastrun's
// promises after every one:
//
//   - zero live instances at the end (after a crash, once recovered by label);
//   - never two live contracts for one label at any instant;
//   - every destroy confirmed, or escalated (exit-7 error and annotation);
//   - spend within budget plus one poll;
//   - no byte of a canary secret (nor the API key) in any output, log,
//     journal, evidence file or file on the instance.
//
// A crash (SIGKILL) is emulated by freezing the engine at a random API call:
// nothing after it runs, teardown included. Recovery then uses only what a
// user has after a killed CI job: the label in the CI's dotenv state.
//
//	go test ./test/chaos -seeds 1000 -v
//
// Seed counts also come from the environment (family_test.go).
package chaos

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

var (
	seeds     = seedCount("seeds", envSeeds, 150, "randomized fault schedules to run")
	firstSeed = flag.Uint64("seed", 1, "first seed (a violation's seed reruns it alone with -seeds 1)")
)

const image = "ghcr.io/acme/gpu-test@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

const cfgYAML = `
image: ` + image + `
test: |
  echo "secret is $CANARY_SECRET"; nvidia-smi -L; printf '{"ok": true}' > "$VASTRUN_RESULT"
secrets: [CANARY_SECRET]
gpu: {models: [RTX_4090, RTX_3090, RTX_3060], max_dph: 1.0}
budget: {max_spend: 2}
timeouts: {ready: 10m, job: 2m, teardown: 4m}
`

// autoClock advances the shared fake clock whenever the engine waits.
type autoClock struct{ f *clock.Fake }

func (a autoClock) Now() time.Time { return a.f.Now() }
func (a autoClock) After(d time.Duration) <-chan time.Time {
	ch := a.f.After(d)
	a.f.Advance(d)
	return ch
}

// crashMarket freezes forever at call number crashAt (0: never), or at the
// call crashOn picks, as if the process had been SIGKILLed in the middle of
// that call. Once frozen, every later call freezes too: a killed process
// makes no more calls from any goroutine.
type crashMarket struct {
	provider.Market
	calls   atomic.Int64
	crashAt int64
	// crashOn, when set, is asked before each call with the method's name
	// and the call's number; true freezes the process there.
	crashOn func(method string, n int64) bool
	crashed chan struct{}
	once    sync.Once
	frozen  atomic.Bool
}

func (m *crashMarket) hit(method string) {
	n := m.calls.Add(1)
	if m.frozen.Load() || (m.crashAt > 0 && n == m.crashAt) || (m.crashOn != nil && m.crashOn(method, n)) {
		m.frozen.Store(true)
		m.once.Do(func() { close(m.crashed) })
		select {} // the process is gone: nothing after this runs
	}
}

func (m *crashMarket) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	m.hit("search")
	return m.Market.SearchOffers(ctx, q)
}
func (m *crashMarket) CreateInstance(ctx context.Context, r provider.CreateRequest) (provider.CreateResult, error) {
	m.hit("create")
	return m.Market.CreateInstance(ctx, r)
}
func (m *crashMarket) ShowInstance(ctx context.Context, id provider.InstanceID) (provider.Instance, error) {
	m.hit("show")
	return m.Market.ShowInstance(ctx, id)
}
func (m *crashMarket) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	m.hit("list")
	return m.Market.ListInstances(ctx, o)
}
func (m *crashMarket) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	m.hit("destroy")
	return m.Market.DestroyInstance(ctx, id)
}
func (m *crashMarket) AttachSSHKey(ctx context.Context, id provider.InstanceID, k string) error {
	m.hit("attach_ssh")
	return m.Market.AttachSSHKey(ctx, id, k)
}

// ChangeBid forwards the change-bid route (provider.BidChanger), which the
// engine finds by type assertion: hiding it would silently turn re-bidding
// off in every schedule.
func (m *crashMarket) ChangeBid(ctx context.Context, id provider.InstanceID, price float64) error {
	m.hit("change_bid")
	bc, ok := m.Market.(provider.BidChanger)
	if !ok {
		return fmt.Errorf("change the bid of instance %d: the wrapped market has no change-bid route", id)
	}
	return bc.ChangeBid(ctx, id, price)
}

func (m *crashMarket) Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error) {
	m.hit("charges")
	return m.Market.Charges(ctx, q)
}

// slowMarket is the slow-controller mode: every call the engine makes to
// the marketplace first waits delay on the run's clock, as a controller on
// a loaded runner or behind a slow network does. Polls then land late,
// faults fire between a read and the action taken on it, and deadlines
// are reached mid-step.
type slowMarket struct {
	provider.Market
	clk   clock.Clock
	delay func() time.Duration
}

func (m slowMarket) wait(ctx context.Context) { clock.Sleep(ctx, m.clk, m.delay()) }

func (m slowMarket) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	m.wait(ctx)
	return m.Market.SearchOffers(ctx, q)
}
func (m slowMarket) ChangeBid(ctx context.Context, id provider.InstanceID, price float64) error {
	m.wait(ctx)
	bc, ok := m.Market.(provider.BidChanger)
	if !ok {
		return fmt.Errorf("change the bid of instance %d: the wrapped market has no change-bid route", id)
	}
	return bc.ChangeBid(ctx, id, price)
}
func (m slowMarket) CreateInstance(ctx context.Context, r provider.CreateRequest) (provider.CreateResult, error) {
	m.wait(ctx)
	return m.Market.CreateInstance(ctx, r)
}
func (m slowMarket) ShowInstance(ctx context.Context, id provider.InstanceID) (provider.Instance, error) {
	m.wait(ctx)
	return m.Market.ShowInstance(ctx, id)
}
func (m slowMarket) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	m.wait(ctx)
	return m.Market.ListInstances(ctx, o)
}
func (m slowMarket) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	m.wait(ctx)
	return m.Market.DestroyInstance(ctx, id)
}
func (m slowMarket) AttachSSHKey(ctx context.Context, id provider.InstanceID, k string) error {
	m.wait(ctx)
	return m.Market.AttachSSHKey(ctx, id, k)
}
func (m slowMarket) Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error) {
	m.wait(ctx)
	return m.Market.Charges(ctx, q)
}

// slowFor draws a slow-controller latency range (simulated seconds) for a
// schedule, or nil for a controller at normal speed.
func slowFor(rng *rand.Rand, p float64, lo, hi int) func() time.Duration {
	if rng.Float64() >= p {
		return nil
	}
	a := lo + rng.IntN(hi-lo+1)
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(rng.Uint64(), 1))
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(a)*time.Second/2 + time.Duration(r.Int64N(int64(time.Duration(a)*time.Second)))
	}
}

// sshKeepAlive is the chaos runs' SSH keepalive: short, so a stalled
// connection is found within seconds of wall time, yet far above the
// in-process SSH server's answer time even on a loaded runner.
const sshKeepAlive = 500 * time.Millisecond

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type ui struct{ w io.Writer }

func (u ui) Infof(format string, args ...any) { fmt.Fprintf(u.w, "vastrun: "+format+"\n", args...) }

// schedule picks faults for a seed and sets them on s; it returns a
// description for reports.
func schedule(rng *rand.Rand, s *sim.Server) []string {
	return injectFaults(s, drawFaults(rng))
}

// injectFaults sets faults on s and describes those it took.
func injectFaults(s *sim.Server, faults []sim.Fault) []string {
	var applied []string
	for _, f := range faults {
		if err := s.Inject(f); err == nil {
			b, _ := jsonFault(f)
			applied = append(applied, b)
		}
	}
	return applied
}

// drawFaults picks the ci family's faults for a seed.
func drawFaults(rng *rand.Rand) []sim.Fault {
	var faults []sim.Fault
	inject := func(f sim.Fault) { faults = append(faults, f) }
	endpoints := []string{"search", "create", "show", "list", "destroy", "attach_ssh"}
	if rng.Float64() < 0.5 {
		inject(sim.Fault{Kind: sim.FaultRateLimit, Endpoint: []string{"*", endpoints[rng.IntN(len(endpoints))]}[rng.IntN(2)], Count: 1 + rng.IntN(6)})
	}
	if rng.Float64() < 0.4 {
		inject(sim.Fault{Kind: sim.FaultFail, Endpoint: endpoints[rng.IntN(len(endpoints))], Count: 1 + rng.IntN(3), Status: []int{500, 502, 503, 504}[rng.IntN(4)]})
	}
	switch rng.IntN(4) {
	case 0:
		inject(sim.Fault{Kind: sim.FaultCreateErrorWithContract})
	case 1:
		inject(sim.Fault{Kind: sim.FaultCreateLostResponse})
	}
	if rng.Float64() < 0.4 {
		inject(sim.Fault{Kind: sim.FaultReadLag, Count: 1 + rng.IntN(4)})
	}
	if rng.Float64() < 0.35 {
		n := 1 + rng.IntN(4)
		if rng.Float64() < 0.15 {
			n = -1 // destroy never works: must be escalated
		}
		inject(sim.Fault{Kind: sim.FaultDestroyNoop, Count: n})
	}
	if rng.Float64() < 0.25 {
		inject(sim.Fault{Kind: sim.FaultPreemptAfter, Seconds: float64(5 + rng.IntN(60))})
	}
	if rng.Float64() < 0.25 {
		inject(sim.Fault{Kind: sim.FaultImagePull, Count: 1})
	}
	if rng.Float64() < 0.25 {
		inject(sim.Fault{Kind: sim.FaultSSHRefuse, Seconds: float64(10 + rng.IntN(120))})
	}
	if rng.Float64() < 0.25 {
		inject(sim.Fault{Kind: sim.FaultSlowLoading, Seconds: float64(30 + rng.IntN(900))})
	}
	if rng.Float64() < 0.25 {
		inject(sim.Fault{Kind: sim.FaultSSHDrop, Seconds: float64(5 + rng.IntN(60)), Count: 1 + rng.IntN(3)})
	}
	if rng.Float64() < 0.15 {
		inject(sim.Fault{Kind: sim.FaultSSHStall, Seconds: float64(5 + rng.IntN(60)), Count: 1})
	}
	return faults
}

// runSchedule runs one seed and returns the violated invariants.
func runSchedule(t *testing.T, seed uint64) (violations []string, summary string) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	s, err := sim.New(sim.Config{Clock: clk, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer func() { srv.Close(); s.Close() }()
	faults := schedule(rng, s)
	faults = append(faults, priceFault(seed, s)...) // price_test.go
	clientRaw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: autoClock{clk}})
	client := retry.Wrap(clientRaw, retry.Policy{Clock: autoClock{clk}}) // as vastrun wraps it
	crashAt := int64(0)
	if rng.Float64() < 0.3 {
		crashAt = 1 + rng.Int64N(14)
	}
	var engineMarket provider.Market = client
	if slow := slowFor(rng, 0.2, 1, 8); slow != nil {
		engineMarket = slowMarket{Market: client, clk: autoClock{clk}, delay: slow}
		faults = append(faults, "slow-controller")
	}
	market := &crashMarket{Market: engineMarket, crashAt: crashAt, crashed: make(chan struct{})}

	root := t.TempDir()
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	secret := fmt.Sprintf("canary-%016x", rng.Uint64())
	var stream, uiOut, annot lockedBuf
	dotenv := filepath.Join(root, "vastrun.env")
	e := lifecycle.New(&lifecycle.Deps{
		Market: market, Clock: autoClock{clk}, Log: slog.New(slog.DiscardHandler), UI: ui{&uiOut}, Stream: &stream,
		Getenv: func(k string) string { return map[string]string{"CANARY_SECRET": secret}[k] },
		CI:     cienv.Env{System: "gitlab", DotenvFile: dotenv}, Redactor: redact.New(s.APIKey()),
		Approve: func(lifecycle.Plan) (bool, error) { return true, nil }, Annotations: &annot, Config: cfg,
		RepoDir: root, StateRoot: filepath.Join(root, "state"), EvidenceDir: filepath.Join(root, "ev"), Simulated: true,
		SSHKeepAlive: sshKeepAlive, Switch: sshSwitch{},
	})
	done := make(chan struct{})
	var receipt *receipt.Receipt
	var runErr error
	go func() {
		receipt, runErr = ci.Run(context.Background(), e)
		close(done)
	}()
	crashed := false
	select {
	case <-done:
	case <-market.crashed:
		crashed = true
	case <-time.After(60 * time.Second):
		return []string{"run did not finish within 60 s of wall time"}, strings.Join(faults, " ")
	}
	summary = fmt.Sprintf("faults=%v crashAt=%d", faults, crashAt)
	bad := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }

	switch {
	case crashed:
		// What a user has after a killed job: the dotenv state. The label is
		// written there before the create, so any rental is found by it.
		b, _ := os.ReadFile(dotenv)
		label := ""
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "label="); ok {
				label = v
			}
		}
		if label == "" {
			if live := s.Snapshot().Live; len(live) > 0 {
				bad("crash left %d live instances but no label in the CI state", len(live))
			}
			break
		}
		s.Inject(sim.Fault{Kind: sim.FaultClear}) // the operator runs `down` once the API behaves
		rcRaw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: autoClock{clk}})
		rc := retry.Wrap(rcRaw, retry.Policy{Clock: autoClock{clk}}) // as vastrun wraps it
		c := lifecycle.Confirmer{Market: rc, Clock: autoClock{clk}}
		if _, err := c.SweepLabel(context.Background(), label, clk.Now().Add(4*time.Minute), lifecycle.SweepSettle); err != nil {
			bad("recovery by label: %v", err)
		}
	default:
		var ce *lifecycle.CleanupError
		if receipt == nil {
			bad("no receipt (err %v)", runErr)
			break
		}
		if !receipt.Cleanup.Confirmed {
			if !errors.As(runErr, &ce) || !strings.Contains(annot.String(), "could not confirm") {
				bad("cleanup unconfirmed but not escalated: err=%v annotation=%q", runErr, annot.String())
			}
			s.Inject(sim.Fault{Kind: sim.FaultClear})
			e2 := *e
			e2.Market = client
			if err := e2.Open(e.RunDir()); err != nil {
				bad("reopen for down: %v", err)
			} else {
				if _, err := e2.Down(context.Background()); err != nil {
					bad("down after escalation: %v", err)
				}
				e2.Close()
			}
		}
		if receipt.Outcome == lifecycle.OutcomePassed && (receipt.Test == nil || receipt.Test.Result["ok"] != true) {
			bad("passed without the test's result: %+v", receipt.Test)
		}
	}

	st := s.Snapshot()
	if len(st.Live) != 0 {
		bad("%d live instances at the end: %+v", len(st.Live), st.Live)
	}
	for label, n := range st.MaxLivePerLabel {
		if n > 1 {
			bad("label %s had %d live contracts at once", label, n)
		}
	}
	// One poll of the most expensive allowed rate on top of the budget.
	if limit := cfg.Budget.MaxSpend + cfg.GPU.MaxDPH*(15*time.Second).Hours(); st.Spent > limit {
		bad("spent $%.4f, over the budget $%.2f plus one poll", st.Spent, cfg.Budget.MaxSpend)
	}
	for _, where := range []struct{ name, text string }{{"stream", stream.String()}, {"ui", uiOut.String()}, {"annotations", annot.String()}} {
		if strings.Contains(where.text, secret) || strings.Contains(where.text, s.APIKey()) {
			bad("a secret appeared in %s", where.name)
		}
	}
	dirs := []string{root}
	for _, in := range append(st.Gone, st.Live...) {
		dirs = append(dirs, in.Sandbox)
	}
	for _, d := range dirs {
		filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Size() > 1<<20 {
				return nil
			}
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(s.APIKey())) {
				bad("a secret appeared in %s", p)
			}
			return nil
		})
	}
	return violations, summary
}

func TestChaos(t *testing.T) {
	runFamily(t, "ci", *seeds, func(seed uint64) ([]string, string) { return runSchedule(t, seed) })
}

// sshSwitch stands in for the on-instance agent in the ci family (copying
// the vastrun binary to hundreds of instances would be most of the
// family's cost; the train family runs the real one): arming is one SSH
// round trip, so the family's SSH faults reach it as they reach the real
// arm, and the switch wants no beats.
type sshSwitch struct{}

func (sshSwitch) Arm(ctx context.Context, c *remote.Client, _ provider.InstanceID, req agent.ArmRequest) (agent.ArmResult, error) {
	if err := c.Run(ctx, remote.Command{Script: "mkdir -p .vastrun && echo armed > .vastrun/deadman.json"}); err != nil {
		return agent.ArmResult{}, err
	}
	return agent.ArmResult{Schema: agent.ArmSchema, SchemaVersion: agent.SchemaVersion, Armed: true, TTL: req.TTL, Bound: req.Bound, ClockSpeed: 1}, nil
}

func (sshSwitch) OpenHeartbeat(context.Context, *remote.Client, provider.InstanceID) (agent.HeartbeatPipe, error) {
	return nil, errors.New("the ci family's switch takes no beats")
}
