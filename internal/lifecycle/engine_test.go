package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/openapitest"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/workflow/ci"
)

const image = "ghcr.io/acme/gpu-test@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// autoClock advances the shared fake clock whenever the code waits, so a
// ten-minute readiness wait costs no wall time.
type autoClock struct{ f *clock.Fake }

func (a autoClock) Now() time.Time { return a.f.Now() }
func (a autoClock) After(d time.Duration) <-chan time.Time {
	ch := a.f.After(d)
	a.f.Advance(d)
	return ch
}

type harness struct {
	t       *testing.T
	sim     *sim.Server
	clk     *clock.Fake
	engine  *lifecycle.Scope
	ui      *bytes.Buffer
	stream  *bytes.Buffer
	annot   *bytes.Buffer
	ghOut   string
	secret  string
	webhook *webhookRecorder
	repo    string
	shows   *showLog // GET /api/v0/instances/{id}/ calls
}

// showLog is when (on the run's clock) each show of an instance came.
type showLog struct {
	mu sync.Mutex
	at []time.Time
}

// before counts the shows up to t.
func (l *showLog) before(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.at {
		if !a.After(t) {
			n++
		}
	}
	return n
}

type webhookRecorder struct {
	mu     sync.Mutex
	bodies []string
}

func (w *webhookRecorder) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.bodies = append(w.bodies, string(b))
	w.mu.Unlock()
}

func (w *webhookRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies...)
}

type lockedBuf struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

type ui struct{ w io.Writer }

func (u ui) Infof(format string, args ...any) {
	io.WriteString(u.w, "vastrun: "+strings.TrimSpace(fmt.Sprintf(format, args...))+"\n")
}

func newHarness(t *testing.T, cfgYAML string, approve bool) *harness {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	s, err := sim.New(sim.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	shows := &showLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v0/instances/") && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 3 {
			shows.mu.Lock()
			shows.at = append(shows.at, clk.Now())
			shows.mu.Unlock()
		}
		s.ServeHTTP(w, r)
	}))
	hook := &webhookRecorder{}
	hooksrv := httptest.NewServer(hook)
	t.Cleanup(func() { srv.Close(); hooksrv.Close(); s.Close() })
	// Every exchange of the engine is held to Vast's OpenAPI document.
	clientRaw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: autoClock{clk}, HTTPClient: openapitest.New(t).Client()})
	client := retry.Wrap(clientRaw, retry.Policy{Clock: autoClock{clk}}) // as vastrun wraps it

	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	os.MkdirAll(filepath.Join(repo, "scripts"), 0o755)
	os.WriteFile(filepath.Join(repo, "scripts", "gpu-test.sh"), []byte("#!/bin/sh\nnvidia-smi --query-gpu=name --format=csv,noheader\necho \"token is $HF_TOKEN\"\nprintf '{\"passed\": 3, \"failed\": 0}' > \"$VASTRUN_RESULT\"\n"), 0o755)
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Alert.Webhook = hooksrv.URL
	h := &harness{t: t, sim: s, clk: clk, ui: &bytes.Buffer{}, stream: &bytes.Buffer{}, annot: &bytes.Buffer{},
		ghOut: filepath.Join(root, "gh_output"), secret: "hf_" + strings.Repeat("Z", 34), webhook: hook, repo: repo, shows: shows}
	env := map[string]string{"HF_TOKEN": h.secret}
	h.engine = lifecycle.New(&lifecycle.Deps{
		Market: client, Clock: autoClock{clk}, Log: slog.New(slog.DiscardHandler), UI: ui{&lockedBuf{b: h.ui}},
		Stream: &lockedBuf{b: h.stream}, Getenv: func(k string) string { return env[k] },
		CI:          cienv.Env{System: "github", OutputFile: h.ghOut, StateFile: filepath.Join(root, "gh_state")},
		Redactor:    redact.New(s.APIKey()),
		Approve:     func(lifecycle.Plan) (bool, error) { return approve, nil },
		Annotations: h.annot, Config: cfg, RepoDir: repo, StateRoot: filepath.Join(root, "state"),
		EvidenceDir: filepath.Join(root, "evidence"), Simulated: true, Jitter: func() float64 { return 0.5 },
		Switch: &fakeSwitch{},
	})
	return h
}

const baseConfig = `
image: ` + image + `
test: sh scripts/gpu-test.sh
upload: [scripts]
secrets: [HF_TOKEN]
gpu:
  models: [RTX_4090]
  min_vram_gb: 20
  min_cuda: 12.0
  min_reliability: 0.95
  max_dph: 1.0
budget:
  max_spend: 2
timeouts:
  ready: 10m
  job: 5m
`

func (h *harness) noLeaks() {
	h.t.Helper()
	if live := h.sim.Snapshot().Live; len(live) != 0 {
		h.t.Fatalf("leaked instances: %+v\nui:\n%s", live, h.ui)
	}
}

func (h *harness) evidence(name string) string {
	b, err := os.ReadFile(filepath.Join(h.engine.EvidenceDir, name))
	if err != nil {
		h.t.Fatalf("evidence %s: %v", name, err)
	}
	return string(b)
}

func TestCIHappyPath(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	r, err := ci.Run(context.Background(), h.engine)
	if err != nil {
		t.Fatalf("ci: %v\n%s", err, h.ui)
	}
	h.noLeaks()
	if r.Outcome != lifecycle.OutcomePassed || !r.Test.Passed() || r.Test.Result["passed"] != 3.0 {
		t.Fatalf("receipt: %+v %+v", r, r.Test)
	}
	a := r.Attempts[0]
	if len(r.Attempts) != 1 || a.InstanceID == 0 || !a.Confirmed || strings.Join(a.ConfirmedBy, ",") != "show,label_listing" || a.GPUName != "RTX 4090" {
		t.Fatalf("attempt: %+v", a)
	}
	if !r.Cleanup.Confirmed || r.Cost.ChargedUSD == nil || *r.Cost.ChargedUSD <= 0 || r.Cost.EstimateUSD <= 0 || r.ManifestSHA256 == "" {
		t.Fatalf("cost/cleanup: %+v %+v", r.Cost, r.Cleanup)
	}
	for _, k := range []string{"select", "rent", "ready", "verify", "test", "teardown", "elapsed", "overhead_before_test", "overhead_after_test"} {
		if _, ok := r.Timings[k]; !ok {
			t.Errorf("timing %s missing: %v", k, r.Timings)
		}
	}
	// Evidence: manifest, receipt, selection, verify, logs, summary.
	for _, f := range []string{"manifest.json", "receipt.json", "selection.json", "verify.json", "test.log", "summary.md", "result.json"} {
		h.evidence(f)
	}
	if log := h.evidence("test.log"); !strings.Contains(log, "NVIDIA GeForce RTX 4090") || strings.Contains(log, h.secret) || !strings.Contains(log, "token is ***") {
		t.Fatalf("test.log (secret must be masked):\n%s", log)
	}
	// The instance id reached the CI state at rent time.
	if out, _ := os.ReadFile(h.ghOut); !strings.Contains(string(out), "instance_id="+a.InstanceID.String()) {
		t.Fatalf("GITHUB_OUTPUT: %q", out)
	}
	// No secret anywhere in the journal or evidence.
	assertNoSecret(t, h.secret, h.engine.RunDir(), h.engine.EvidenceDir)
	assertNoSecret(t, h.sim.APIKey(), h.engine.RunDir(), h.engine.EvidenceDir)
	// Intent precedes the side effect in the journal.
	recs, _ := journal.Read(h.engine.RunDir())
	order := ""
	for _, rec := range recs {
		if (rec.Step == "rent" || rec.Step == "destroy") && rec.Type != "condition" {
			order += rec.Type + ":" + rec.Step + " "
		}
	}
	if !strings.HasPrefix(order, "intent:rent done:rent intent:destroy done:destroy") {
		t.Fatalf("journal order: %s", order)
	}
}

func assertNoSecret(t *testing.T, secret string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
					t.Errorf("secret found in %s", p)
				}
			}
			return nil
		})
	}
}

func TestCITestFailsStillDestroyed(t *testing.T) {
	h := newHarness(t, strings.Replace(baseConfig, "test: sh scripts/gpu-test.sh", "test: echo failing; exit 4", 1), true)
	r, err := ci.Run(context.Background(), h.engine)
	var tf *lifecycle.TestFailedError
	if !errors.As(err, &tf) || tf.Code != 4 || r.Outcome != lifecycle.OutcomeFailed || !r.Cleanup.Confirmed {
		t.Fatalf("err %v receipt %+v", err, r)
	}
	h.noLeaks()
}

func TestCIGateFailsNoRental(t *testing.T) {
	h := newHarness(t, baseConfig+"gate: [\"true\", \"echo cpu tests failed; exit 1\"]\n", true)
	r, err := ci.Run(context.Background(), h.engine)
	if !errors.Is(err, lifecycle.ErrGated) || r.Outcome != lifecycle.OutcomeGated || len(r.Attempts) != 0 {
		t.Fatalf("err %v receipt %+v", err, r)
	}
	if st := h.sim.Snapshot(); len(st.Live)+len(st.Gone) != 0 {
		t.Fatal("something was rented despite the failed gate")
	}
	if !strings.Contains(h.evidence("gate.log"), "cpu tests failed") {
		t.Fatal("gate log missing")
	}
}

func TestCINoOfferAndNotApproved(t *testing.T) {
	h := newHarness(t, strings.Replace(baseConfig, "max_dph: 1.0", "max_dph: 0.01", 1), true)
	r, err := ci.Run(context.Background(), h.engine)
	if !errors.Is(err, lifecycle.ErrNoOffer) || r.Outcome != lifecycle.OutcomeNoOffer || !strings.Contains(h.evidence("selection.json"), "is over the ceiling $0.0100/h") {
		t.Fatalf("no offer: %v %+v", err, r)
	}
	h = newHarness(t, baseConfig, false)
	r, err = ci.Run(context.Background(), h.engine)
	if !errors.Is(err, lifecycle.ErrNeedsApproval) || r.Outcome != lifecycle.OutcomeNotApproved {
		t.Fatalf("not approved: %v %+v", err, r)
	}
	if st := h.sim.Snapshot(); len(st.Live)+len(st.Gone) != 0 {
		t.Fatal("rented without approval")
	}
}

func TestCIBudgetRefusesBeforeRenting(t *testing.T) {
	h := newHarness(t, strings.Replace(baseConfig, "max_spend: 2", "max_spend: 0.01", 1), true)
	r, err := ci.Run(context.Background(), h.engine)
	if r.Outcome != lifecycle.OutcomeBudget || err == nil || !strings.Contains(err.Error(), "budget.max_spend") {
		t.Fatalf("%v %+v", err, r)
	}
	if st := h.sim.Snapshot(); len(st.Live)+len(st.Gone) != 0 {
		t.Fatal("rented over budget")
	}
}

func TestCIAmbiguousCreatesAreAdoptedNotRepeated(t *testing.T) {
	for _, kind := range []string{sim.FaultCreateErrorWithContract, sim.FaultCreateLostResponse} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, baseConfig, true)
			h.sim.Inject(sim.Fault{Kind: kind})
			h.sim.Inject(sim.Fault{Kind: sim.FaultReadLag, Count: 2})
			r, err := ci.Run(context.Background(), h.engine)
			if err != nil || r.Outcome != lifecycle.OutcomePassed {
				t.Fatalf("%v %+v\n%s", err, r, h.ui)
			}
			if st := h.sim.Snapshot(); len(st.Gone) != 1 {
				t.Fatalf("%d contracts were rented; want exactly 1", len(st.Gone))
			}
			h.noLeaks()
		})
	}
}

func TestCIImagePullFailureRetriesOnAnotherMachine(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	// Fail the pull on the machine the policy picks first.
	q := h.engine.Config.Policy().Query(200)
	offers, _ := h.engine.Market.SearchOffers(context.Background(), q)
	first := offers[0].MachineID
	for _, o := range offers { // cheapest total first, as the policy orders them
		if o.DPHTotal < offers[0].DPHTotal {
			first = o.MachineID
		}
	}
	h.sim.Inject(sim.Fault{Kind: sim.FaultImagePull, Machine: first})
	r, err := ci.Run(context.Background(), h.engine)
	if err != nil || r.Outcome != lifecycle.OutcomePassed || len(r.Attempts) != 2 {
		t.Fatalf("%v %+v\n%s", err, r, h.ui)
	}
	if !strings.Contains(r.Attempts[0].Failure, "manifest") || r.Attempts[0].MachineID != first || r.Attempts[1].MachineID == first || !r.Attempts[0].Confirmed {
		t.Fatalf("attempts: %+v %+v", r.Attempts[0], r.Attempts[1])
	}
	h.noLeaks()
}

func TestCIDestroyNoopThenWorks(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	h.sim.Inject(sim.Fault{Kind: sim.FaultDestroyNoop, Count: 3})
	r, err := ci.Run(context.Background(), h.engine)
	if err != nil || !r.Cleanup.Confirmed {
		t.Fatalf("%v %+v", err, r)
	}
	h.noLeaks()
}

func TestCIDestroyNeverWorksIsEscalated(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	h.sim.Inject(sim.Fault{Kind: sim.FaultDestroyNoop, Count: -1})
	r, err := ci.Run(context.Background(), h.engine)
	var ce *lifecycle.CleanupError
	if !errors.As(err, &ce) || r.Cleanup.Confirmed || len(r.Cleanup.Unconfirmed) != 1 || !r.Cleanup.AlertSent {
		t.Fatalf("%v %+v", err, r.Cleanup)
	}
	id := r.Cleanup.Unconfirmed[0]
	hooks := h.webhook.all()
	var payload struct {
		Event       string                `json:"event"`
		InstanceIDs []provider.InstanceID `json:"instance_ids"`
		Label       string                `json:"label"`
	}
	if len(hooks) != 1 || json.Unmarshal([]byte(hooks[0]), &payload) != nil || payload.Event != "vastrun.cleanup_unconfirmed" || payload.InstanceIDs[0] != id || payload.Label != r.Label {
		t.Fatalf("webhook: %v", hooks)
	}
	if !strings.Contains(h.annot.String(), "::error title=vastrun::") || !strings.Contains(h.annot.String(), id.String()) {
		t.Fatalf("annotation: %q", h.annot)
	}
	// The journal still tracks it, and a later down (once destroy works) cleans up.
	h.sim.Inject(sim.Fault{Kind: sim.FaultClear})
	e2 := *h.engine
	if err := e2.Open(h.engine.RunDir()); err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if _, err := e2.Down(context.Background()); err != nil {
		t.Fatalf("down: %v", err)
	}
	h.noLeaks()
}

func TestCICancelWhileWaitingForReadiness(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	h.sim.Inject(sim.Fault{Kind: sim.FaultSlowLoading, Seconds: 3600})
	ctx, cancel := context.WithCancel(context.Background())
	h.clk.OnWait = func(time.Duration) {
		if len(h.sim.Snapshot().Live) > 0 {
			cancel() // SIGINT arrives while vastrun waits for the instance
		}
	}
	r, err := ci.Run(ctx, h.engine)
	h.clk.OnWait = nil
	if !errors.Is(err, context.Canceled) || r.Outcome != lifecycle.OutcomeInterrupted || !r.Cleanup.Confirmed {
		t.Fatalf("%v %+v", err, r)
	}
	h.noLeaks()
}

// panicUI panics when the engine reports the instance verified: a bug in
// vastrun on the engine's goroutine, after the instance is rented.
type panicUI struct{}

func (panicUI) Infof(format string, args ...any) {
	if strings.HasPrefix(format, "verified instance") {
		panic("boom after renting")
	}
}

func TestCIPanicStillTearsDown(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	h.engine.UI = panicUI{}
	r, err := ci.Run(context.Background(), h.engine)
	if err == nil || !strings.Contains(err.Error(), "panic") || r.Outcome != lifecycle.OutcomeError || !r.Cleanup.Confirmed {
		t.Fatalf("%v %+v", err, r)
	}
	h.noLeaks()
}

func TestCIPathsSkipWhenUntouched(t *testing.T) {
	h := newHarness(t, baseConfig+"paths: [\"gpu/**\"]\n", true)
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = h.repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-qm", "base")
	git("checkout", "-qb", "change")
	os.WriteFile(filepath.Join(h.repo, "README.md"), []byte("docs only\n"), 0o644)
	git("add", ".")
	git("commit", "-qm", "docs")
	h.engine.Base = "main"
	r, err := ci.Run(context.Background(), h.engine)
	if !errors.Is(err, lifecycle.ErrSkipped) || r.Outcome != lifecycle.OutcomeSkipped {
		t.Fatalf("docs-only change: %v %+v", err, r)
	}
	if st := h.sim.Snapshot(); len(st.Live)+len(st.Gone) != 0 {
		t.Fatal("rented for a change outside paths:")
	}
	// Touch gpu/: the step runs.
	os.MkdirAll(filepath.Join(h.repo, "gpu"), 0o755)
	os.WriteFile(filepath.Join(h.repo, "gpu", "kernel.cu"), []byte("//\n"), 0o644)
	git("add", ".")
	git("commit", "-qm", "gpu")
	h2 := *h.engine
	h2.EvidenceDir = filepath.Join(h.engine.EvidenceDir, "second")
	r, err = ci.Run(context.Background(), &h2)
	if err != nil || r.Outcome != lifecycle.OutcomePassed || len(r.Commit) != 40 {
		t.Fatalf("gpu change: %v %+v", err, r)
	}
	h.noLeaks()
}

func TestRunIsLockedAgainstASecondProcess(t *testing.T) {
	h := newHarness(t, baseConfig, true)
	if _, err := ci.Up(context.Background(), h.engine); err != nil {
		t.Fatal(err)
	}
	first := *h.engine
	if err := first.Open(h.engine.RunDir()); err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second := *h.engine
	if err := second.Open(h.engine.RunDir()); !errors.Is(err, journal.ErrLocked) {
		t.Fatalf("second driver of the same run: %v, want ErrLocked", err)
	}
	if _, err := first.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.noLeaks()
}
