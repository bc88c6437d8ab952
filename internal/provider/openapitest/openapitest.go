// Package openapitest holds HTTP traffic to Vast's own contract: the
// vendor's OpenAPI 3.1 document (vast-ai/docs api-reference/openapi.yaml),
// checked with a maintained validator (kin-openapi), never by hand.
//
// A Checker wraps an http.RoundTripper. Every exchange that passes through
// it is validated: the request the real client sent (path, query, body,
// and that every query parameter and body field is one the document
// declares) and the response the simulator sent (status documented,
// content type, body schema). A violation is allowed only when an entry of
// Deviations — each naming the operation, the field and the evidence that
// the document is wrong there (shared/vast-api.md §11) — matches it; any
// other violation fails the test that owns the Checker.
//
// The document is the vendor's and is never copied into this repository:
// it is read from VASTRUN_OPENAPI_SPEC, else from ../shared/vast-openapi.yaml
// beside the repository. When it is absent a Checker passes traffic through
// unchecked and says so in the test log, and TestOpenAPIContract skips
// saying why; VASTRUN_OPENAPI_REQUIRED=1 (set by .ci/run) turns that skip
// into a failure.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Environment variables that locate the document and make it mandatory.
const (
	SpecEnv     = "VASTRUN_OPENAPI_SPEC"
	RequiredEnv = "VASTRUN_OPENAPI_REQUIRED"
)

type spec struct {
	path   string
	doc    *openapi3.T
	router routers.Router
}

var loadSpec = sync.OnceValues(func() (*spec, error) {
	p := SpecPath()
	if _, err := os.Stat(p); err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(p)
	if err != nil {
		return nil, fmt.Errorf("load OpenAPI document %s: %w", p, err)
	}
	// The document's own example for Instance.os_version is a number in a
	// string field (vast-api.md §11), so examples are not held to it; and
	// POST /api/v0/users uses a Perl look-ahead that Go's RE2 cannot compile
	// (a route vastrun never calls), so patterns are not compiled up front.
	if err := doc.Validate(loader.Context, openapi3.DisableExamplesValidation(), openapi3.DisableSchemaPatternValidation()); err != nil {
		return nil, fmt.Errorf("OpenAPI document %s is invalid: %w", p, err)
	}
	// Route by path only: tests talk to loopback, not console.vast.ai.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route OpenAPI document %s: %w", p, err)
	}
	return &spec{path: p, doc: doc, router: r}, nil
})

// SpecPath is where the document is read from: $VASTRUN_OPENAPI_SPEC, else
// ../shared/vast-openapi.yaml next to the repository root.
func SpecPath() string {
	if p := os.Getenv(SpecEnv); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		return "vast-openapi.yaml"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared", "vast-openapi.yaml")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "vast-openapi.yaml")
		}
	}
}

// Available loads the document, or says why it cannot: a missing file is
// (nil-spec, reason); a file that is there but unusable fails tb.
func available(tb testing.TB) (*spec, string) {
	s, err := loadSpec()
	if err == nil {
		return s, ""
	}
	if errors.Is(err, os.ErrNotExist) {
		why := fmt.Sprintf("Vast's OpenAPI document is not at %s (set %s to its path): traffic is NOT checked against the vendor contract", SpecPath(), SpecEnv)
		if os.Getenv(RequiredEnv) == "1" {
			tb.Fatalf("%s, and %s=1 requires it", why, RequiredEnv)
		}
		return nil, why
	}
	tb.Fatal(err)
	return nil, ""
}

// Violation is one point where an exchange breaks the document.
type Violation struct {
	// Op is the method and the document's path template
	// ("GET /api/v0/instances/{id}"), or the request's own path when the
	// document has no such operation.
	Op string
	// Field says where: "route"; "request.query.NAME"; "request.body/PTR";
	// "response.STATUS.status" (undocumented status);
	// "response.STATUS.content-type"; "response.STATUS.body/PTR".
	Field  string
	Detail string
}

func (v Violation) String() string {
	d, _, _ := strings.Cut(v.Detail, "\n") // the validator appends the whole schema
	return v.Op + " " + v.Field + ": " + d
}

// Checker validates exchanges and reports, when its test ends, every
// violation no deviation allows.
type Checker struct {
	tb   testing.TB
	spec *spec // nil: the document is absent, nothing is checked

	mu       sync.Mutex
	unlisted map[string]*reported
	used     []int // per entry of Deviations, violations it allowed
	checked  int
}

type reported struct {
	v     Violation
	count int
}

// New returns a Checker owned by tb: when tb ends, unlisted violations fail it.
func New(tb testing.TB) *Checker {
	tb.Helper()
	s, why := available(tb)
	c := &Checker{tb: tb, spec: s, unlisted: map[string]*reported{}, used: make([]int, len(Deviations))}
	if s == nil {
		tb.Log("openapitest: skipped: " + why)
		return c
	}
	tb.Cleanup(func() {
		if err := c.Err(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// Enabled reports whether traffic is really checked (the document loaded).
func (c *Checker) Enabled() bool { return c.spec != nil }

// Err describes every unlisted violation seen so far, or is nil.
func (c *Checker) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unlisted) == 0 {
		return nil
	}
	keys := make([]string, 0, len(c.unlisted))
	for k := range c.unlisted {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d point(s) where traffic breaks Vast's OpenAPI document and no entry of openapitest.Deviations allows it (fix the client or simulator, or add a reviewed entry with evidence):", len(keys))
	for _, k := range keys {
		r := c.unlisted[k]
		fmt.Fprintf(&b, "\n  %s (%d×)", r.v, r.count)
	}
	return errors.New(b.String())
}

// Checked is how many exchanges were validated.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

// Unused lists the deviations that allowed nothing in this Checker's traffic.
func (c *Checker) Unused() []Deviation {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Deviation
	for i, n := range c.used {
		if n == 0 {
			out = append(out, Deviations[i])
		}
	}
	return out
}

// Client is an *http.Client whose every exchange is checked, requests and
// responses: give it to the real client.
func (c *Checker) Client() *http.Client {
	return &http.Client{Transport: c.Transport(http.DefaultTransport, true)}
}

// ResponsesOnly is an *http.Client that checks only responses: for tests
// that send deliberately malformed requests to see the simulator's answer.
func (c *Checker) ResponsesOnly() *http.Client {
	return &http.Client{Transport: c.Transport(http.DefaultTransport, false)}
}

// Transport wraps base; checkRequests says whether requests are held to
// the document too (they are for the real client).
func (c *Checker) Transport(base http.RoundTripper, checkRequests bool) http.RoundTripper {
	return &transport{c: c, base: base, requests: checkRequests}
}

type transport struct {
	c        *Checker
	base     http.RoundTripper
	requests bool
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.c.spec == nil || strings.HasPrefix(req.URL.Path, "/_sim/") {
		// The simulator's control plane and result URLs (object-store
		// stand-ins) are not part of the API.
		return t.base.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close() //nolint:errcheck // the body was read whole; closing it frees the connection and its error tells nothing
		if err != nil {
			return nil, err
		}
		reqBody = b
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	res, err := t.base.RoundTrip(req)
	if err != nil {
		return res, err
	}
	resBody, rerr := io.ReadAll(res.Body)
	res.Body.Close() //nolint:errcheck // the body was read whole; closing it frees the connection and its error tells nothing
	res.Body = io.NopCloser(bytes.NewReader(resBody))
	if rerr != nil {
		return res, nil // a cut answer is the transport's business, not the contract's
	}
	t.c.check(req, reqBody, res, resBody, t.requests)
	return res, nil
}

func (c *Checker) check(req *http.Request, reqBody []byte, res *http.Response, resBody []byte, requests bool) {
	norm := strings.TrimSuffix(req.URL.Path, "/")
	var vs []Violation
	// A deliberately malformed request ("instances/abc") still names the
	// operation whose answer is checked: only requests held to the document
	// must carry path parameters of its types.
	route, params, ok := c.findRoute(req, norm, requests)
	if !ok {
		vs = append(vs, Violation{Op: req.Method + " " + norm, Field: "route", Detail: "the document has no such operation"})
	} else {
		op := req.Method + " " + route.Path
		in := &openapi3filter.RequestValidationInput{
			Request: cloneWithBody(req, norm, reqBody), PathParams: params, Route: route,
			Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, SkipSettingDefaults: true},
		}
		if requests {
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				vs = append(vs, flatten(op, "request", err)...)
			}
			vs = append(vs, undeclaredQuery(op, route, req.URL.Query())...)
			vs = append(vs, undeclaredBody(op, route, reqBody)...)
		}
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
			Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
		}
		out.SetBodyBytes(resBody)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			vs = append(vs, flatten(op, "response."+strconv.Itoa(res.StatusCode), err)...)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	for _, v := range vs {
		if i := matchDeviation(v); i >= 0 {
			c.used[i]++
			continue
		}
		k := v.Op + " " + v.Field
		if r := c.unlisted[k]; r != nil {
			r.count++
		} else {
			c.unlisted[k] = &reported{v: v, count: 1}
		}
	}
}

// findRoute finds the operation for the request path without its trailing
// slash (the document spells paths without one; clients send one). A path
// whose integer parameter is not an integer ("instances/filters" against
// "instances/{id}") is not that operation.
func (c *Checker) findRoute(req *http.Request, norm string, typed bool) (*routers.Route, map[string]string, bool) {
	r := req.Clone(context.Background())
	u := *req.URL
	u.Path, u.RawPath = norm, ""
	r.URL = &u
	route, params, err := c.spec.router.FindRoute(r)
	if err != nil {
		return nil, nil, false
	}
	if !typed {
		return route, params, true
	}
	for _, p := range append(route.PathItem.Parameters, route.Operation.Parameters...) {
		if p.Value == nil || p.Value.In != openapi3.ParameterInPath || p.Value.Schema == nil || p.Value.Schema.Value == nil {
			continue
		}
		if p.Value.Schema.Value.Type.Is(openapi3.TypeInteger) {
			if _, err := strconv.ParseInt(params[p.Value.Name], 10, 64); err != nil {
				return nil, nil, false
			}
		}
	}
	return route, params, true
}

func cloneWithBody(req *http.Request, norm string, body []byte) *http.Request {
	r := req.Clone(context.Background())
	u := *req.URL
	u.Path, u.RawPath = norm, ""
	r.URL = &u
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
	} else {
		r.Body = http.NoBody
	}
	return r
}

// flatten turns validator errors into violations, one per failing leaf.
func flatten(op, where string, err error) []Violation {
	var out []Violation
	var walk func(err error)
	walk = func(err error) {
		var me openapi3.MultiError
		if errors.As(err, &me) && !isSchemaErr(err) {
			for _, e := range me {
				walk(e)
			}
			return
		}
		var reqErr *openapi3filter.RequestError
		var resErr *openapi3filter.ResponseError
		var se *openapi3.SchemaError
		switch {
		case errors.As(err, &reqErr) && reqErr.Parameter != nil && !isSchemaErr(reqErr.Err):
			out = append(out, Violation{Op: op, Field: where + "." + reqErr.Parameter.In + "." + reqErr.Parameter.Name, Detail: err.Error()})
		case errors.As(err, &reqErr) && reqErr.Parameter != nil:
			for _, leaf := range schemaLeaves(reqErr.Err) {
				out = append(out, Violation{Op: op, Field: where + "." + reqErr.Parameter.In + "." + reqErr.Parameter.Name + pointer(leaf), Detail: leaf.Error()})
			}
		case errors.As(err, &resErr) && resErr.Reason == "status is not supported":
			out = append(out, Violation{Op: op, Field: where + ".status", Detail: "status not documented for this operation"})
		case errors.As(err, &resErr) && (strings.Contains(strings.ToLower(resErr.Reason), "content type") || strings.Contains(strings.ToLower(resErr.Reason), "content-type")):
			out = append(out, Violation{Op: op, Field: where + ".content-type", Detail: resErr.Reason})
		case errors.As(err, &se):
			for _, leaf := range schemaLeaves(err) {
				out = append(out, Violation{Op: op, Field: where + ".body" + pointer(leaf), Detail: leaf.Error()})
			}
		default:
			out = append(out, Violation{Op: op, Field: where + ".body", Detail: err.Error()})
		}
	}
	walk(err)
	return out
}

func isSchemaErr(err error) bool {
	var se *openapi3.SchemaError
	return errors.As(err, &se)
}

// schemaLeaves are the innermost schema errors under err: the ones that
// name the field actually at fault.
func schemaLeaves(err error) []*openapi3.SchemaError {
	var out []*openapi3.SchemaError
	var me openapi3.MultiError
	if errors.As(err, &me) {
		var se *openapi3.SchemaError
		if !errors.As(err, &se) || len(me) > 0 {
			for _, e := range me {
				out = append(out, schemaLeaves(e)...)
			}
			if len(out) > 0 {
				return out
			}
		}
	}
	var se *openapi3.SchemaError
	if !errors.As(err, &se) {
		return nil
	}
	if se.Origin != nil {
		var sub openapi3.MultiError
		if errors.As(se.Origin, &sub) {
			for _, e := range sub {
				out = append(out, schemaLeaves(e)...)
			}
		}
	}
	if len(out) == 0 {
		out = append(out, se)
	}
	return out
}

func pointer(se *openapi3.SchemaError) string {
	p := se.JSONPointer()
	if len(p) == 0 {
		return ""
	}
	return "/" + strings.Join(p, "/")
}

// undeclaredQuery: the validator ignores query parameters the document
// does not declare; Vast's 2026 input validation refuses them (vast-cli
// #382), so each one is a violation.
func undeclaredQuery(op string, route *routers.Route, q url.Values) []Violation {
	declared := map[string]bool{}
	for _, p := range append(route.PathItem.Parameters, route.Operation.Parameters...) {
		if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
			declared[p.Value.Name] = true
		}
	}
	var out []Violation
	for name := range q {
		if !declared[name] {
			out = append(out, Violation{Op: op, Field: "request.query." + name, Detail: "query parameter not declared by the document"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// undeclaredBody: JSON Schema allows unknown properties unless told not
// to, so a misspelled body field would pass; every property the client
// sends must be one the document's request schema names.
func undeclaredBody(op string, route *routers.Route, body []byte) []Violation {
	if len(bytes.TrimSpace(body)) == 0 || route.Operation.RequestBody == nil || route.Operation.RequestBody.Value == nil {
		return nil
	}
	mt := route.Operation.RequestBody.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return nil
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		return nil // the validator reports undecodable bodies
	}
	var out []Violation
	walkUndeclared(mt.Schema.Value, v, "", func(ptr string) {
		out = append(out, Violation{Op: op, Field: "request.body" + ptr, Detail: "body field not declared by the document"})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

func walkUndeclared(s *openapi3.Schema, v any, ptr string, report func(string)) {
	props := map[string]*openapi3.Schema{}
	var items []*openapi3.Schema
	open := false
	var collect func(s *openapi3.Schema)
	collect = func(s *openapi3.Schema) {
		for name, p := range s.Properties {
			if p != nil && p.Value != nil {
				props[name] = p.Value
			}
		}
		if s.Items != nil && s.Items.Value != nil {
			items = append(items, s.Items.Value)
		}
		if s.AdditionalProperties.Schema != nil || (s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has) {
			open = true
		}
		for _, group := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
			for _, r := range group {
				if r != nil && r.Value != nil {
					collect(r.Value)
				}
			}
		}
	}
	collect(s)
	switch v := v.(type) {
	case map[string]any:
		if len(props) == 0 || open {
			return // a free-form object: nothing to hold names against
		}
		for name, val := range v {
			p, ok := props[name]
			if !ok {
				report(ptr + "/" + name)
				continue
			}
			walkUndeclared(p, val, ptr+"/"+name, report)
		}
	case []any:
		for i, val := range v {
			for _, it := range items {
				walkUndeclared(it, val, ptr+"/"+strconv.Itoa(i), report)
			}
		}
	}
}
