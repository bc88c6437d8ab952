package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// send makes a raw request with the account key; the answer is still held
// to Vast's document.
func (e *env) send(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.sim.APIKey())
	req.Header.Set("Content-Type", "application/json")
	res, err := e.api.ResponsesOnly().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return res.StatusCode, m
}

// The simulator refuses what Vast's input validation refuses, with Vast's
// envelope: enums, ranges and required fields of the document.
func TestStrictInputValidation(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	offers, err := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 3})
	if err != nil || len(offers) < 2 {
		t.Fatal(err)
	}
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "strict"})
	if err != nil {
		t.Fatal(err)
	}
	ask := "/api/v0/asks/" + itoa(int64(offers[1].ID)) + "/"
	inst := itoa(int64(res.InstanceID))
	day := url.QueryEscape(`{"day":{"gte":0,"lte":9999999999}}`)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"runtype out of enum", "PUT", ask, `{"client_id":"me","image":"img","disk":10,"runtype":"sshh"}`, 400, "invalid_args"},
		{"runtype with an unknown token", "PUT", ask, `{"client_id":"me","image":"img","disk":10,"runtype":"ssh_direc telnet"}`, 400, "invalid_args"},
		{"target_state out of enum", "PUT", ask, `{"client_id":"me","image":"img","disk":10,"target_state":"paused"}`, 400, "invalid_args"},
		{"onstart over 4048 characters", "PUT", ask, `{"client_id":"me","image":"img","disk":10,"onstart":"` + strings.Repeat("x", 4049) + `"}`, 400, "invalid_args"},
		{"unknown template", "PUT", ask, `{"client_id":"me","disk":10,"template_hash_id":"ffffffffffffffffffffffffffffffff"}`, 400, "invalid_args"},
		{"daemon_logs out of enum", "PUT", "/api/v0/instances/request_logs/" + inst + "/", `{"daemon_logs":"yes"}`, 400, "invalid_args"},
		{"charges format out of enum", "GET", "/api/v0/charges/?format=csv&select_filters=" + day, "", 400, "invalid_args"},
		{"charges limit under 1", "GET", "/api/v0/charges/?limit=0&select_filters=" + day, "", 400, "invalid_args"},
		{"v1 list limit under 1", "GET", "/api/v1/instances/?limit=0", "", 400, "invalid_request"},
		{"v1 list limit over 25", "GET", "/api/v1/instances/?limit=26", "", 400, "invalid_request"},
		{"v1 list unknown column", "GET", "/api/v1/instances/?select_cols=" + url.QueryEscape(`["id","nope"]`), "", 400, "invalid_request"},
		{"API key without a name", "POST", "/api/v0/auth/apikeys/", `{"permissions":{"api":{"misc":{}}}}`, 400, "invalid_args"},
		{"bid under 0.001", "PUT", "/api/v0/instances/bid_price/" + inst + "/", `{"client_id":"me","price":0}`, 400, "invalid_args"},
		{"bid without client_id", "PUT", "/api/v0/instances/bid_price/" + inst + "/", `{"price":0.5}`, 400, "invalid_args"},
		{"execute outside ls, rm, du", "PUT", "/api/v0/instances/command/" + inst + "/", `{"command":"cat /etc/passwd"}`, 400, "invalid_args"},
		{"show with a non-integer id", "GET", "/api/v0/instances/abc/", "", 400, "invalid_args"},
		{"disk under 8 GB", "PUT", ask, `{"client_id":"me","image":"img","disk":7.5}`, 400, "invalid_args"},
		{"bid on an on-demand contract", "PUT", "/api/v0/instances/bid_price/" + inst + "/", `{"client_id":"me","price":0.5}`, 400, "invalid_args"},
		{"bulk state without ids", "PUT", "/api/v0/instances/", `{"ids":[],"state":"stopped"}`, 400, "invalid_args"},
		{"bulk state over 64 ids", "PUT", "/api/v0/instances/", `{"ids":[` + strings.TrimSuffix(strings.Repeat(inst+",", 65), ",") + `],"state":"stopped"}`, 400, "invalid_args"},
		{"bulk state of no own id", "PUT", "/api/v0/instances/", `{"ids":[1,2],"state":"stopped"}`, 404, "invalid_args"},
		{"bulk destroy without ids", "DELETE", "/api/v0/instances/", `{"instance_ids":[]}`, 400, "invalid_args"},
		{"bulk destroy of no own id", "DELETE", "/api/v0/instances/", `{"instance_ids":[1,2]}`, 404, "instances_not_found"},
	} {
		code, body := e.send(t, tc.method, tc.path, tc.body)
		if code != tc.status || body["error"] != tc.code || body["success"] != false {
			t.Errorf("%s: %d %v, want %d %s", tc.name, code, body, tc.status, tc.code)
		}
	}
	// Nothing refused rented anything.
	if live := e.sim.Snapshot().Live; len(live) != 1 {
		t.Errorf("refused creates rented: %+v", live)
	}
}

func TestSelectColsLimitsTheColumns(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	offers, _ := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 2})
	for _, o := range offers {
		if _, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: o.ID, Image: "img", DiskGB: 10, Label: "cols"}); err != nil {
			t.Fatal(err)
		}
	}
	code, body := e.send(t, "GET", "/api/v1/instances/?select_cols="+url.QueryEscape(`["id","label"]`), "")
	rows, _ := body["instances"].([]any)
	if code != 200 || len(rows) != 2 {
		t.Fatalf("select_cols: %d %v", code, body)
	}
	for _, r := range rows {
		row := r.(map[string]any)
		if len(row) != 2 || row["label"] != "cols" || row["id"] == nil {
			t.Errorf("row with select_cols [id, label]: %v", row)
		}
	}
	if _, body := e.send(t, "GET", "/api/v1/instances/?select_cols="+url.QueryEscape(`["*"]`), ""); len(body["instances"].([]any)[0].(map[string]any)) < 20 {
		t.Errorf(`select_cols ["*"] should keep every column`)
	}
}

// target_state "stopped" creates an instance that bills storage only.
func TestCreateStoppedBillsNoGPU(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	offers, _ := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 1})
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 50, Label: "cold", Stopped: true})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Hour)
	st := e.sim.Snapshot()
	if len(st.Live) != 1 || st.Live[0].ActualStatus != "stopped" || st.Live[0].GPUCost != 0 || st.Live[0].DiskCost <= 0 {
		t.Fatalf("after 2 h created stopped: %+v", st.Live)
	}
	e.client.DestroyInstance(ctx, res.InstanceID)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Seeded accounts list completely in both orders, page by page.
func TestSeededListingPagesBothWays(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true, Offers: 130})
	ids, err := e.sim.SeedInstances(120, func(i int) string { return "seed-" + strconv.Itoa(i%3) })
	if err != nil || len(ids) != 120 {
		t.Fatal(err)
	}
	all, err := e.client.ListInstances(context.Background(), provider.ListOptions{})
	if err != nil || len(all) != 120 || !all[0].Running() {
		t.Fatalf("ascending: %d %v (first %+v)", len(all), err, all[0])
	}
	one, err := e.client.ListInstances(context.Background(), provider.ListOptions{Labels: []string{"seed-1"}})
	if err != nil || len(one) != 40 {
		t.Fatalf("label seed-1: %d %v", len(one), err)
	}
	var got []float64
	q := url.Values{"limit": {"25"}, "order_by": {`[{"col":"id","dir":"desc"}]`}}
	for page := 0; page < 10; page++ {
		code, body := e.send(t, "GET", "/api/v1/instances/?"+q.Encode(), "")
		if code != 200 || body["total_instances"] != float64(120) {
			t.Fatalf("desc page %d: %d %v", page, code, body["total_instances"])
		}
		for _, r := range body["instances"].([]any) {
			got = append(got, r.(map[string]any)["id"].(float64))
		}
		next, _ := body["next_token"].(string)
		if next == "" {
			break
		}
		q.Set("after_token", next)
	}
	if len(got) != 120 {
		t.Fatalf("desc listing has %d rows, want 120", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i] >= got[i-1] {
			t.Fatalf("desc listing out of order at %d: %v then %v", i, got[i-1], got[i])
		}
	}
}

// The 2026 answers whose body, not only its status, is the fact
// (vast-api.md §12.1, §12.3).
func TestAnswers2026OnTheWire(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	offers, err := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 1})
	if err != nil || len(offers) == 0 {
		t.Fatal(err)
	}
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "wire2026"})
	if err != nil {
		t.Fatal(err)
	}
	inst := itoa(int64(res.InstanceID))
	const key = `{"ssh_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEiL1KZ8R2zRoOqKD1OqS0uW0mYqzGIaNybK6wJp0zYd wire"}`
	if code, body := e.send(t, "POST", "/api/v0/instances/"+inst+"/ssh/", key); code != 200 || body["success"] != true || body["msg"] != "SSH key added to instance." {
		t.Errorf("first attach: %d %v", code, body)
	}
	if code, body := e.send(t, "POST", "/api/v0/instances/"+inst+"/ssh/", key); code != 200 || body["success"] != false || body["msg"] != "SSH key already associated with instance." {
		t.Errorf("second attach of the same key: %d %v, want 200 success:false \"SSH key already associated with instance.\"", code, body)
	}
	if code, body := e.send(t, "DELETE", "/api/v0/instances/", `{"instance_ids":[1,2]}`); code != 404 || body["msg"] != "Instances [1, 2] not found." {
		t.Errorf("bulk destroy of unknown ids: %d %v", code, body)
	}
	// A key that existed and was deleted (an instance key, deleted with its
	// instance) is told 401; a key that never existed 404.
	if err := e.client.DestroyInstance(ctx, res.InstanceID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key    string
		status int
	}{{res.InstanceAPIKey, 401}, {strings.Repeat("0", 64), 404}} {
		req, _ := http.NewRequest("GET", e.srv.URL+"/api/v0/instances/"+inst+"/", nil)
		req.Header.Set("Authorization", "Bearer "+c.key)
		r, err := e.api.ResponsesOnly().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != c.status {
			t.Errorf("a key whose status should be %d got %d", c.status, r.StatusCode)
		}
	}
}

// A host's price increase on the wire (vast-api.md §12.2): the pending
// row's documented fields; an answer takes exactly
// {"pending_price_increase_id"}; an increase not pending is 404
// no_pending_price_increase.
func TestPriceIncreaseOnTheWire(t *testing.T) {
	e := newEnv(t, sim.Config{DisableSSH: true})
	ctx := context.Background()
	offers, err := e.client.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "limit": 1})
	if err != nil || len(offers) == 0 {
		t.Fatal(err)
	}
	res, err := e.client.CreateInstance(ctx, provider.CreateRequest{OfferID: offers[0].ID, Image: "img", DiskGB: 10, Label: "price"})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	if err := e.sim.Inject(sim.Fault{Kind: sim.FaultPriceIncrease, Instance: int64(res.InstanceID), Price: 3, For: 600}); err != nil {
		t.Fatal(err)
	}
	code, body := e.send(t, "GET", "/api/v0/instances/pending-price-increases/", "")
	rows, _ := body["pending_price_increases"].([]any)
	if code != 200 || body["count"] != 1.0 || body["truncated"] != false || len(rows) != 1 {
		t.Fatalf("pending list: %d %v", code, body)
	}
	row := rows[0].(map[string]any)
	for _, f := range []string{"pending_price_increase_id", "contract_id", "host_id", "new_gpu_costpersec", "old_gpu_costpersec",
		"new_disk_ram_costpersec", "old_disk_ram_costpersec", "new_bwu_cost", "old_bwu_cost", "new_bwd_cost", "old_bwd_cost",
		"new_platform_fee", "old_platform_fee", "contract_end_date", "ask_end_date", "created_at"} {
		if _, ok := row[f]; !ok {
			t.Errorf("the pending row lacks %s: %v", f, row)
		}
	}
	id := itoa(int64(row["pending_price_increase_id"].(float64)))
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"an extra key", `{"pending_price_increase_id":` + id + `,"contract_id":1}`, 400, "invalid_args"},
		{"no id", `{}`, 400, "invalid_args"},
		{"an id as a string", `{"pending_price_increase_id":"` + id + `"}`, 400, "invalid_args"},
		{"an id not pending", `{"pending_price_increase_id":1}`, 404, "no_pending_price_increase"},
	} {
		if code, b := e.send(t, "PUT", "/api/v0/instances/reject-price-increase/", tc.body); code != tc.status || b["error"] != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, code, b, tc.status, tc.code)
		}
	}
	if code, b := e.send(t, "PUT", "/api/v0/instances/reject-price-increase/", `{"pending_price_increase_id":`+id+`}`); code != 200 || b["success"] != true || b["contract_id"] != float64(res.InstanceID) {
		t.Errorf("reject: %d %v", code, b)
	}
	if code, b := e.send(t, "PUT", "/api/v0/instances/accept-price-increase/", `{"pending_price_increase_id":`+id+`}`); code != 404 || b["error"] != "no_pending_price_increase" {
		t.Errorf("accept after reject: %d %v, want 404 no_pending_price_increase", code, b)
	}
	// Rejected, the contract ends at contract_end_date and cannot restart.
	e.clk.Advance(601 * time.Second)
	inst, err := e.client.ShowInstance(ctx, res.InstanceID)
	if err != nil || inst.ActualStatus != "exited" || inst.Running() {
		t.Fatalf("after its end the contract shows %q (%v), want exited", inst.ActualStatus, err)
	}
	if err := e.client.StartInstance(ctx, res.InstanceID); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Minute)
	if inst, _ := e.client.ShowInstance(ctx, res.InstanceID); inst.ActualStatus != "exited" {
		t.Errorf("an expired instance restarted: %q", inst.ActualStatus)
	}
	if err := e.client.DestroyInstance(ctx, res.InstanceID); err != nil {
		t.Fatal(err)
	}
	e.assertNoLeaks(t)
}
