package openapitest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// unreported is a Checker whose violations the test reads itself.
func unreported(t *testing.T) *Checker {
	s, why := available(t)
	if s == nil {
		t.Skip("skipped: " + why)
	}
	return &Checker{tb: t, spec: s, unlisted: map[string]*reported{}, used: make([]int, len(Deviations))}
}

// The checker must fail on what Vast refuses and on answers that break the
// document, or it proves nothing.
func TestCheckerCatchesViolations(t *testing.T) {
	c := unreported(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v0/users/current/":
			w.Write([]byte(`{"id": "not-an-integer", "email": "a@b"}`))
		case "/api/v0/instances/reboot/7/":
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte(`{}`))
		default:
			w.Write([]byte(`{"success": true}`))
		}
	}))
	defer srv.Close()
	do := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := c.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	do(http.MethodGet, "/api/v0/users/current/?owner=me", "")
	do(http.MethodPut, "/api/v0/instances/reboot/7/", "{}")
	do(http.MethodPut, "/api/v0/instances/bid_price/7/", `{"client_id": "me", "price": 0.2, "prize": 1}`)
	do(http.MethodGet, "/api/v0/no/such/route/", "")
	want := []string{
		"GET /api/v0/users/current request.query.owner",
		"GET /api/v0/users/current response.200.body/id",
		"PUT /api/v0/instances/reboot/{id} response.418.status",
		"PUT /api/v0/instances/bid_price/{id} request.body/prize",
		"GET /api/v0/no/such/route route",
	}
	for _, w := range want {
		if c.unlisted[w] == nil {
			t.Errorf("missed violation %q; saw %v", w, c.Err())
		}
	}
	if len(c.unlisted) != len(want) {
		t.Errorf("saw %d violations, want %d: %v", len(c.unlisted), len(want), c.Err())
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"GET /api/v0/instances/{id}", "GET /api/v0/instances/{id}", true},
		{"* /api/**", "DELETE /api/v0/instances/{id}", true},
		{"* /api/**", "GET /_sim/state", false},
		{"response.50?.status", "response.503.status", true},
		{"response.50?.status", "response.429.status", false},
		{"request.body/*/*", "request.body/num_gpus/eq", true},
		{"request.body/*/*", "request.body/no_such_field", false},
		{"response.200.body/instances", "response.200.body/instances/ports", false},
	} {
		if got := match(tc.pattern, tc.s); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// An entry allows its own failure at its field, not any failure there.
func TestDeviationReasonIsPartOfTheMatch(t *testing.T) {
	null := Violation{Op: "GET /api/v0/instances/{id}", Field: "response.200.body/instances", Detail: `Error at "/instances": Value is not nullable`}
	wrongType := Violation{Op: null.Op, Field: null.Field, Detail: `Error at "/instances": value must be an object`}
	if matchDeviation(null) < 0 {
		t.Errorf("the null-instance deviation does not allow %v", null)
	}
	if i := matchDeviation(wrongType); i >= 0 {
		t.Errorf("deviation %+v allows an unrelated failure %v", Deviations[i], wrongType)
	}
}
