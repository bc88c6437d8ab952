package sim_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/openapitest"
	"github.com/vastrun/vastrun/internal/provider/providertest"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// TestOpenAPIContract drives the conformance suite and the simulator's
// documented-elsewhere answers through one checker, then requires zero
// unlisted violations and that every entry of openapitest.Deviations
// still allowed something: an entry that matches nothing any more is a
// stale exemption and must go.
func TestOpenAPIContract(t *testing.T) {
	api := openapitest.New(t)
	if !api.Enabled() {
		t.Skipf("skipped: Vast's OpenAPI document is not at %s; set %s to its path (.ci/run does, with %s=1)",
			openapitest.SpecPath(), openapitest.SpecEnv, openapitest.RequiredEnv)
	}
	t.Run("suite", func(t *testing.T) {
		providertest.Run(t, func(t *testing.T) providertest.Harness {
			e := newEnvChecked(t, sim.Config{}, api)
			q, err := vast.ParseQuery("num_gpus=1 gpu_name=RTX_4090", vast.QueryOptions{Order: "dph_total", StorageGB: 10})
			if err != nil {
				t.Fatal(err)
			}
			return providertest.Harness{
				Market: e.client, BadKey: e.clientWithKey(t, strings.Repeat("0", 64)), NoKey: e.clientWithKey(t, ""),
				WithKey: func(k string) provider.Marketplace { return e.clientWithKey(t, k) },
				Sleep:   func(ctx context.Context, d time.Duration) error { e.clk.Advance(d); return ctx.Err() }, Now: e.clk.Now,
				Image: "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", Query: q, ReadyTimeout: 5 * time.Minute,
				Ops: e.client, Cloud: simCloud{e.sim}, Faults: simMarket{e.sim},
			}
		})
	})
	t.Run("answers the document omits", func(t *testing.T) {
		e := newEnvChecked(t, sim.Config{DisableSSH: true}, api)
		ctx := context.Background()
		raw := func(method, path string, body ...string) int {
			code, _ := e.send(t, method, path, strings.Join(body, ""))
			return code
		}
		if code := raw(http.MethodGet, "/api/v0/users/current/?owner=me"); code != 400 {
			t.Errorf("owner=me on users/current: %d, want 400", code)
		}
		if code := raw(http.MethodGet, "/api/v0/instances/"); code != 410 {
			t.Errorf("v0 collection: %d, want 410", code)
		}
		if code := raw(http.MethodGet, `/api/v0/bundles?q={"limit":2}`); code != 200 {
			t.Errorf("legacy GET bundles: %d, want 200", code)
		}
		if code := raw(http.MethodPost, "/api/v0/auth/apikeys/", `{"permissions":{"api":{"misc":{}}}}`); code != 400 {
			t.Errorf("API key without a name: %d, want 400", code)
		}
		offers, _ := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 1})
		rented, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "contract"})
		if err != nil {
			t.Fatal(err)
		}
		if code := raw(http.MethodPut, "/api/v0/instances/request_logs/"+itoa(int64(rented.InstanceID))+"/", `{"daemon_logs":"yes"}`); code != 400 {
			t.Errorf("daemon_logs out of enum: %d, want 400", code)
		}
		ro := e.clientWithKey(t, e.sim.NewRestrictedKey("ro", map[string]any{"instance_read": map[string]any{}}))
		if _, err := ro.CurrentUser(ctx); !errors.Is(err, provider.ErrAuth) {
			t.Errorf("key without user_read: %v, want an auth error", err)
		}
		if err := ro.DestroyInstance(ctx, 1); !errors.Is(err, provider.ErrAuth) {
			t.Errorf("key without instance_write: destroy %v, want an auth error", err)
		}
		if err := e.sim.Inject(sim.Fault{Kind: sim.FaultRateLimit, Endpoint: "user", Count: 2}); err != nil {
			t.Fatal(err)
		}
		if err := e.sim.Inject(sim.Fault{Kind: sim.FaultRateLimit, Endpoint: "list", Count: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.ListInstances(ctx, provider.ListOptions{}); err != nil {
			t.Errorf("list through two 429s: %v", err)
		}
		if err := e.sim.Inject(sim.Fault{Kind: sim.FaultFail, Endpoint: "list", Count: 1, Status: 503}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.CurrentUser(ctx); err != nil {
			t.Errorf("current user through two 429s: %v", err)
		}
		if _, err := e.client.ListInstances(ctx, provider.ListOptions{}); err != nil {
			t.Errorf("list through a 503: %v", err)
		}
	})
	if t.Failed() {
		return
	}
	if err := api.Err(); err != nil {
		t.Fatal(err)
	}
	for _, d := range api.Unused() {
		t.Errorf("deviation no longer matches anything (remove it, or restore the traffic it covers): %s %s — %s", d.Op, d.Field, d.Evidence)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d exchanges checked against %s; %d reviewed deviations, all still needed", api.Checked(), openapitest.SpecPath(), len(openapitest.Deviations))
}
