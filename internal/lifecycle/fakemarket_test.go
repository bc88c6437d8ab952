package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/runstate"
)

// fakeMarket is an in-memory Market for the step tables: the offers it
// returns, instances whose actual_status follows a script, per-method
// scripted errors and a log of every call in order. It is as strict as
// the contract in internal/provider: a destroyed instance is not found,
// a listing that fails is an error, never an empty result.
type fakeMarket struct {
	mu        sync.Mutex
	offers    []provider.Offer
	instances map[provider.InstanceID]*fakeInstance
	order     []provider.InstanceID // creation order, for listings
	nextID    provider.InstanceID
	// statuses scripts the actual_status each show of an instance
	// rented from an offer returns, one per show, the last repeating
	// (default: running at once).
	statuses map[provider.OfferID][]string
	errs     map[string][]error // by method, one popped per call; nil passes
	// createLag hides each new instance from this many label listings.
	createLag int
	log       []string
	// now is the run's clock (newStepRig sets it): each call's time goes
	// to logAt, and an instance added with addAt appears only at its time.
	now   func() time.Time
	logAt []time.Time
	// sshHost and sshPort are where a running instance publishes SSH
	// (default 192.0.2.1:2222, where nothing listens).
	sshHost string
	sshPort int
}

var _ provider.Market = (*fakeMarket)(nil)

type fakeInstance struct {
	inst      provider.Instance
	statuses  []string
	destroyed bool
	// listLag hides the instance from this many label listings (a
	// read-after-create lag).
	listLag int
	// appearAt: a create processed late; before this time no show,
	// listing or destroy sees it.
	appearAt time.Time
	// ghost keeps a destroyed instance in this many more label listings
	// (a listing that lags a destroy).
	ghost int
}

// hidden reports a late instance that has not appeared yet.
func (m *fakeMarket) hidden(in *fakeInstance) bool {
	return !in.appearAt.IsZero() && m.now != nil && m.now().Before(in.appearAt)
}

// rentedAnyway is a scripted create error whose create rented all the
// same: a lost response or an error body that carried new_contract.
type rentedAnyway struct{ err error }

func (r rentedAnyway) Error() string { return r.err.Error() }

func newFakeMarket(offers ...provider.Offer) *fakeMarket {
	return &fakeMarket{offers: offers, instances: map[provider.InstanceID]*fakeInstance{},
		nextID: 101, statuses: map[provider.OfferID][]string{}, errs: map[string][]error{}}
}

// fail scripts the next calls of method to fail with errs, in order (a
// nil entry lets that call through).
func (m *fakeMarket) fail(method string, errs ...error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs[method] = append(m.errs[method], errs...)
}

// add puts a live instance carrying label on the market, as if rented
// outside this run's knowledge (or before the test began).
func (m *fakeMarket) add(id provider.InstanceID, machine int64, label string, listLag int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.instances[id] = &fakeInstance{inst: provider.Instance{ID: id, MachineID: machine, Label: label, ActualStatus: "running"}, listLag: listLag}
	m.order = append(m.order, id)
}

// addAt puts an instance carrying label on the market that appears only
// at (a create Vast processed late).
func (m *fakeMarket) addAt(id provider.InstanceID, label string, at time.Time) {
	m.add(id, int64(id), label, 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.instances[id].appearAt = at
}

// callsAt is when each call of calls was made, on the run's clock.
func (m *fakeMarket) callsAt() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.logAt)
}

// calls is the log of every call so far: "search", "create <offer>",
// "show <id>", "list", "destroy <id>", "attach <id>", "charges".
func (m *fakeMarket) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

// live lists the instances not destroyed.
func (m *fakeMarket) live() []provider.InstanceID {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []provider.InstanceID
	for _, id := range m.order {
		if !m.instances[id].destroyed {
			out = append(out, id)
		}
	}
	return out
}

// call logs one call and pops its scripted error.
func (m *fakeMarket) call(method string, arg any) error {
	entry := method
	if arg != nil {
		entry = fmt.Sprintf("%s %v", method, arg)
	}
	m.log = append(m.log, entry)
	if m.now != nil {
		m.logAt = append(m.logAt, m.now())
	}
	if q := m.errs[method]; len(q) > 0 {
		m.errs[method] = q[1:]
		return q[0]
	}
	return nil
}

func (m *fakeMarket) SearchOffers(_ context.Context, _ provider.Query) ([]provider.Offer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("search", nil); err != nil {
		return nil, err
	}
	return slices.Clone(m.offers), nil
}

func (m *fakeMarket) CreateInstance(_ context.Context, req provider.CreateRequest) (provider.CreateResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.call("create", req.OfferID)
	var anyway rentedAnyway
	rented := errors.As(err, &anyway)
	if err != nil && !rented {
		return provider.CreateResult{}, err
	}
	var o provider.Offer
	for _, x := range m.offers {
		if x.ID == req.OfferID {
			o = x
		}
	}
	if o.ID == 0 {
		return provider.CreateResult{}, &provider.APIError{Op: fmt.Sprintf("create instance from offer %d", req.OfferID), Status: 404, Code: "no_such_ask"}
	}
	id := m.nextID
	m.nextID++
	st := m.statuses[o.ID]
	if len(st) == 0 {
		st = []string{"running"}
	}
	m.instances[id] = &fakeInstance{statuses: st, listLag: m.createLag, inst: provider.Instance{ID: id, MachineID: o.MachineID, Label: req.Label,
		GPUName: o.GPUName, NumGPUs: o.NumGPUs, GPURAMMB: o.GPURAMMB, CUDAMax: o.CUDAMax, DPHTotal: o.DPHTotal, DPHBase: o.DPHBase}}
	m.order = append(m.order, id)
	if rented {
		return provider.CreateResult{}, anyway.err
	}
	return provider.CreateResult{InstanceID: id}, nil
}

func (m *fakeMarket) ShowInstance(_ context.Context, id provider.InstanceID) (provider.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("show", id); err != nil {
		return provider.Instance{}, err
	}
	in, ok := m.instances[id]
	if !ok || in.destroyed || m.hidden(in) {
		return provider.Instance{}, &provider.APIError{Op: fmt.Sprintf("show instance %d", id), Status: 404, Code: "no_such_instance"}
	}
	if len(in.statuses) > 0 {
		in.inst.ActualStatus = in.statuses[0]
		if len(in.statuses) > 1 {
			in.statuses = in.statuses[1:]
		}
	}
	inst := in.inst
	switch inst.ActualStatus {
	case "running":
		// Published SSH: Running() is true. Nothing listens at the default
		// address; a test that gets this far stops the step before it
		// dials, or sets sshHost/sshPort.
		host, port := "192.0.2.1", 2222
		if m.sshHost != "" {
			host, port = m.sshHost, m.sshPort
		}
		inst.PublicIP, inst.Ports = host, map[string][]provider.PortBinding{"22/tcp": {{HostPort: port}}}
	case "paused": // stopped by the host: an outbid bid, a preemption
		inst.ActualStatus, inst.IntendedStatus, inst.CurState, inst.NextState = "stopped", "stopped", "stopped", "stopped"
	}
	return inst, nil
}

func (m *fakeMarket) ListInstances(_ context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("list", nil); err != nil {
		return nil, err
	}
	var out []provider.Instance
	for _, id := range m.order {
		in := m.instances[id]
		if len(opts.Labels) > 0 && !slices.Contains(opts.Labels, in.inst.Label) || m.hidden(in) {
			continue
		}
		if in.destroyed {
			if in.ghost > 0 {
				in.ghost--
				out = append(out, in.inst)
			}
			continue
		}
		if in.listLag > 0 {
			in.listLag--
			continue
		}
		out = append(out, in.inst)
	}
	return out, nil
}

func (m *fakeMarket) DestroyInstance(_ context.Context, id provider.InstanceID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("destroy", id); err != nil {
		return err
	}
	if in, ok := m.instances[id]; ok && !m.hidden(in) {
		in.destroyed = true
	}
	return nil // idempotent: an instance already gone (or not there yet) is success
}

func (m *fakeMarket) AttachSSHKey(_ context.Context, id provider.InstanceID, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.call("attach", id)
}

func (m *fakeMarket) Charges(_ context.Context, _ provider.ChargeQuery) ([]provider.Charge, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return nil, m.call("charges", nil)
}

// stepClock advances the fake clock whenever the code waits, so a
// ten-minute readiness wait or a four-minute teardown costs no wall time.
type stepClock struct{ f *clock.Fake }

func (a stepClock) Now() time.Time { return a.f.Now() }
func (a stepClock) After(d time.Duration) <-chan time.Time {
	ch := a.f.After(d)
	a.f.Advance(d)
	return ch
}

const (
	stepImage  = "ghcr.io/acme/gpu-test@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	stepConfig = `
image: ` + stepImage + `
test: sh scripts/gpu-test.sh
gpu:
  models: [RTX_4090]
  max_dph: 1.0
budget:
  max_spend: 2
timeouts:
  ready: 10m
  job: 5m
`
)

// offer is an offer the step config's policy accepts, on machine.
func offer(id provider.OfferID, machine int64, dph float64) provider.Offer {
	return provider.Offer{ID: id, MachineID: machine, GPUName: "RTX 4090", NumGPUs: 1, GPURAMMB: 24000, CUDAMax: 12.4,
		Reliability: 0.99, Verification: "verified", DiskSpaceGB: 100, Rentable: true, DPHBase: dph, DPHTotal: dph, StorageCostMonth: 0.1}
}

// stepRig is one step's world: a scope on a temp dir with a begun run, the
// fake market behind it, and what the approval was asked.
type stepRig struct {
	t         *testing.T
	s         *Scope
	m         *fakeMarket
	clk       *clock.Fake
	env       map[string]string
	approve   bool
	approvals []Plan
}

// newStepRig begins a run of cfgYAML (see stepConfig) on m. It neither
// freezes nor rents: a test does what its step needs first.
func newStepRig(t *testing.T, cfgYAML string, m *fakeMarket) *stepRig {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	r := &stepRig{t: t, m: m, clk: clk, env: map[string]string{}, approve: true}
	m.now = clk.Now
	r.s = New(&Deps{
		Market: m, Clock: stepClock{clk}, Log: slog.New(slog.DiscardHandler),
		Getenv:   func(k string) string { return r.env[k] },
		Redactor: redact.New(),
		Approve: func(p Plan) (bool, error) {
			r.approvals = append(r.approvals, p)
			return r.approve, nil
		},
		Annotations: io.Discard, Config: cfg, RepoDir: repo, StateRoot: filepath.Join(root, "state"),
		EvidenceDir: filepath.Join(root, "evidence"), Jitter: func() float64 { return 0.5 },
	})
	if err := r.s.Begin("ci"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.s.Close() })
	if err := os.MkdirAll(r.s.EvidenceDir, 0o755); err != nil { // as Execute does
		t.Fatal(err)
	}
	return r
}

// rented journals an instance of the run as the rent step would (intent,
// then done), without asking the market.
func (r *stepRig) rented(id provider.InstanceID, machine int64) {
	r.t.Helper()
	if err := r.s.Record("intent", stepRent, runstate.RentIntent{Label: r.s.state.Label, Offer: provider.OfferID(id), Attempt: receipt.Attempt{MachineID: machine}}); err != nil {
		r.t.Fatal(err)
	}
	if err := r.s.Record("done", stepRent, runstate.InstanceData{Instance: id, Reason: "created"}); err != nil {
		r.t.Fatal(err)
	}
}

// journal is the run's journal on disk as "type:step" entries.
func (r *stepRig) journal() []string {
	r.t.Helper()
	recs, err := journal.Read(r.s.RunDir())
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, rec := range recs {
		out = append(out, rec.Type+":"+rec.Step)
	}
	return out
}

// count is how many entries of list equal s.
func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// before reports whether a occurs in list, and before any b.
func before(list []string, a, b string) bool {
	ia := slices.Index(list, a)
	ib := slices.Index(list, b)
	return ia >= 0 && (ib < 0 || ia < ib)
}

// only keeps the calls of the given methods.
func only(calls []string, methods ...string) []string {
	out := []string{}
	for _, c := range calls {
		if slices.Contains(methods, strings.Fields(c)[0]) {
			out = append(out, c)
		}
	}
	return out
}
