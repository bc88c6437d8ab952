package vast

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// instantClock never waits, and records the delays asked for.
type instantClock struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (c *instantClock) Now() time.Time { return time.Unix(1785200000, 0) }
func (c *instantClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.delays = append(c.delays, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "wire", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type route struct {
	status int
	body   []byte
	ctype  string
	header http.Header
}

// server answers each "METHOD path" with a queue of routes (the last one
// repeats) and records every request.
type server struct {
	t      *testing.T
	mu     sync.Mutex
	routes map[string][]route
	log    []*http.Request
	bodies []string
}

func newServer(t *testing.T) (*server, *Client, *instantClock) {
	s := &server{t: t, routes: map[string][]route{}}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	clk := &instantClock{}
	c, err := New(Options{BaseURL: ts.URL, APIKey: "k3y", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, clk
}

func (s *server) on(methodPath string, rs ...route) { s.routes[methodPath] = rs }

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.log = append(s.log, r)
	s.bodies = append(s.bodies, string(b))
	key := r.Method + " " + r.URL.Path
	rs := s.routes[key]
	var rt route
	switch {
	case len(rs) == 0:
		rt = route{status: 599, body: []byte(`{"unrouted":"` + key + `"}`)}
	case len(rs) == 1:
		rt = rs[0]
	default:
		rt, s.routes[key] = rs[0], rs[1:]
	}
	s.mu.Unlock()
	if rt.status == -1 { // drop the connection after reading the request
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		conn.Close()
		return
	}
	ct := rt.ctype
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	for k, v := range rt.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rt.status)
	w.Write(rt.body)
}

func (s *server) count(methodPath string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.log {
		if r.Method+" "+r.URL.Path == methodPath {
			n++
		}
	}
	return n
}

func ok(body string) route            { return route{status: 200, body: []byte(body)} }
func okFile(b []byte) route           { return route{status: 200, body: b} }
func status(c int, body string) route { return route{status: c, body: []byte(body)} }

func TestEveryFixtureDecodes(t *testing.T) {
	ctx := context.Background()
	s, c, _ := newServer(t)

	s.on("POST /api/v0/bundles/", okFile(fixture(t, "search_response.json")))
	offers, err := c.SearchOffers(ctx, provider.Query{})
	if err != nil || len(offers) != 1 {
		t.Fatalf("search: %v %d", err, len(offers))
	}
	o := offers[0]
	if o.ID != 24811532 || o.GPUName != "RTX 4090" || o.NumGPUs != 1 || o.GPURAMMB != 24564 ||
		o.DPHTotal != 0.3441667 || o.StorageTotalCost != 0.0041667 || o.CountryCode() != "US" ||
		!o.Verified() || o.ComputeCap != 890 || o.CUDAMax != 12.8 || o.Reliability != 0.9962 {
		t.Fatalf("offer decoded wrong: %+v", o)
	}

	for _, name := range []string{"instance_loading.json", "instance_running.json", "instance_image_pull_failed.json", "instance_exited.json", "instance_paused.json"} {
		s.on("GET /api/v0/instances/30511207/", okFile(fixture(t, name)))
		inst, err := c.ShowInstance(ctx, 30511207)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch name {
		case "instance_loading.json":
			if inst.ActualStatus != "loading" || inst.Label != "ci-run-8842-train" || inst.SSHPort != 11206 || inst.Running() || inst.StartDate.Unix() != 1785200000 {
				t.Errorf("loading decoded wrong: %+v", inst)
			}
		case "instance_running.json":
			eps := inst.SSHEndpoints()
			if !inst.Running() || len(eps) != 2 || eps[0].Port != 41207 || eps[0].Host != "198.51.100.27" || eps[1].Host != "ssh7.vast.ai" {
				t.Errorf("running decoded wrong: %+v %+v", inst, eps)
			}
		case "instance_image_pull_failed.json":
			if inst.ActualStatus != "created" || !strings.Contains(inst.StatusMsg, "manifest") {
				t.Errorf("pull failure decoded wrong: %+v", inst)
			}
		case "instance_exited.json":
			if inst.ActualStatus != "exited" {
				t.Errorf("exited decoded wrong: %+v", inst)
			}
		case "instance_paused.json":
			if !inst.Paused() || !inst.IsBid || inst.StatusMsg != "" {
				t.Errorf("paused decoded wrong: %+v", inst)
			}
		}
	}

	s.on("GET /api/v0/instances/30511207/", okFile(fixture(t, "instance_destroyed.json")))
	if _, err := c.ShowInstance(ctx, 30511207); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf(`{"instances": null} must be ErrNotFound, got %v`, err)
	}

	s.on("GET /api/v1/instances/", okFile(fixture(t, "list_page.json")))
	list, err := c.ListInstances(ctx, provider.ListOptions{Labels: []string{"ci-run-8842-train"}})
	if err != nil || len(list) != 1 || list[0].ID != 30511207 {
		t.Fatalf("list: %v %+v", err, list)
	}

	s.on("PUT /api/v0/asks/24811532/", okFile(fixture(t, "create_response.json")))
	cr, err := c.CreateInstance(ctx, provider.CreateRequest{OfferID: 24811532, Image: "img", DiskGB: 20, Label: "l"})
	if err != nil || cr.InstanceID != 30511207 || cr.InstanceAPIKey == "" {
		t.Fatalf("create: %v %+v", err, cr)
	}

	s.on("GET /api/v0/users/current/", okFile(fixture(t, "user_current.json")))
	u, err := c.CurrentUser(ctx)
	if err != nil || u.ID != 412233 || u.Username != "acme-ci" || u.Credit != 187.42 {
		t.Fatalf("user: %v %+v", err, u)
	}
	// Vast answers 400 to any query on this route since 2026-04-29.
	if last := s.log[len(s.log)-1]; last.URL.RawQuery != "" {
		t.Errorf("current user sent a query %q; Vast rejects every parameter there", last.URL.RawQuery)
	}

	// The request fixtures must be valid documents of the shapes we send.
	var req map[string]any
	for _, name := range []string{"search_request.json", "create_request.json"} {
		if err := json.Unmarshal(fixture(t, name), &req); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	var lr struct {
		ResultURL string `json:"result_url"`
	}
	if json.Unmarshal(fixture(t, "logs_request.json"), &lr); !strings.HasPrefix(lr.ResultURL, "https://") {
		t.Errorf("logs_request fixture: %+v", lr)
	}
}

func TestErrorFixturesClassify(t *testing.T) {
	cases := []struct {
		file   string
		status int
		is     error
		code   string
	}{
		{"error_no_such_ask.json", 410, provider.ErrOfferGone, "no_such_ask"},
		{"error_429_detail.json", 429, provider.ErrRateLimited, ""},
		{"error_deprecated.json", 410, nil, "deprecated_endpoint"},
		{"error_auth.json", 404, provider.ErrAuth, "auth_error"},
		{"error_team_ssh.json", 400, nil, "team_ssh_keys_not_supported"},
	}
	for _, c := range cases {
		e := decodeAPIError("op", c.status, fixture(t, c.file))
		if e.Code != c.code || e.Msg == "" {
			t.Errorf("%s: decoded %+v", c.file, e)
		}
		if c.is != nil && !errors.Is(e, c.is) {
			t.Errorf("%s: want Is(%v)", c.file, c.is)
		}
	}
	if e := decodeAPIError("op", 429, []byte("API requests too frequent")); e.Msg != "API requests too frequent" || !errors.Is(e, provider.ErrRateLimited) {
		t.Errorf("plain-text 429: %+v", e)
	}
	if e := decodeAPIError("op", 400, []byte(`{"message":"bad thing"}`)); e.Msg != "bad thing" {
		t.Errorf("message variant: %+v", e)
	}
}

func TestSuccessFalseWithStatus200IsAnError(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("PUT /api/v0/instances/5/", ok(`{"success": false, "error": "invalid_args", "msg": "nope"}`))
	err := c.LabelInstance(context.Background(), 5, "x")
	var apiErr *provider.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 200 || apiErr.Code != "invalid_args" {
		t.Fatalf("err = %v", err)
	}
}

func TestRequestShapeAndAuth(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("PUT /api/v0/asks/7/", okFile(fixture(t, "create_response.json")))
	_, err := c.CreateInstance(context.Background(), provider.CreateRequest{OfferID: 7, Image: "img@sha256:ab", DiskGB: 20, Label: "lbl", Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	r := s.log[0]
	if r.Header.Get("Authorization") != "Bearer k3y" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers: %v", r.Header)
	}
	var body map[string]any
	json.Unmarshal([]byte(s.bodies[0]), &body)
	if body["client_id"] != "me" || body["image"] != "img@sha256:ab" || body["disk"] != 20.0 || body["label"] != "lbl" ||
		body["runtype"] != "ssh_direc ssh_proxy" || body["env"].(map[string]any)["A"] != "b" {
		t.Fatalf("create body: %s", s.bodies[0])
	}
	if _, present := body["price"]; !present {
		t.Fatal("price must be sent (null for on-demand)")
	}
}

// The client sends each request once and says by type what went wrong;
// retrying is the decorator's (package retry).
func TestEachCallIsSentOnceAndClassified(t *testing.T) {
	cases := []struct {
		name  string
		route route
		check func(error) bool
	}{
		{"429 JSON", status(429, `{"detail": "API requests too frequent endpoint threshold=2.0"}`), func(err error) bool {
			var ae *provider.APIError
			return errors.Is(err, provider.ErrRateLimited) && errors.As(err, &ae) && ae.Temporary() && ae.RetryAfter == 0
		}},
		{"429 plain text", route{status: 429, body: []byte("API requests too frequent"), ctype: "text/plain"}, func(err error) bool {
			return errors.Is(err, provider.ErrRateLimited)
		}},
		{"502", status(502, "bad gateway"), func(err error) bool {
			var ae *provider.APIError
			return errors.As(err, &ae) && ae.Status == 502 && ae.Temporary() && !errors.Is(err, provider.ErrTransport)
		}},
		{"400", status(400, `{"success":false,"error":"invalid_args","msg":"bad"}`), func(err error) bool {
			var ae *provider.APIError
			return errors.As(err, &ae) && !ae.Temporary() && !errors.Is(err, provider.ErrAuth)
		}},
		{"401", status(401, `{"success":false,"error":"auth_error","msg":"Invalid user key"}`), func(err error) bool {
			return errors.Is(err, provider.ErrAuth)
		}},
		{"dropped connection", route{status: -1}, func(err error) bool {
			var te *provider.TransportError
			return errors.Is(err, provider.ErrTransport) && errors.As(err, &te) && strings.Contains(te.Op, "show instance")
		}},
	}
	for i, tc := range cases {
		// A fresh server each: net/http itself resends a GET whose reused
		// connection dropped, which is not the client's doing.
		s, c, clk := newServer(t)
		id := provider.InstanceID(100 + i)
		path := "GET /api/v0/instances/" + itoa(int(id)) + "/"
		s.on(path, tc.route, okFile(fixture(t, "instance_running.json")))
		_, err := c.ShowInstance(context.Background(), id)
		if err == nil || !tc.check(err) {
			t.Errorf("%s: err %v (%T) is not classified as expected", tc.name, err, err)
		}
		if n := s.count(path); n != 1 {
			t.Errorf("%s: sent %d times, want once", tc.name, n)
		}
		if len(clk.delays) != 0 {
			t.Errorf("%s: the client waited by itself: %v", tc.name, clk.delays)
		}
	}
}

func TestRetryAfterIsRead(t *testing.T) {
	now := time.Unix(1785200000, 0)
	for h, want := range map[string]time.Duration{
		"":   0,
		"7":  7 * time.Second,
		"0":  0,
		"-3": 0,
		now.Add(90 * time.Second).UTC().Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).UTC().Format(http.TimeFormat):     0,
		"soon": 0,
	} {
		if got := retryAfter(h, now); got != want {
			t.Errorf("Retry-After %q = %v, want %v", h, got, want)
		}
	}
	s, c, _ := newServer(t)
	s.on("GET /api/v0/users/current/", route{status: 503, body: []byte("busy"), header: http.Header{"Retry-After": {"4"}}})
	_, err := c.CurrentUser(context.Background())
	var ae *provider.APIError
	if !errors.As(err, &ae) || ae.RetryAfter != 4*time.Second {
		t.Fatalf("503 with Retry-After 4: %v", err)
	}
}

func TestCreateAmbiguityIsOutcomeUnknown(t *testing.T) {
	cases := []struct {
		name   string
		routes []route
		wantID provider.InstanceID
	}{
		{"5xx", []route{status(500, `{"success":false,"error":"server_error","msg":"oops"}`)}, 0},
		{"gateway timeout", []route{status(504, "timeout")}, 0},
		{"error carrying a contract", []route{status(400, `{"success":false,"error":"invalid_price","msg":"bid too low","new_contract":777}`)}, 777},
		{"200 success:false carrying a contract", []route{ok(`{"success":false,"error":"x","new_contract":778}`)}, 778},
		{"success without id", []route{ok(`{"success":true}`)}, 0},
		{"connection dropped", []route{{status: -1}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, c, _ := newServer(t)
			s.on("PUT /api/v0/asks/3/", tc.routes...)
			_, err := c.CreateInstance(context.Background(), provider.CreateRequest{OfferID: 3, Image: "i", Label: "vastrun-lbl"})
			var oe *provider.OutcomeUnknownError
			if !errors.As(err, &oe) || !errors.Is(err, provider.ErrOutcomeUnknown) {
				t.Fatalf("err = %v, want OutcomeUnknownError", err)
			}
			if oe.Label != "vastrun-lbl" || oe.InstanceID != tc.wantID {
				t.Fatalf("outcome = %+v", oe)
			}
			if n := s.count("PUT /api/v0/asks/3/"); n != 1 {
				t.Fatalf("create sent %d times; it must never be retried blindly", n)
			}
		})
	}
}

func TestCreateDefiniteFailures(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("PUT /api/v0/asks/4/", okFile(nil))
	s.routes["PUT /api/v0/asks/4/"] = []route{status(410, string(fixture(t, "error_no_such_ask.json")))}
	_, err := c.CreateInstance(context.Background(), provider.CreateRequest{OfferID: 4, Image: "i", Label: "l"})
	if !errors.Is(err, provider.ErrOfferGone) || errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("offer gone: %v", err)
	}
	// A 429 is a refusal before any effect: a plain rate-limit error (the
	// decorator may send it again), never an unknown outcome.
	s.on("PUT /api/v0/asks/5/", status(429, `{"detail":"API requests too frequent endpoint threshold=4.5"}`), okFile(fixture(t, "create_response.json")))
	if _, err := c.CreateInstance(context.Background(), provider.CreateRequest{OfferID: 5, Image: "i", Label: "l"}); !errors.Is(err, provider.ErrRateLimited) || errors.Is(err, provider.ErrOutcomeUnknown) {
		t.Fatalf("create answered 429: %v", err)
	}
}

func TestListPaginatesAndRefusesPartial(t *testing.T) {
	s, c, _ := newServer(t)
	page := func(ids []int, total int, next string) route {
		var rows []string
		for _, id := range ids {
			rows = append(rows, `{"id":`+itoa(id)+`,"label":"L","actual_status":"running"}`)
		}
		nt := "null"
		if next != "" {
			nt = `"` + next + `"`
		}
		return ok(`{"success":true,"instances_found":` + itoa(len(ids)) + `,"total_instances":` + itoa(total) + `,"next_token":` + nt + `,"instances":[` + strings.Join(rows, ",") + `]}`)
	}
	s.on("GET /api/v1/instances/", page([]int{1, 2}, 3, "t1"), page([]int{3}, 3, ""))
	got, err := c.ListInstances(context.Background(), provider.ListOptions{Labels: []string{"L"}})
	if err != nil || len(got) != 3 {
		t.Fatalf("paginated list: %v %d", err, len(got))
	}
	if q := s.log[1].URL.Query(); q.Get("after_token") != "t1" || !strings.Contains(q.Get("select_filters"), `"label"`) {
		t.Fatalf("second page query: %v", q)
	}

	s.on("GET /api/v1/instances/", page([]int{1, 2}, 3, "t1"), status(400, `{"success":false,"error":"invalid_token","msg":"bad token"}`))
	if _, err := c.ListInstances(context.Background(), provider.ListOptions{}); !errors.Is(err, provider.ErrIncompleteListing) {
		t.Fatalf("failed second page must be incomplete, got %v", err)
	}
	s.on("GET /api/v1/instances/", page([]int{1}, 2, ""))
	if _, err := c.ListInstances(context.Background(), provider.ListOptions{}); !errors.Is(err, provider.ErrIncompleteListing) {
		t.Fatalf("short listing must be incomplete, got %v", err)
	}
	s.on("GET /api/v1/instances/", page([]int{1}, 5, "same"))
	if _, err := c.ListInstances(context.Background(), provider.ListOptions{}); !errors.Is(err, provider.ErrIncompleteListing) {
		t.Fatalf("repeated cursor must be incomplete, got %v", err)
	}
}

// Pages decode into one reused array: a row reads only its own page. A
// field a row lacks is zero, never the value the same slot held a page
// before; and a page answered 200 {"success": false} fails the listing as
// an API error, page one or a later one.
func TestListPagesDoNotLeakAndSuccessFalseFails(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("GET /api/v1/instances/",
		ok(`{"success":true,"total_instances":2,"next_token":"t1","instances":[{"id":1,"label":"a","gpu_name":"X","ssh_port":22,"is_bid":true}]}`),
		ok(`{"success":true,"total_instances":2,"next_token":null,"instances":[{"id":2}]}`))
	got, err := c.ListInstances(context.Background(), provider.ListOptions{})
	if err != nil || len(got) != 2 {
		t.Fatalf("list: %v %+v", err, got)
	}
	if got[0].Label != "a" || got[0].GPUName != "X" || got[1].ID != 2 || got[1].Label != "" || got[1].GPUName != "" || got[1].SSHPort != 0 || got[1].IsBid {
		t.Fatalf("rows = %+v", got)
	}
	refused := `{"success":false,"error":"invalid_args","msg":"nope","instances":[]}`
	s.on("GET /api/v1/instances/", ok(refused))
	var apiErr *provider.APIError
	if _, err := c.ListInstances(context.Background(), provider.ListOptions{}); !errors.As(err, &apiErr) || apiErr.Status != 200 || apiErr.Code != "invalid_args" {
		t.Fatalf("page one success false: %v", err)
	}
	s.on("GET /api/v1/instances/", ok(`{"success":true,"total_instances":2,"next_token":"t1","instances":[{"id":1}]}`), ok(refused))
	if _, err := c.ListInstances(context.Background(), provider.ListOptions{}); !errors.As(err, &apiErr) || apiErr.Code != "invalid_args" || !errors.Is(err, provider.ErrIncompleteListing) {
		t.Fatalf("page two success false: %v", err)
	}
}

func TestDestroyTreatsGoneAsDone(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("DELETE /api/v0/instances/1/", status(404, `{"success":false,"error":"not_found","msg":"Instance not found"}`))
	s.on("DELETE /api/v0/instances/2/", status(400, `{"success":false,"error":"no_such_instance","msg":"gone"}`))
	s.on("DELETE /api/v0/instances/3/", status(404, `{"success":false,"error":"auth_error","msg":"Invalid user key"}`))
	ctx := context.Background()
	if err := c.DestroyInstance(ctx, 1); err != nil {
		t.Errorf("404 not_found: %v", err)
	}
	if err := c.DestroyInstance(ctx, 2); err != nil {
		t.Errorf("no_such_instance: %v", err)
	}
	if err := c.DestroyInstance(ctx, 3); !errors.Is(err, provider.ErrAuth) {
		t.Errorf("a bad key must not look like 'already destroyed': %v", err)
	}
}

// DestroyInstanceGone tells "no such instance" (gone) from an accepted
// destroy, and a refused key or a 503 from both: the dead-man switch stops
// only on gone.
func TestDestroyInstanceGone(t *testing.T) {
	s, c, _ := newServer(t)
	s.on("DELETE /api/v0/instances/1/", status(404, `{"success":false,"error":"not_found","msg":"Instance not found"}`))
	s.on("DELETE /api/v0/instances/2/", status(200, `{"success":true}`))
	s.on("DELETE /api/v0/instances/3/", status(401, `{"success":false,"error":"auth_error","msg":"Invalid user key"}`))
	s.on("DELETE /api/v0/instances/4/", status(503, `{"success":false,"error":"service_unavailable","msg":"try later"}`))
	ctx := context.Background()
	for id, want := range map[provider.InstanceID]struct {
		gone bool
		err  error
	}{1: {true, nil}, 2: {false, nil}, 3: {false, provider.ErrAuth}} {
		gone, err := c.DestroyInstanceGone(ctx, id)
		if gone != want.gone || !errors.Is(err, want.err) || (want.err == nil) != (err == nil) {
			t.Errorf("instance %d: gone %v, err %v; want %v, %v", id, gone, err, want.gone, want.err)
		}
	}
	if gone, err := c.DestroyInstanceGone(ctx, 4); gone || err == nil {
		t.Errorf("a 503: gone %v, err %v", gone, err)
	}
}

func TestAccountVariants(t *testing.T) {
	s, c, _ := newServer(t)
	ctx := context.Background()
	s.on("GET /api/v0/ssh/", ok(`[{"id":1,"public_key":"ssh-ed25519 AAA a"},{"id":2,"key":"ssh-ed25519 BBB b"}]`))
	keys, err := c.SSHKeys(ctx)
	if err != nil || len(keys) != 2 || keys[1].PublicKey != "ssh-ed25519 BBB b" {
		t.Fatalf("ssh keys array: %v %+v", err, keys)
	}
	s.on("GET /api/v0/ssh/", ok(`{"ssh_keys":[{"id":3,"public_key":"ssh-ed25519 CCC c"}]}`))
	if keys, err = c.SSHKeys(ctx); err != nil || len(keys) != 1 || keys[0].ID != 3 {
		t.Fatalf("ssh keys wrapped: %v %+v", err, keys)
	}
	s.on("GET /api/v0/auth/apikeys/", ok(`{"apikeys":[{"id":1,"rights":null},{"id":2,"rights":"{\"api\":{\"instance_read\":{}}}"},{"id":3,"permissions":{"api":{"billing_write":{}}}}]}`))
	ks, err := c.APIKeys(ctx)
	if err != nil || len(ks) != 3 || !ks[0].Full || ks[1].Full || ks[1].Permissions["instance_read"] == nil || ks[2].Permissions["billing_write"] == nil {
		t.Fatalf("api keys: %v %+v", err, ks)
	}
	s.on("GET /api/v0/charges/", ok(`{"success":true,"count":1,"next_token":null,"results":[{"start":1785200000,"end":1785203600,"type":"instance","source":"instance-42","description":"x","amount":0.35,"metadata":{"label":"L"},"items":[{"type":"gpu","amount":0.34,"description":"1.000 hours at $0.340/hour"},{"type":"disk","amount":0.01}]}]}`))
	chs, err := c.Charges(ctx, provider.ChargeQuery{From: time.Unix(0, 0), To: time.Unix(1785300000, 0)})
	if err != nil || len(chs) != 1 || chs[0].InstanceID != 42 || chs[0].Label != "L" || len(chs[0].Items) != 2 || chs[0].Items[0].Type != "gpu" {
		t.Fatalf("charges: %v %+v", err, chs)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"console.vast.ai", "ftp://x", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q) accepted a bad URL", u)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// A 200 {"success": false} to an attach is judged by the instance's key
// list (vast-api.md §12.1): the key on it is attached; a key not on it
// keeps the refusal.
func TestAttachRefusalIsJudgedByTheKeyList(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEiL1KZ8R2zRoOqKD1OqS0uW0mYqzGIaNybK6wJp0zYd run"
	for _, tc := range []struct {
		name, listed string
		ok           bool
	}{
		{"key on the instance", `[{"id":1,"name":"k","public_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEiL1KZ8R2zRoOqKD1OqS0uW0mYqzGIaNybK6wJp0zYd other-comment"}]`, true},
		{"key not on the instance", `[{"id":1,"name":"k","public_key":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKeyMaterial0000000000000000000000000000 x"}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listed := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.Method {
				case http.MethodPost:
					io.WriteString(w, `{"success": false, "msg": "SSH key already associated with instance."}`)
				case http.MethodGet:
					listed++
					enc, _ := json.Marshal(tc.listed)
					io.WriteString(w, `{"success": true, "ssh_keys": `+string(enc)+`}`)
				}
			}))
			defer srv.Close()
			c, err := New(Options{BaseURL: srv.URL, APIKey: "k", Clock: &instantClock{}})
			if err != nil {
				t.Fatal(err)
			}
			err = c.AttachSSHKey(context.Background(), 7, key)
			var ae *provider.APIError
			switch {
			case listed != 1:
				t.Errorf("the key list was read %d times, want once", listed)
			case tc.ok && err != nil:
				t.Errorf("attach: %v, want success (the key is on the instance)", err)
			case !tc.ok && (!errors.As(err, &ae) || ae.Status != 200 || !strings.Contains(err.Error(), "instance 7")):
				t.Errorf("attach: %v, want the 200 refusal naming instance 7", err)
			}
		})
	}
}
