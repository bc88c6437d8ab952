package sim_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/openapitest"
	"github.com/vastrun/vastrun/internal/provider/providertest"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	gossh "golang.org/x/crypto/ssh"
)

var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type env struct {
	sim    *sim.Server
	srv    *httptest.Server
	clk    *clock.Fake
	client *retry.Client
	// api checks every exchange against Vast's OpenAPI document.
	api *openapitest.Checker
}

func newEnv(t *testing.T, cfg sim.Config) *env {
	t.Helper()
	return newEnvChecked(t, cfg, openapitest.New(t))
}

// newEnvChecked is newEnv with a given contract checker (shared by the
// cases of TestOpenAPIContract).
func newEnvChecked(t *testing.T, cfg sim.Config, api *openapitest.Checker) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	cfg.Clock = clk
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	e := &env{sim: s, srv: srv, clk: clk, api: api}
	e.client = e.clientWithKey(t, s.APIKey())
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	return e
}

// clientWithKey makes a real client behind the retry decorator, as vastrun
// builds it, whose backoff sleeps advance the fake clock, so retries cost
// no wall time.
func (e *env) clientWithKey(t *testing.T, key string) *retry.Client {
	c, err := vast.New(vast.Options{BaseURL: e.srv.URL, APIKey: key, Clock: advancingClock{e.clk}, HTTPClient: e.api.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return retry.Wrap(c, retry.Policy{Clock: advancingClock{e.clk}})
}

// rawClient is a real client whose requests are not held to the document,
// for tests that send what Vast refuses on purpose.
func (e *env) rawClient(t *testing.T) *vast.Client {
	c, err := vast.New(vast.Options{BaseURL: e.srv.URL, APIKey: e.sim.APIKey(), Clock: advancingClock{e.clk}, HTTPClient: e.api.ResponsesOnly()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type advancingClock struct{ f *clock.Fake }

func (a advancingClock) Now() time.Time { return a.f.Now() }
func (a advancingClock) After(d time.Duration) <-chan time.Time {
	ch := a.f.After(d)
	a.f.Advance(d)
	return ch
}

// assertNoLeaks is the end-of-test check every scenario makes.
func (e *env) assertNoLeaks(t *testing.T) {
	t.Helper()
	if live := e.sim.Snapshot().Live; len(live) != 0 {
		t.Fatalf("leaked instances: %+v", live)
	}
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		e := newEnv(t, sim.Config{})
		q, err := vast.ParseQuery("num_gpus=1 gpu_name=RTX_4090", vast.QueryOptions{Order: "dph_total", StorageGB: 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.assertNoLeaks(t) })
		return providertest.Harness{
			Market: e.client, BadKey: e.clientWithKey(t, strings.Repeat("0", 64)), NoKey: e.clientWithKey(t, ""),
			WithKey: func(k string) provider.Marketplace { return e.clientWithKey(t, k) },
			Sleep:   func(ctx context.Context, d time.Duration) error { e.clk.Advance(d); return ctx.Err() }, Now: e.clk.Now,
			Image: "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", Query: q, ReadyTimeout: 5 * time.Minute,
			Ops: e.client, Cloud: simCloud{e.sim}, Faults: simMarket{e.sim},
		}
	})
}

// simCloud is the far side of the simulator's cloud integrations.
type simCloud struct{ s *sim.Server }

func (c simCloud) Put(id int64, name, content string) error {
	p := filepath.Join(c.s.CloudDir(id), name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o600)
}

func (c simCloud) Get(id int64, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.s.CloudDir(id), name))
	return string(b), err
}

func get(t *testing.T, url string, header map[string]string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// Tests send odd requests on purpose; the simulator's answers must
	// still be Vast's.
	res, err := openapitest.New(t).ResponsesOnly().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Content-Type"), string(b)
}

func TestWireAuthFormsAndEnvelope(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	key := e.sim.APIKey()
	base := e.srv.URL + "/api/v0/users/current/"

	code, ctype, body := get(t, base, map[string]string{"Authorization": "Bearer " + key})
	if code != 200 || ctype != "application/json" || !strings.Contains(body, `"credit"`) {
		t.Fatalf("Bearer: %d %q %s", code, ctype, body)
	}
	if code, _, _ := get(t, base+"?api_key="+key, nil); code != 200 {
		t.Fatalf("?api_key= form: %d", code)
	}
	if code, _, _ := get(t, e.srv.URL+"/api/v0/users/current?api_key="+key, nil); code != 200 {
		t.Fatalf("no trailing slash: %d", code)
	}
	code, ctype, body = get(t, base, nil)
	if code != 403 || ctype != "application/json" || !strings.Contains(body, `"auth_error"`) || !strings.Contains(body, "requires login") {
		t.Fatalf("missing key: %d %q %s", code, ctype, body)
	}
	code, _, body = get(t, base, map[string]string{"Authorization": "Bearer nope"})
	if code != 404 || !strings.Contains(body, `"auth_error"`) || !strings.Contains(body, "Invalid user key") {
		t.Fatalf("bad key: %d %s", code, body)
	}
	// The 2024 CLI's owner=me is refused since 2026-04-29 (vast-cli #382).
	code, ctype, body = get(t, base+"?owner=me", map[string]string{"Authorization": "Bearer " + key})
	if code != 400 || ctype != "application/json" || !strings.Contains(body, `"invalid_args"`) || !strings.Contains(body, "owner") {
		t.Fatalf("owner=me on users/current: %d %q %s", code, ctype, body)
	}
	code, _, body = get(t, e.srv.URL+"/api/v0/instances/?owner=me", map[string]string{"Authorization": "Bearer " + key})
	if code != 410 || !strings.Contains(body, "deprecated_endpoint") {
		t.Fatalf("v0 list: %d %s", code, body)
	}
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultV0List, Status: 200}); err != nil {
		t.Fatal(err)
	}
	if code, _, body = get(t, e.srv.URL+"/api/v0/instances/", map[string]string{"Authorization": "Bearer " + key}); code != 200 || !strings.Contains(body, `"instances"`) {
		t.Fatalf("v0 list switched on: %d %s", code, body)
	}
}

func TestSearchLegacyFormsAndBadQueries(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	q := `{"gpu_name":{"eq":"RTX 4090"},"num_gpus":{"eq":"1"},"limit":3}`
	code, _, body := get(t, e.srv.URL+"/api/v0/bundles?q="+urlEncode(q), nil)
	if code != 200 || !strings.Contains(body, `"RTX 4090"`) {
		t.Fatalf("legacy GET bundles (anonymous): %d %s", code, body[:min(200, len(body))])
	}
	req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/api/v0/search/asks/", strings.NewReader(`{"select_cols":["*"],"q":`+q+`}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT search/asks: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("PUT search/asks: %v", res.Status)
	}
	// A field Vast does not know, sent on purpose: only the answer is held
	// to the document.
	_, err = e.rawClient(t).SearchOffers(context.Background(), provider.Query{"no_such_field": map[string]any{"eq": 1}})
	var apiErr *provider.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Msg, "no_such_field") {
		t.Fatalf("unknown field: %v", err)
	}
	// Geolocation by country code, driver version by integer encoding.
	offers, err := e.client.SearchOffers(context.Background(), provider.Query{
		"geolocation":    map[string]any{"in": []any{"US", "CA"}},
		"driver_version": map[string]any{"gte": 550000000},
		"gpu_ram":        map[string]any{"gte": 24000.0},
		"limit":          500,
	})
	if err != nil || len(offers) == 0 {
		t.Fatalf("geo search: %v %d", err, len(offers))
	}
	for _, o := range offers {
		if cc := o.CountryCode(); cc != "US" && cc != "CA" {
			t.Errorf("offer %d in %q", o.ID, o.Geolocation)
		}
		if o.GPURAMMB < 24000 {
			t.Errorf("offer %d has %v MB", o.ID, o.GPURAMMB)
		}
	}
	// Bid searches price the GPU at min_bid.
	bid, err := e.client.SearchOffers(context.Background(), provider.Query{"type": "bid", "limit": 5, "allocated_storage": 0})
	if err != nil || len(bid) == 0 || !bid[0].IsBid || math.Abs(bid[0].DPHTotal-bid[0].MinBid) > 1e-6 {
		t.Fatalf("bid search: %v %+v", err, bid)
	}
}

func urlEncode(s string) string {
	r := strings.NewReplacer("{", "%7B", "}", "%7D", `"`, "%22", ":", "%3A", ",", "%2C", " ", "%20", "[", "%5B", "]", "%5D")
	return r.Replace(s)
}

func rent(t *testing.T, e *env, label string) (provider.Offer, provider.InstanceID) {
	t.Helper()
	q, _ := vast.ParseQuery("num_gpus=1 gpu_name=RTX_4090", vast.QueryOptions{Order: "dph_total"})
	offers, err := e.client.SearchOffers(context.Background(), q)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	res, err := e.client.CreateInstance(context.Background(), provider.CreateRequest{OfferID: offers[0].ID, Image: "img:1", DiskGB: 20, Label: label})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return offers[0], res.InstanceID
}

func TestStateMachineAndBilling(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true, ScheduleDelay: 2 * time.Second, LoadDuration: 8 * time.Second})
	ctx := context.Background()
	offer, id := rent(t, e, "billing")
	inst, err := e.client.ShowInstance(ctx, id)
	if err != nil || inst.ActualStatus != "" || inst.IntendedStatus != "running" {
		t.Fatalf("fresh instance should have null actual_status: %+v %v", inst, err)
	}
	e.clk.Advance(2 * time.Second)
	if inst, _ = e.client.ShowInstance(ctx, id); inst.ActualStatus != "loading" || !strings.Contains(inst.StatusMsg, "Pulling") {
		t.Fatalf("after schedule: %+v", inst)
	}
	e.clk.Advance(8 * time.Second)
	if inst, _ = e.client.ShowInstance(ctx, id); inst.ActualStatus != "running" || !strings.HasPrefix(inst.StatusMsg, "success, running") {
		t.Fatalf("after load: %+v", inst)
	}
	storage := offer.StorageCostMonth * 20 / 720
	// 10 s of storage-only, then one hour running.
	e.clk.Advance(time.Hour)
	snap := e.sim.Snapshot()
	gotGPU, gotDisk := snap.Live[0].GPUCost, snap.Live[0].DiskCost
	if math.Abs(gotGPU-offer.DPHBase) > 1e-6 || math.Abs(gotDisk-storage*(3610.0/3600)) > 1e-6 {
		t.Fatalf("after 1h running: gpu %v (want %v) disk %v (want %v)", gotGPU, offer.DPHBase, gotDisk, storage*3610/3600)
	}
	// Preemption: paused, storage only.
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultPreempt, Instance: int64(id)}); err != nil {
		t.Fatal(err)
	}
	inst, _ = e.client.ShowInstance(ctx, id)
	if !inst.Paused() || inst.Running() {
		t.Fatalf("preempted instance should carry the paused signature: %+v", inst)
	}
	e.clk.Advance(time.Hour)
	snap = e.sim.Snapshot()
	if math.Abs(snap.Live[0].GPUCost-gotGPU) > 1e-9 || math.Abs(snap.Live[0].DiskCost-gotDisk-storage) > 1e-6 {
		t.Fatalf("paused hour billed gpu %v disk %v", snap.Live[0].GPUCost-gotGPU, snap.Live[0].DiskCost-gotDisk)
	}
	// Offline bills nothing.
	e.sim.Inject(sim.Fault{Kind: sim.FaultOffline, Instance: int64(id)})
	before := e.sim.Snapshot().Spent
	e.clk.Advance(time.Hour)
	if after := e.sim.Snapshot().Spent; math.Abs(after-before) > 1e-9 {
		t.Fatalf("offline billed %v", after-before)
	}
	if inst, _ = e.client.ShowInstance(ctx, id); inst.ActualStatus != "offline" {
		t.Fatalf("offline: %+v", inst)
	}
	// Balance reflects spend; charges match the simulator's own books.
	u, err := e.client.CurrentUser(ctx)
	if err != nil || math.Abs(u.Credit-(500-e.sim.Snapshot().Spent)) > 1e-4 {
		t.Fatalf("credit %v, spent %v: %v", u.Credit, e.sim.Snapshot().Spent, err)
	}
	if err := e.client.DestroyInstance(ctx, id); err != nil {
		t.Fatal(err)
	}
	spent := e.sim.Snapshot().Spent
	e.clk.Advance(time.Hour)
	if e.sim.Snapshot().Spent != spent {
		t.Fatal("destroyed instance kept billing")
	}
	charges, err := e.client.Charges(ctx, provider.ChargeQuery{From: epoch.Add(-time.Hour), To: epoch.Add(10 * time.Hour)})
	if err != nil || len(charges) != 1 || math.Abs(charges[0].Amount-spent) > 1e-5 {
		t.Fatalf("charges %+v (spent %v): %v", charges, spent, err)
	}
	invoices, err := e.client.Invoices(ctx, provider.ChargeQuery{From: epoch.Add(-time.Hour), To: epoch.Add(10 * time.Hour)})
	if err != nil || len(invoices) != 1 || invoices[0].Amount != -500 || invoices[0].Type != "credit" {
		t.Fatalf("invoices %+v: %v", invoices, err)
	}
	e.assertNoLeaks(t)
}

func TestCreateFaults(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	q, _ := vast.ParseQuery("num_gpus=1", vast.QueryOptions{Order: "dph_total"})
	offers, _ := e.client.SearchOffers(ctx, q)

	for i, kind := range []string{sim.FaultCreateErrorWithContract, sim.FaultCreateLostResponse} {
		if err := e.sim.Inject(sim.Fault{Kind: kind}); err != nil {
			t.Fatal(err)
		}
		label := "ambiguous-" + kind
		_, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[i].ID, Image: "img", DiskGB: 10, Label: label})
		var oe *provider.OutcomeUnknownError
		if !errors.As(err, &oe) || oe.Label != label {
			t.Fatalf("%s: err = %v", kind, err)
		}
		// The rental happened: a label listing must find it.
		list, err := e.client.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
		if err != nil || len(list) != 1 {
			t.Fatalf("%s: label listing %+v %v", kind, list, err)
		}
		if kind == sim.FaultCreateErrorWithContract && oe.InstanceID != list[0].ID {
			t.Fatalf("error body carried %d, listing found %d", oe.InstanceID, list[0].ID)
		}
		e.client.DestroyInstance(ctx, list[0].ID)
	}

	// Read-after-create lag: invisible for 2 reads, then visible.
	e.sim.Inject(sim.Fault{Kind: sim.FaultReadLag, Count: 2})
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[2].ID, Image: "img", DiskGB: 10, Label: "lag"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := e.client.ShowInstance(ctx, res.InstanceID); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("read %d should lag: %v", i, err)
		}
	}
	if _, err := e.client.ShowInstance(ctx, res.InstanceID); err != nil {
		t.Fatalf("after lag: %v", err)
	}
	e.sim.Inject(sim.Fault{Kind: sim.FaultReadLag, Count: 0})

	// Destroy that answers success and does nothing, twice.
	e.sim.Inject(sim.Fault{Kind: sim.FaultDestroyNoop, Count: 2})
	for i := 0; i < 3; i++ {
		if err := e.client.DestroyInstance(ctx, res.InstanceID); err != nil {
			t.Fatal(err)
		}
		_, err := e.client.ShowInstance(ctx, res.InstanceID)
		if gone := errors.Is(err, provider.ErrNotFound); gone != (i == 2) {
			t.Fatalf("destroy %d: gone=%v", i+1, gone)
		}
	}

	// Image pull failure on one machine: stays "created" with the docker error.
	e.sim.Inject(sim.Fault{Kind: sim.FaultImagePull, Machine: offers[3].MachineID})
	res, _ = e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[3].ID, Image: "ghcr.io/acme/trainer:nope", DiskGB: 10, Label: "pull"})
	e.clk.Advance(time.Hour)
	inst, _ := e.client.ShowInstance(ctx, res.InstanceID)
	if inst.ActualStatus != "created" || !strings.Contains(inst.StatusMsg, "manifest for ghcr.io/acme/trainer:nope not found") {
		t.Fatalf("pull failure: %+v", inst)
	}
	e.client.DestroyInstance(ctx, res.InstanceID)

	// A bid below the market: the client's cancel_unavail makes it a 410
	// that rents nothing.
	low := offers[4].MinBid / 2
	_, err = e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[4].ID, Image: "img", DiskGB: 10, Label: "lowbid", BidPrice: low})
	if !errors.Is(err, provider.ErrOfferGone) {
		t.Fatalf("low bid with cancel_unavail: %v, want the offer refused", err)
	}
	// Without cancel_unavail (Vast's default for bids) it creates a stopped
	// instance and answers an error that carries its id, which the client
	// reports as an ambiguous create.
	code, body := e.send(t, http.MethodPut, fmt.Sprintf("/api/v0/asks/%d/", offers[4].ID),
		fmt.Sprintf(`{"client_id":"me","image":"img","disk":10,"label":"lowbid","price":%g}`, low))
	nc, _ := body["new_contract"].(float64)
	if code != http.StatusBadRequest || nc == 0 {
		t.Fatalf("low bid without cancel_unavail: %d %v", code, body)
	}
	oe := &provider.OutcomeUnknownError{InstanceID: provider.InstanceID(nc)}
	if inst, _ := e.client.ShowInstance(ctx, oe.InstanceID); !inst.Paused() || !inst.IsBid {
		t.Fatalf("low-bid instance should be stopped: %+v", inst)
	}
	e.client.DestroyInstance(ctx, oe.InstanceID)
	e.assertNoLeaks(t)
}

func TestFailAndRateLimitFaultsAreRetried(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	e.sim.Inject(sim.Fault{Kind: sim.FaultRateLimit, Endpoint: "*", Count: 3})
	if _, err := e.client.CurrentUser(ctx); err != nil {
		t.Fatalf("429 storm of 3 should be absorbed by retries: %v", err)
	}
	e.sim.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "list", Count: 2, Status: 502})
	if _, err := e.client.ListInstances(ctx, provider.ListOptions{}); err != nil {
		t.Fatalf("two 502s should be retried: %v", err)
	}
	e.sim.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "list", Count: 10, Status: 503})
	if _, err := e.client.ListInstances(ctx, provider.ListOptions{}); err == nil {
		t.Fatal("a persistent 503 must surface as an error, never as an empty listing")
	}
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "bogus"}); err == nil {
		t.Fatal("unknown endpoint accepted")
	}
}

func TestListPagination(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true, Offers: 80})
	ctx := context.Background()
	offers, _ := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 60})
	for i := 0; i < 60; i++ {
		label := "page"
		if i%2 == 1 {
			label = "other"
		}
		if _, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[i].ID, Image: "img", DiskGB: 10, Label: label}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := e.client.ListInstances(ctx, provider.ListOptions{})
	if err != nil || len(all) != 60 {
		t.Fatalf("all: %d %v", len(all), err)
	}
	seen := map[provider.InstanceID]bool{}
	for _, in := range all {
		if seen[in.ID] {
			t.Fatalf("instance %d listed twice", in.ID)
		}
		seen[in.ID] = true
	}
	page, err := e.client.ListInstances(ctx, provider.ListOptions{Labels: []string{"page"}})
	if err != nil || len(page) != 30 {
		t.Fatalf("labelled: %d %v", len(page), err)
	}
	for _, in := range all {
		e.client.DestroyInstance(ctx, in.ID)
	}
	e.assertNoLeaks(t)
}

func TestContainerKeyIsScopedToItsInstance(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	_, a := rent(t, e, "a")
	_, b := rent(t, e, "b")
	var keyA string
	for _, in := range e.sim.Snapshot().Live {
		if in.ID == int64(a) {
			keyA = in.APIKey
		}
	}
	ca := e.clientWithKey(t, keyA)
	if err := ca.DestroyInstance(ctx, b); !errors.Is(err, provider.ErrAuth) {
		t.Fatalf("container key destroyed another instance: %v", err)
	}
	if _, err := ca.ListInstances(ctx, provider.ListOptions{}); !errors.Is(err, provider.ErrAuth) {
		t.Fatalf("container key listed instances: %v", err)
	}
	if err := ca.LabelInstance(ctx, a, "x"); !errors.Is(err, provider.ErrAuth) {
		t.Fatalf("container key relabelled: %v", err)
	}
	if err := ca.StopInstance(ctx, a); err != nil {
		t.Fatalf("container key stop own: %v", err)
	}
	if err := ca.DestroyInstance(ctx, a); err != nil {
		t.Fatalf("container key destroy own: %v", err)
	}
	if err := e.client.DestroyInstance(ctx, b); err != nil {
		t.Fatal(err)
	}
	// The snapshot says whose call destroyed each (train_dead_controller
	// tells the agent's self-destroy from the controller's by it).
	for _, in := range e.sim.Snapshot().Gone {
		if want := map[int64]string{int64(a): "container_api_key", int64(b): "account_key"}[in.ID]; in.DestroyedBy != want {
			t.Errorf("instance %d destroyed by %q, want %q", in.ID, in.DestroyedBy, want)
		}
	}
	e.assertNoLeaks(t)
}

func TestRestrictedKeyPermissions(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ro := e.clientWithKey(t, e.sim.NewRestrictedKey("ro", map[string]any{"instance_read": map[string]any{}}))
	ctx := context.Background()
	if _, err := ro.ListInstances(ctx, provider.ListOptions{}); err != nil {
		t.Fatalf("read-only key list: %v", err)
	}
	if _, err := ro.CreateInstance(ctx, provider.CreateRequest{OfferID: 1, Image: "i"}); !errors.Is(err, provider.ErrAuth) {
		t.Fatalf("read-only key create: %v", err)
	}
	keys, err := e.client.APIKeys(ctx)
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %+v %v", keys, err)
	}
	var full, restricted int
	for _, k := range keys {
		if k.Full {
			full++
		} else if _, ok := k.Permissions["instance_read"]; ok {
			restricted++
		}
	}
	if full != 1 || restricted != 1 {
		t.Fatalf("permissions not reported: %+v", keys)
	}
}

func TestRequestLogsPollsResultURL(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	_, id := rent(t, e, "logs")
	e.clk.Advance(time.Minute)
	text, err := e.client.RequestLogs(context.Background(), id, provider.LogRequest{Tail: 50})
	if err != nil || !strings.Contains(text, "Downloaded newer image for img:1") {
		t.Fatalf("logs: %q %v", text, err)
	}
	e.client.DestroyInstance(context.Background(), id)
}

func TestControlEndpoint(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	_, id := rent(t, e, "ctl")
	post := func(path, body string) (int, string) {
		res, err := http.Post(e.srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post("/_sim/advance", `{"seconds": 60}`); code != 200 {
		t.Fatalf("advance: %d %s", code, body)
	}
	if code, body := post("/_sim/faults", fmt.Sprintf(`{"kind":"preempt","instance":%d}`, id)); code != 200 {
		t.Fatalf("fault: %d %s", code, body)
	}
	if code, _ := post("/_sim/faults", `{"kind":"nonsense"}`); code != 400 {
		t.Fatalf("bad fault accepted: %d", code)
	}
	code, _, body := get(t, e.srv.URL+"/_sim/state", nil)
	var st sim.State
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || len(st.Live) != 1 || st.Live[0].ActualStatus != "stopped" {
		t.Fatalf("state: %d %s", code, body)
	}
	e.client.DestroyInstance(context.Background(), id)
	e.assertNoLeaks(t)
}

func newKeyPair(t *testing.T) (gossh.Signer, string) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, string(gossh.MarshalAuthorizedKey(signer.PublicKey()))
}

func dialSSH(inst provider.Instance, signer gossh.Signer) (*gossh.Client, error) {
	ep := inst.SSHEndpoints()[0]
	return gossh.Dial("tcp", fmt.Sprintf("%s:%d", ep.Host, ep.Port), &gossh.ClientConfig{
		User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)},
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), // host-key pinning is vastrun's job, not this test's
		Timeout:         5 * time.Second,
	})
}

func run(t *testing.T, c *gossh.Client, cmd string) (string, int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(cmd)
	var ee *gossh.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitStatus()
	}
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return string(out), 0
}

func TestSSHToRunningInstance(t *testing.T) {
	e := newEnv(t, sim.Config{})
	ctx := context.Background()
	offer, id := rent(t, e, "ssh")
	signer, pub := newKeyPair(t)
	other, _ := newKeyPair(t)

	e.clk.Advance(time.Minute)
	inst, err := e.client.ShowInstance(ctx, id)
	if err != nil || !inst.Running() {
		t.Fatalf("not running: %+v %v", inst, err)
	}
	if _, err := dialSSH(inst, signer); err == nil {
		t.Fatal("an unattached key was accepted")
	}
	if err := e.client.AttachSSHKey(ctx, id, pub); err != nil {
		t.Fatal(err)
	}
	c, err := dialSSH(inst, signer)
	if err != nil {
		t.Fatalf("dial with attached key: %v", err)
	}
	defer c.Close()
	if _, err := dialSSH(inst, other); err == nil {
		t.Fatal("a key attached to nothing was accepted")
	}

	out, code := run(t, c, "nvidia-smi")
	if code != 0 || !strings.Contains(out, "NVIDIA GeForce RTX 4090") || !strings.Contains(out, "Driver Version: "+offer.DriverVersion) ||
		!strings.Contains(out, fmt.Sprintf("CUDA Version: %.1f", offer.CUDAMax)) {
		t.Fatalf("nvidia-smi: %d\n%s", code, out)
	}
	out, code = run(t, c, "nvidia-smi --query-gpu=name,memory.total,driver_version,count --format=csv,noheader,nounits")
	want := fmt.Sprintf("NVIDIA GeForce RTX 4090, 24564, %s, 1\n", offer.DriverVersion)
	if code != 0 || out != want {
		t.Fatalf("query-gpu: %d %q want %q", code, out, want)
	}
	if out, code = run(t, c, "nvidia-smi --query-gpu=bogus --format=csv"); code == 0 || !strings.Contains(out, "not a valid field") {
		t.Fatalf("bad field: %d %q", code, out)
	}
	out, _ = run(t, c, `pwd; echo "$CONTAINER_API_KEY" | wc -c; echo hi > f.txt; cat f.txt; echo "speed=[$VASTRUN_SIM_CLOCK_SPEED]"; exit 3`)
	if !strings.Contains(out, "/workspace") || !strings.Contains(out, "65") || !strings.Contains(out, "hi") {
		t.Fatalf("sandbox: %q", out)
	}
	if !strings.Contains(out, "speed=[]") { // only a scaled clock's speed is told (the scenarios check 10x and 60x)
		t.Fatalf("an unscaled simulator told its instances a clock speed: %q", out)
	}
	if _, code = run(t, c, "exit 7"); code != 7 {
		t.Fatalf("exit code %d", code)
	}

	// Preemption cuts SSH off.
	e.sim.Inject(sim.Fault{Kind: sim.FaultPreempt, Instance: int64(id)})
	if c2, err := dialSSH(inst, signer); err == nil {
		c2.Close()
		t.Fatal("SSH answered on a paused instance")
	}
	e.client.DestroyInstance(ctx, id)
	e.assertNoLeaks(t)
}

func TestSSHRefusalWindow(t *testing.T) {
	e := newEnv(t, sim.Config{})
	ctx := context.Background()
	signer, pub := newKeyPair(t)
	e.client.AddSSHKey(ctx, pub) // an account key reaches every instance
	e.sim.Inject(sim.Fault{Kind: sim.FaultSSHRefuse, Seconds: 120})
	_, id := rent(t, e, "refuse")
	e.clk.Advance(time.Minute)
	inst, _ := e.client.ShowInstance(ctx, id)
	if _, err := dialSSH(inst, signer); err == nil {
		t.Fatal("SSH should be refused inside the window")
	}
	e.clk.Advance(2 * time.Minute)
	c, err := dialSSH(inst, signer)
	if err != nil {
		t.Fatalf("SSH after the window: %v", err)
	}
	c.Close()
	e.client.DestroyInstance(ctx, id)
	if _, err := dialSSH(inst, signer); err == nil {
		t.Fatal("SSH answered after destroy")
	}
	e.assertNoLeaks(t)
}

// sshToRunning rents an instance, attaches a fresh key, lets it boot and
// dials it.
func sshToRunning(t *testing.T, label string) (*env, provider.InstanceID, *gossh.Client) {
	t.Helper()
	e := newEnv(t, sim.Config{})
	ctx := context.Background()
	_, id := rent(t, e, label)
	signer, pub := newKeyPair(t)
	e.client.AttachSSHKey(ctx, id, pub)
	e.clk.Advance(time.Minute)
	inst, _ := e.client.ShowInstance(ctx, id)
	c, err := dialSSH(inst, signer)
	if err != nil {
		t.Fatal(err)
	}
	return e, id, c
}

func TestSSHSFTPEnvAndSignals(t *testing.T) {
	e, id, c := sshToRunning(t, "sftp")
	ctx := context.Background()
	defer c.Close()

	// SFTP: relative paths land in the instance's workspace.
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatalf("sftp subsystem: %v", err)
	}
	f, err := sc.Create("uploaded.bin")
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("vastrun", 10000)
	io.WriteString(f, payload)
	f.Close()
	sc.Close()
	out, _ := run(t, c, "wc -c < uploaded.bin")
	if strings.TrimSpace(out) != fmt.Sprint(len(payload)) {
		t.Fatalf("uploaded size %q, want %d", out, len(payload))
	}

	// Session environment reaches the command.
	sess, _ := c.NewSession()
	if err := sess.Setenv("RUN_ID", "r-42"); err != nil {
		t.Fatalf("setenv: %v", err)
	}
	got, _ := sess.Output("echo $RUN_ID")
	sess.Close()
	if strings.TrimSpace(string(got)) != "r-42" {
		t.Fatalf("env: %q", got)
	}

	// A signal reaches the whole process group; the exit status says so.
	sess, _ = c.NewSession()
	stdout, _ := sess.StdoutPipe()
	if err := sess.Start("trap 'echo got-term; exit 143' TERM; echo ready; while :; do sleep 0.05; done"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	io.ReadFull(stdout, buf)
	if err := sess.Signal(gossh.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	err = sess.Wait()
	var ee *gossh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 143 || !strings.Contains(string(rest), "got-term") {
		t.Fatalf("signal: %v %q", err, rest)
	}
	e.client.DestroyInstance(ctx, id)
	e.assertNoLeaks(t)
}

func TestExitAndSlowLoadingFaults(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	e.sim.Inject(sim.Fault{Kind: sim.FaultSlowLoading, Seconds: 600})
	_, id := rent(t, e, "slow")
	e.clk.Advance(5 * time.Minute)
	if inst, _ := e.client.ShowInstance(ctx, id); inst.ActualStatus != "loading" {
		t.Fatalf("slow loading should still be loading after 5m: %+v", inst)
	}
	e.clk.Advance(6 * time.Minute)
	if inst, _ := e.client.ShowInstance(ctx, id); inst.ActualStatus != "running" {
		t.Fatalf("slow loading never finished: %+v", inst)
	}
	e.sim.Inject(sim.Fault{Kind: sim.FaultExit, Instance: int64(id)})
	if inst, _ := e.client.ShowInstance(ctx, id); inst.ActualStatus != "exited" || inst.StatusMsg == "" {
		t.Fatalf("exit fault: %+v", inst)
	}
	// Stop then start goes back through loading to running.
	e.client.StopInstance(ctx, id)
	if inst, _ := e.client.ShowInstance(ctx, id); inst.ActualStatus != "stopped" || inst.IntendedStatus != "stopped" {
		t.Fatalf("stop: %+v", inst)
	}
	e.client.StartInstance(ctx, id)
	e.clk.Advance(time.Minute)
	if inst, _ := e.client.ShowInstance(ctx, id); inst.ActualStatus != "running" {
		t.Fatalf("start: %+v", inst)
	}
	e.client.DestroyInstance(ctx, id)
	e.assertNoLeaks(t)
}

func TestDestroyKillsDetachedJobs(t *testing.T) {
	e, id, c := sshToRunning(t, "detached")
	ctx := context.Background()
	out, _ := run(t, c, "setsid nohup sleep 300 >/dev/null 2>&1 < /dev/null & echo $!")
	c.Close()
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	if pid == 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("detached job not running: %q", out)
	}
	e.client.DestroyInstance(ctx, id)
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond) // the kill is immediate; reaping by init is not
	}
	if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); len(st) > 0 && !strings.Contains(string(st), ") Z ") {
		t.Fatalf("a detached job survived its instance's destruction: %s", st)
	}
}

// simMarket moves the simulator's market for the conformance suite.
type simMarket struct{ s *sim.Server }

func (m simMarket) Outbid(id provider.InstanceID, d time.Duration) error {
	return m.s.Inject(sim.Fault{Kind: sim.FaultOutbid, Instance: int64(id), For: d.Seconds()})
}

func (m simMarket) RaisePrice(id provider.InstanceID, dph float64, term time.Duration) error {
	return m.s.Inject(sim.Fault{Kind: sim.FaultPriceIncrease, Instance: int64(id), Price: dph, For: term.Seconds()})
}

// TestBulkDestroyCap: a bulk destroy of more ids than a bulk state change
// takes is refused before anything is destroyed (the simulator's deviation:
// the destroy's own cap is not documented).
func TestBulkDestroyCap(t *testing.T) {
	e := newEnv(t, sim.Config{})
	ids, err := e.sim.SeedInstances(1, func(int) string { return "cap" })
	if err != nil {
		t.Fatal(err)
	}
	body := `{"instance_ids": [` + strings.TrimSuffix(strings.Repeat(fmt.Sprint(ids[0])+",", provider.MaxBulkIDs+1), ",") + `]}`
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/api/v0/instances/", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.sim.APIKey())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 400 || !strings.Contains(string(b), `chunk length of 65 \u003e 64`) {
		t.Fatalf("%d ids: %d %s, want 400 chunk length", provider.MaxBulkIDs+1, res.StatusCode, b)
	}
	if live := e.sim.Snapshot().Live; len(live) != 1 {
		t.Fatalf("live %d after a refused bulk destroy, want 1", len(live))
	}
}

// TestPullFollowsImageSizeAndInetDown: an image of known size pulls for
// size×8/inet_down on its host, its status message carrying the progress,
// and the simulator's registry answers the size; a stalled pull never
// runs and its message never changes.
func TestPullFollowsImageSizeAndInetDown(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true, ScheduleDelay: 2 * time.Second, LoadDuration: 8 * time.Second})
	ctx := context.Background()
	for _, f := range []sim.Fault{{Kind: sim.FaultImageSize, Image: "img:1", Bytes: 1.5e9}, {Kind: sim.FaultInetDown, Mbps: 100}} {
		if err := e.sim.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.sim.ImageSize("img:1"); n != 1.5e9 {
		t.Fatalf("ImageSize = %d", n)
	}
	_, id := rent(t, e, "pull")
	var msgs []string
	for _, at := range []time.Duration{3 * time.Second, 60 * time.Second, 58 * time.Second} { // 2 s schedule, then the 120 s pull
		e.clk.Advance(at)
		inst, err := e.client.ShowInstance(ctx, id)
		if err != nil || inst.ActualStatus != "loading" {
			t.Fatalf("after %s more: %+v %v, want loading", at, inst, err)
		}
		msgs = append(msgs, inst.StatusMsg)
	}
	if msgs[0] == msgs[1] || msgs[1] == msgs[2] || !strings.Contains(msgs[2], "GB/1.50GB") {
		t.Fatalf("pull progress: %q", msgs)
	}
	e.clk.Advance(2 * time.Second)
	if inst, _ := e.client.ShowInstance(ctx, id); inst.ActualStatus != "running" {
		t.Fatalf("not running once the pull's 120 s passed: %+v", inst)
	}
	e.sim.Inject(sim.Fault{Kind: sim.FaultPullStall})
	_, stalled := rent(t, e, "stalled")
	e.clk.Advance(3 * time.Second)
	first, _ := e.client.ShowInstance(ctx, stalled)
	e.clk.Advance(time.Hour)
	later, _ := e.client.ShowInstance(ctx, stalled)
	if first.ActualStatus != "loading" || later.ActualStatus != "loading" || later.StatusMsg != first.StatusMsg {
		t.Fatalf("stalled pull: %+v then %+v", first, later)
	}
}
