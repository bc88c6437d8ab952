package retry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// flaky stands in front of the simulator on loopback and answers the
// next request to one route with a failure, counting that route's
// requests; everything else reaches the simulator untouched.
type flaky struct {
	next  http.Handler
	mu    sync.Mutex
	route string // "METHOD /path"
	fail  string // "503", "429", "401", "drop"; "" once spent
	sent  int
}

func (f *flaky) arm(route, fail string) {
	f.mu.Lock()
	f.route, f.fail, f.sent = route, fail, 0
	f.mu.Unlock()
}

func (f *flaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fail := ""
	if r.Method+" "+r.URL.Path == f.route {
		f.sent++
		fail, f.fail = f.fail, ""
	}
	f.mu.Unlock()
	switch fail {
	case "":
		f.next.ServeHTTP(w, r)
	case "drop": // the request arrived; no answer ever leaves
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	case "503":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"success": false, "error": "server_error", "msg": "try later"}`)
	case "429", "429 Retry-After 9":
		w.Header().Set("Content-Type", "application/json")
		if fail != "429" {
			w.Header().Set("Retry-After", "9")
		}
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"detail": "API requests too frequent endpoint threshold=2.0"}`)
	case "401":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"success": false, "error": "auth_error", "msg": "Invalid user key"}`)
	}
}

// world is one simulator with two running instances, a cloud
// integration, and the real client behind the decorator.
type world struct {
	sim    *sim.Server
	front  *flaky
	c      *retry.Client
	a, b   provider.InstanceID
	cloud  int64
	offer  provider.OfferID
	waited *[]time.Duration
}

func newWorld(t *testing.T) *world {
	t.Helper()
	fake := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	waited := new([]time.Duration)
	clk := waitClock{f: fake, waits: waited}
	s, err := sim.New(sim.Config{Clock: fake, DisableSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	front := &flaky{next: s}
	srv := httptest.NewServer(front)
	t.Cleanup(func() { srv.Close(); s.Close() })
	// No connection reuse: net/http itself resends a GET whose reused
	// connection dropped, and every resend here must be the decorator's.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	raw, err := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: clk, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{sim: s, front: front, c: retry.Wrap(raw, retry.Policy{Clock: clk, Jitter: func() float64 { return 0.5 }}), waited: waited}
	ctx := context.Background()
	offers, err := raw.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "order": [][]string{{"dph_total", "asc"}}, "limit": 3})
	if err != nil || len(offers) < 3 {
		t.Fatalf("search: %v (%d offers)", err, len(offers))
	}
	w.offer = offers[2].ID
	for i, id := range []*provider.InstanceID{&w.a, &w.b} {
		req := provider.CreateRequest{OfferID: offers[i].ID, Image: "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", DiskGB: 10, Label: "retry-surface"}
		if i == 1 { // interruptible, so that its bid may change
			req.BidPrice, req.NumGPUs = provider.RoundBid(offers[i].DPHBase), offers[i].NumGPUs
		}
		res, err := raw.CreateInstance(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		*id = res.InstanceID
	}
	for _, id := range []provider.InstanceID{w.a, w.b} {
		for tries := 0; ; tries++ {
			inst, err := raw.ShowInstance(ctx, id)
			if err == nil && inst.ActualStatus == "running" {
				break
			}
			if tries > 600 {
				t.Fatalf("instance %d never ran: %+v %v", id, inst, err)
			}
			fake.Advance(time.Second)
		}
	}
	clouds, err := raw.CloudIntegrations(ctx)
	if err != nil || len(clouds) == 0 {
		t.Fatalf("cloud integrations: %v %v", clouds, err)
	}
	w.cloud = clouds[0].ID
	p := filepath.Join(s.CloudDir(w.cloud), "data", "in.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("weights\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return w
}

// raisePrice has instance a's host ask more and returns the pending
// increase's id (0 when none is listed: the answer then fails).
func (w *world) raisePrice(ctx context.Context) int64 {
	if err := w.sim.Inject(sim.Fault{Kind: sim.FaultPriceIncrease, Instance: int64(w.a), Price: 9}); err != nil {
		return 0
	}
	list, err := w.c.PendingPriceIncreases(ctx)
	if err != nil || len(list) == 0 {
		return 0
	}
	return list[0].ID
}

// op is one method of the decorated surface, the route its first request
// takes, and whether a repeat of it is harmless.
type op struct {
	name       string
	route      func(w *world) string
	idempotent bool
	call       func(ctx context.Context, w *world) error
}

func at(method, format string, ids ...func(*world) provider.InstanceID) func(*world) string {
	return func(w *world) string {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id(w)
		}
		return method + " " + fmt.Sprintf(format, args...)
	}
}

func instA(w *world) provider.InstanceID { return w.a }
func instB(w *world) provider.InstanceID { return w.b }

var (
	day0 = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	day9 = time.Date(2026, 12, 9, 0, 0, 0, 0, time.UTC)
)

var surface = []op{
	{"SearchOffers", at("POST", "/api/v0/bundles/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 2})
		return err
	}},
	{"CreateInstance", at("PUT", "/api/v0/asks/%d/", func(w *world) provider.InstanceID { return provider.InstanceID(w.offer) }), false, func(ctx context.Context, w *world) error {
		_, err := w.c.CreateInstance(ctx, provider.CreateRequest{OfferID: w.offer, Image: "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", DiskGB: 10, Label: "retry-surface-new"})
		return err
	}},
	{"ShowInstance", at("GET", "/api/v0/instances/%d/", instA), true, func(ctx context.Context, w *world) error {
		_, err := w.c.ShowInstance(ctx, w.a)
		return err
	}},
	{"ListInstances", at("GET", "/api/v1/instances/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.ListInstances(ctx, provider.ListOptions{Labels: []string{"retry-surface"}})
		return err
	}},
	{"DestroyInstance", at("DELETE", "/api/v0/instances/%d/", instA), true, func(ctx context.Context, w *world) error {
		return w.c.DestroyInstance(ctx, w.a)
	}},
	{"LabelInstance", at("PUT", "/api/v0/instances/%d/", instA), true, func(ctx context.Context, w *world) error {
		return w.c.LabelInstance(ctx, w.a, "relabelled")
	}},
	{"StopInstance", at("PUT", "/api/v0/instances/%d/", instA), true, func(ctx context.Context, w *world) error {
		return w.c.StopInstance(ctx, w.a)
	}},
	{"StartInstance", at("PUT", "/api/v0/instances/%d/", instA), true, func(ctx context.Context, w *world) error {
		return w.c.StartInstance(ctx, w.a)
	}},
	{"AttachSSHKey", at("POST", "/api/v0/instances/%d/ssh/", instA), true, func(ctx context.Context, w *world) error {
		return w.c.AttachSSHKey(ctx, w.a, testKey)
	}},
	{"RequestLogs", at("PUT", "/api/v0/instances/request_logs/%d/", instA), true, func(ctx context.Context, w *world) error {
		_, err := w.c.RequestLogs(ctx, w.a, provider.LogRequest{Tail: 10})
		return err
	}},
	{"CurrentUser", at("GET", "/api/v0/users/current/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.CurrentUser(ctx)
		return err
	}},
	{"Charges", at("GET", "/api/v0/charges/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.Charges(ctx, provider.ChargeQuery{From: day0, To: day9})
		return err
	}},
	{"APIKeys", at("GET", "/api/v0/auth/apikeys/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.APIKeys(ctx)
		return err
	}},
	{"SSHKeys", at("GET", "/api/v0/ssh/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.SSHKeys(ctx)
		return err
	}},
	{"AddSSHKey", at("POST", "/api/v0/ssh/"), false, func(ctx context.Context, w *world) error {
		_, err := w.c.AddSSHKey(ctx, testKey)
		return err
	}},
	{"Invoices", at("GET", "/api/v1/invoices/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.Invoices(ctx, provider.ChargeQuery{From: day0, To: day9})
		return err
	}},
	{"StopInstances", at("PUT", "/api/v0/instances/"), true, func(ctx context.Context, w *world) error {
		return w.c.StopInstances(ctx, []provider.InstanceID{w.a, w.b})
	}},
	{"StartInstances", at("PUT", "/api/v0/instances/"), true, func(ctx context.Context, w *world) error {
		return w.c.StartInstances(ctx, []provider.InstanceID{w.a, w.b})
	}},
	{"DestroyInstances", at("DELETE", "/api/v0/instances/"), true, func(ctx context.Context, w *world) error {
		return w.c.DestroyInstances(ctx, []provider.InstanceID{w.a, w.b})
	}},
	{"RebootInstance", at("PUT", "/api/v0/instances/reboot/%d/", instA), true, func(ctx context.Context, w *world) error {
		return w.c.RebootInstance(ctx, w.a)
	}},
	{"Execute", at("PUT", "/api/v0/instances/command/%d/", instA), false, func(ctx context.Context, w *world) error {
		_, err := w.c.Execute(ctx, w.a, "du -a /workspace")
		return err
	}},
	{"ChangeBid", at("PUT", "/api/v0/instances/bid_price/%d/", instB), true, func(ctx context.Context, w *world) error {
		return w.c.ChangeBid(ctx, w.b, 1.5)
	}},
	{"Deposit", at("GET", "/api/v0/instances/balance/%d/", instA), true, func(ctx context.Context, w *world) error {
		_, err := w.c.Deposit(ctx, w.a)
		return err
	}},
	{"InstanceFilters", at("GET", "/api/v0/instances/filters/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.InstanceFilters(ctx)
		return err
	}},
	{"GPUNames", at("GET", "/api/v0/gpu_names/unique/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.GPUNames(ctx)
		return err
	}},
	{"InstanceSSHKeys", at("GET", "/api/v0/instances/%d/ssh/", instA), true, func(ctx context.Context, w *world) error {
		_, err := w.c.InstanceSSHKeys(ctx, w.a)
		return err
	}},
	{"SpendRate", at("GET", "/api/v0/users/spend-rate"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.SpendRate(ctx)
		return err
	}},
	{"MachineEarnings", at("GET", "/api/v0/users/me/machine-earnings"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.MachineEarnings(ctx, day0, day9)
		return err
	}},
	{"PendingPriceIncreases", at("GET", "/api/v0/instances/pending-price-increases/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.PendingPriceIncreases(ctx)
		return err
	}},
	{"AcceptPriceIncrease", at("PUT", "/api/v0/instances/accept-price-increase/"), true, func(ctx context.Context, w *world) error {
		return w.c.AcceptPriceIncrease(ctx, w.raisePrice(ctx))
	}},
	{"RejectPriceIncrease", at("PUT", "/api/v0/instances/reject-price-increase/"), true, func(ctx context.Context, w *world) error {
		return w.c.RejectPriceIncrease(ctx, w.raisePrice(ctx))
	}},
	{"LegacyInvoices", at("GET", "/api/v0/users/me/invoices"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.LegacyInvoices(ctx, day0, day9)
		return err
	}},
	{"InvoiceRows", at("GET", "/api/v0/invoices"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.InvoiceRows(ctx, day0, day9)
		return err
	}},
	{"CopyDirect", at("PUT", "/api/v0/commands/copy_direct/"), true, func(ctx context.Context, w *world) error {
		return w.c.CopyDirect(ctx, w.a, w.b, "/workspace/", "/workspace/copied/")
	}},
	{"RsyncTarget", at("PUT", "/api/v0/commands/rsync/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.RsyncTarget(ctx, w.a, "/workspace/", true)
		return err
	}},
	{"CloudIntegrations", at("GET", "/api/v0/users/cloud_integrations/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.CloudIntegrations(ctx)
		return err
	}},
	{"Templates", at("GET", "/api/v0/template/"), true, func(ctx context.Context, w *world) error {
		_, err := w.c.Templates(ctx)
		return err
	}},
	{"CloudCopy", at("POST", "/api/v0/commands/rclone/"), false, func(ctx context.Context, w *world) error {
		_, err := w.c.CloudCopy(ctx, provider.CloudCopyRequest{Instance: w.a, Integration: w.cloud, Src: "data/", Dst: "/workspace/data/"})
		return err
	}},
}

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEiL1KZ8R2zRoOqKD1OqS0uW0mYqzGIaNybK6wJp0zYd retry-test"

// TestEveryOperationIsRetriedAsClassified sends each method of the
// surface through the real client to a loopback server whose first answer
// on that method's route fails, and counts what reached it: a safe method
// is sent again after a 503, a 429 or a dropped connection; a method whose
// repeat could act twice only after a 429; none after a 401.
func TestEveryOperationIsRetriedAsClassified(t *testing.T) {
	if n := len(surface); n != 38 {
		t.Fatalf("the table names %d methods; the surface has 38: add the new one", n)
	}
	for _, o := range surface {
		t.Run(o.name, func(t *testing.T) {
			for _, fail := range []string{"401", "503", "drop", "429"} {
				w := newWorld(t)
				route := o.route(w)
				w.front.arm(route, fail)
				err := o.call(context.Background(), w)
				wantSends, wantOK := 1, false
				switch {
				case fail == "429", fail != "401" && o.idempotent:
					wantSends, wantOK = 2, true
				}
				if got := w.front.count(); got != wantSends {
					t.Errorf("after a %s on %s: sent %d times, want %d (err %v)", fail, route, got, wantSends, err)
				}
				switch {
				case wantOK && err != nil:
					t.Errorf("after a %s: %v, want success on the second send", fail, err)
				case !wantOK && err == nil:
					t.Errorf("after a %s: success, want the failure", fail)
				case fail == "401" && !errors.Is(err, provider.ErrAuth):
					t.Errorf("after a 401: %v, want ErrAuth", err)
				case fail == "drop" && !o.idempotent && !errors.Is(err, provider.ErrTransport):
					t.Errorf("after a dropped connection: %v, want ErrTransport", err)
				case o.name == "CreateInstance" && fail != "401" && fail != "429" && !errors.Is(err, provider.ErrOutcomeUnknown):
					t.Errorf("create after a %s: %v, want an unknown outcome to reconcile by label", fail, err)
				}
			}
		})
	}
}

// A Retry-After on the wire sets the wait before the next send, through
// the real client.
func TestRetryAfterOnTheWire(t *testing.T) {
	w := newWorld(t)
	*w.waited = nil
	w.front.arm(fmt.Sprintf("GET /api/v0/instances/%d/", w.a), "429 Retry-After 9")
	if _, err := w.c.ShowInstance(context.Background(), w.a); err != nil {
		t.Fatal(err)
	}
	if n := w.front.count(); n != 2 || len(*w.waited) != 1 || (*w.waited)[0] != 9*time.Second {
		t.Fatalf("sent %d times after waits %v, want twice after one 9s wait", n, *w.waited)
	}
}
