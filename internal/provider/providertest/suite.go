// Package providertest is the one conformance suite every marketplace
// implementation must pass: the real Vast client against the simulator on
// every `go test`, and against the live API when VASTRUN_LIVE_API_KEY is set.
//
// A behaviour is added to the simulator together with the case here that
// pins it, so the simulator cannot drift from what the real API does.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// Harness is what the suite needs from an implementation.
type Harness struct {
	// Market is a client with a valid, full-access key.
	Market provider.Marketplace
	// BadKey is the same client with an unknown key; NoKey has none.
	BadKey, NoKey provider.Marketplace
	// WithKey, when set, is the same client with another key.
	WithKey func(key string) provider.Marketplace
	// Sleep waits d of marketplace time: a fake clock's advance for the
	// simulator, a real wait for the live API.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is marketplace time: the fake clock for the simulator, the wall
	// clock for the live API. Date ranges the suite queries are built
	// from it, so the suite does not depend on the day it runs. Nil means
	// time.Now.
	Now func() time.Time
	// Image is the image to rent with (small and public).
	Image string
	// Query selects cheap offers; the suite rents the first one.
	Query provider.Query
	// Live is true against the real marketplace: cases that would spend
	// more than one short rental, or that rely on simulator-only guarantees,
	// are skipped.
	Live bool
	// ReadyTimeout bounds the wait for a rental to be running.
	ReadyTimeout time.Duration
	// Ops is the same client's provider.Operations, when it has them.
	Ops provider.Operations
	// Cloud is the far side of the account's cloud integrations.
	Cloud Cloud
	// Faults moves the market (simulator only); when it is also a
	// PriceFaults, hosts raise prices (contract.go).
	Faults MarketFaults
}

func (h Harness) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Run runs every case. newHarness is called once per case.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"SearchFiltersAndOrders", testSearch},
		{"InstanceLifecycle", testLifecycle},
		{"AuthErrors", testAuth},
		{"UnknownInstanceIsNotFound", testUnknownInstance},
		{"OfferBacksOneInstance", testOfferBacksOne},
		{"AccountReads", testAccount},
	}
	cases = append(cases, operationCases...)
	cases = append(cases, bidCases...)
	cases = append(cases, answers2026Cases...)
	cases = append(cases, contractCases...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newHarness(t)) })
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testSearch(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	q := provider.Query{
		"verified": map[string]any{"eq": true}, "rentable": map[string]any{"eq": true},
		"external": map[string]any{"eq": false}, "rented": map[string]any{"eq": false},
		"num_gpus":          map[string]any{"eq": "1"}, // a string, as the official CLI sends numbers
		"order":             [][]string{{"dph_total", "asc"}},
		"type":              "on-demand",
		"allocated_storage": 20.0,
		"limit":             10,
	}
	offers, err := h.Market.SearchOffers(ctx, q)
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	if len(offers) == 0 || len(offers) > 10 {
		t.Fatalf("search returned %d offers, want 1..10", len(offers))
	}
	for i, o := range offers {
		if o.NumGPUs != 1 || !o.Verified() || o.ID == 0 || o.GPUName == "" {
			t.Errorf("offer %d violates the filter: %+v", o.ID, o)
		}
		if i > 0 && offers[i-1].DPHTotal > o.DPHTotal {
			t.Errorf("not ordered by dph_total asc: %v then %v", offers[i-1].DPHTotal, o.DPHTotal)
		}
		// dph_total = dph_base + storage_cost × allocated_storage / 720
		want := o.DPHBase + o.StorageCostMonth*20/720
		if math.Abs(o.DPHTotal-want) > 1e-4 || math.Abs(o.StorageTotalCost-o.StorageCostMonth*20/720) > 1e-4 {
			t.Errorf("offer %d price arithmetic: total %v base %v storage %v/month", o.ID, o.DPHTotal, o.DPHBase, o.StorageCostMonth)
		}
	}
	name := offers[0].GPUName
	same, err := h.Market.SearchOffers(ctx, provider.Query{"gpu_name": map[string]any{"eq": name}, "rentable": map[string]any{"eq": true}, "limit": 5})
	if err != nil {
		t.Fatalf("search by gpu_name: %v", err)
	}
	if len(same) == 0 {
		t.Fatalf("no offers for gpu_name %q that the first search returned", name)
	}
	for _, o := range same {
		if o.GPUName != name {
			t.Errorf("gpu_name filter %q returned %q", name, o.GPUName)
		}
	}
}

func rentCheapest(t *testing.T, h Harness, label string) (provider.Offer, provider.CreateResult) {
	t.Helper()
	ctx := ctxFor(t)
	offers, err := h.Market.SearchOffers(ctx, h.Query)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search for a rentable offer: %v (%d offers)", err, len(offers))
	}
	o := offers[0]
	res, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: o.ID, Image: h.Image, DiskGB: 10, Label: label})
	if err != nil {
		t.Fatalf("create from offer %d: %v", o.ID, err)
	}
	if res.InstanceID == 0 {
		t.Fatal("create returned no instance id")
	}
	// Whatever happens next, the rental must not outlive the test.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := h.Market.DestroyInstance(cctx, res.InstanceID); err != nil {
			t.Errorf("cleanup: destroy instance %d: %v", res.InstanceID, err)
		}
	})
	return o, res
}

func uniqueLabel(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}

// waitFor polls show until cond holds, sleeping on marketplace time.
func waitFor(t *testing.T, h Harness, id provider.InstanceID, what string, cond func(provider.Instance, error) bool) provider.Instance {
	t.Helper()
	ctx := ctxFor(t)
	timeout := h.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	var waited time.Duration
	for {
		inst, err := h.Market.ShowInstance(ctx, id)
		if cond(inst, err) {
			return inst
		}
		if waited >= timeout {
			t.Fatalf("instance %d never became %s (last: %+v, err %v)", id, what, inst, err)
		}
		step := 2 * time.Second
		if h.Live {
			step = 10 * time.Second
		}
		if err := h.Sleep(ctx, step); err != nil {
			t.Fatal(err)
		}
		waited += step
	}
}

func testLifecycle(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	label := uniqueLabel("vastrun-conformance")
	offer, res := rentCheapest(t, h, label)
	id := res.InstanceID

	inst := waitFor(t, h, id, "visible", func(i provider.Instance, err error) bool { return err == nil })
	if inst.ID != id || inst.Label != label || inst.ImageUUID == "" || inst.IntendedStatus != "running" {
		t.Fatalf("shown instance: %+v", inst)
	}
	if inst.MachineID != offer.MachineID || inst.GPUName != offer.GPUName || inst.NumGPUs != offer.NumGPUs {
		t.Errorf("instance does not match its offer: %+v vs %+v", inst, offer)
	}

	inst = waitFor(t, h, id, "running", func(i provider.Instance, err error) bool { return err == nil && i.Running() })
	if eps := inst.SSHEndpoints(); len(eps) == 0 {
		t.Errorf("running instance publishes no SSH endpoint: %+v", inst)
	}

	list, err := h.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}})
	if err != nil {
		t.Fatalf("list by label: %v", err)
	}
	if len(list) != 1 || list[0].ID != id {
		t.Fatalf("list by label %q = %+v, want exactly instance %d", label, list, id)
	}
	// A brief listing (select_cols) carries the id, label and states, and
	// nothing else: the columns were asked for, not just read.
	brief, err := h.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}, Brief: true})
	if err != nil {
		t.Fatalf("brief list by label: %v", err)
	}
	if len(brief) != 1 || brief[0].ID != id || brief[0].Label != label || brief[0].ActualStatus != list[0].ActualStatus ||
		brief[0].IntendedStatus != list[0].IntendedStatus || brief[0].GPUName != "" || brief[0].MachineID != 0 {
		t.Fatalf("brief list by label %q = %+v, want instance %d's id, label and states alone", label, brief, id)
	}

	relabel := label + "-renamed"
	if err := h.Market.LabelInstance(ctx, id, relabel); err != nil {
		t.Fatalf("label: %v", err)
	}
	if got, err := h.Market.ShowInstance(ctx, id); err != nil || got.Label != relabel {
		t.Fatalf("after label: %+v %v", got, err)
	}
	if list, err := h.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{label}}); err != nil || len(list) != 0 {
		t.Fatalf("old label still listed: %+v %v", list, err)
	}

	if err := h.Market.DestroyInstance(ctx, id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	waitFor(t, h, id, "gone", func(i provider.Instance, err error) bool { return errors.Is(err, provider.ErrNotFound) })
	if list, err := h.Market.ListInstances(ctx, provider.ListOptions{Labels: []string{relabel}}); err != nil || len(list) != 0 {
		t.Fatalf("destroyed instance still listed: %+v %v", list, err)
	}
	if err := h.Market.DestroyInstance(ctx, id); err != nil {
		t.Fatalf("destroy of a destroyed instance must succeed (idempotent): %v", err)
	}

	charges, err := h.Market.Charges(ctx, provider.ChargeQuery{From: h.now().Add(-48 * time.Hour), To: h.now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatalf("charges: %v", err)
	}
	if !h.Live { // live charges lag by minutes; the simulator's are immediate
		var found *provider.Charge
		for i := range charges {
			if charges[i].InstanceID == id {
				found = &charges[i]
			}
		}
		if found == nil || found.Amount <= 0 || len(found.Items) == 0 {
			t.Fatalf("no positive charge for instance %d in %+v", id, charges)
		}
		sum := 0.0
		for _, it := range found.Items {
			sum += it.Amount
		}
		if math.Abs(sum-found.Amount) > 1e-5 {
			t.Errorf("charge items sum to %v, charge says %v", sum, found.Amount)
		}
	}
}

func testAuth(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	if _, err := h.BadKey.CurrentUser(ctx); !errors.Is(err, provider.ErrAuth) {
		t.Errorf("bad key: CurrentUser err = %v, want ErrAuth", err)
	}
	if _, err := h.BadKey.ListInstances(ctx, provider.ListOptions{}); !errors.Is(err, provider.ErrAuth) {
		t.Errorf("bad key: ListInstances err = %v, want ErrAuth", err)
	}
	if err := h.BadKey.DestroyInstance(ctx, 1); !errors.Is(err, provider.ErrAuth) {
		t.Errorf("bad key: destroy must be an auth error, never 'already gone': %v", err)
	}
	if _, err := h.NoKey.CurrentUser(ctx); !errors.Is(err, provider.ErrAuth) {
		t.Errorf("no key: CurrentUser err = %v, want ErrAuth", err)
	}
	var apiErr *provider.APIError
	if _, err := h.BadKey.CurrentUser(ctx); errors.As(err, &apiErr) && !strings.Contains(strings.ToLower(apiErr.Msg), "key") {
		t.Errorf("bad key message should mention the key: %q", apiErr.Msg)
	}
}

func testUnknownInstance(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	if _, err := h.Market.ShowInstance(ctx, 1); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("show unknown instance: err = %v, want ErrNotFound", err)
	}
	if err := h.Market.DestroyInstance(ctx, 1); err != nil {
		t.Errorf("destroy unknown instance must be success: %v", err)
	}
}

func testOfferBacksOne(t *testing.T, h Harness) {
	if h.Live {
		t.Skip("would attempt a second rental of a live offer")
	}
	ctx := ctxFor(t)
	offer, _ := rentCheapest(t, h, uniqueLabel("vastrun-conformance-one"))
	_, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: offer.ID, Image: h.Image, DiskGB: 10, Label: uniqueLabel("dup")})
	if !errors.Is(err, provider.ErrOfferGone) {
		t.Fatalf("second rental of offer %d: err = %v, want ErrOfferGone", offer.ID, err)
	}
	if _, err := h.Market.CreateInstance(ctx, provider.CreateRequest{OfferID: 1, Image: h.Image, DiskGB: 10, Label: "x"}); !errors.Is(err, provider.ErrOfferGone) {
		t.Fatalf("rental of a nonexistent offer: err = %v, want ErrOfferGone", err)
	}
}

func testAccount(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	u, err := h.Market.CurrentUser(ctx)
	if err != nil || u.ID == 0 {
		t.Fatalf("current user: %+v %v", u, err)
	}
	keys, err := h.Market.APIKeys(ctx)
	if err != nil || len(keys) == 0 {
		t.Fatalf("API keys: %+v %v", keys, err)
	}
	if _, err := h.Market.SSHKeys(ctx); err != nil {
		t.Fatalf("SSH keys: %v", err)
	}
}
