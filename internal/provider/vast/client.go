// Package vast is the real Vast.ai API client. It speaks the wire format
// described in docs (and in the simulator, which must accept any client
// written from Vast's documentation): Bearer auth, JSON bodies, the
// {"success": false, "error", "msg"} envelope and its variants.
//
// Attempt contract: every method sends its request once (a listing sends
// each page once) and classifies what went wrong by type, never by text:
// *provider.TransportError when no answer was read (errors.Is
// provider.ErrTransport), *provider.APIError for an answer that failed
// (status, slug, Retry-After; errors.Is maps it onto provider.ErrAuth,
// ErrRateLimited, ErrNotFound, ErrOfferGone), and for a create whose effect
// cannot be known *provider.OutcomeUnknownError naming the label. Retrying
// is not this package's job: package provider/retry decorates a Client and
// decides what may be sent again.
package vast

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
)

// DefaultBaseURL is Vast's API host.
const DefaultBaseURL = "https://console.vast.ai"

// Options configure a Client. Zero values pick sensible defaults.
type Options struct {
	BaseURL    string // default DefaultBaseURL
	APIKey     string
	HTTPClient *http.Client
	// Clock paces the wait for a result_url (logs, execute, cloud copy)
	// and dates a Retry-After; default the wall clock.
	Clock     clock.Clock
	UserAgent string
	Logger    *slog.Logger // developer log; default discards
}

// Client talks to the Vast API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	key   string
	http  *http.Client
	clock clock.Clock
	ua    string
	log   *slog.Logger
}

var _ provider.Marketplace = (*Client)(nil)

// New returns a client. It fails only on a malformed base URL.
func New(o Options) (*Client, error) {
	raw := o.BaseURL
	if raw == "" {
		raw = DefaultBaseURL
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("vast API URL %q is not an http(s) URL", raw)
	}
	c := &Client{base: u, key: o.APIKey, http: o.HTTPClient, clock: o.Clock, ua: o.UserAgent, log: o.Logger}
	if c.http == nil {
		c.http = &http.Client{Timeout: 60 * time.Second}
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.ua == "" {
		c.ua = "vastrun"
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// BaseURL is the API host this client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

type call struct {
	op     string
	method string
	path   string // begins with /api/
	query  url.Values
	body   any // nil sends no body on GET, {} otherwise
	// ownEnvelope: the caller decodes the body's "success" itself, in the
	// one pass that decodes the rest (a listing page), and do does not
	// parse a 2xx body a second time for it.
	ownEnvelope bool
	// buf, when set, holds the body, reused call after call: the body is
	// then valid only until the next call with the same buf (a listing's
	// pages, each decoded before the next is asked for).
	buf *bytes.Buffer
}

// response is a raw answer. On an error it still travels back: an error
// body can carry facts, such as the contract id of a create that rented.
type response struct {
	status int
	body   []byte
}

// do sends cl once.
func (c *Client) do(ctx context.Context, cl call) (response, error) {
	u := *c.base
	u.Path = c.base.Path + cl.path
	if len(cl.query) > 0 {
		u.RawQuery = cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		b, err := json.Marshal(cl.body)
		if err != nil {
			return response{}, fmt.Errorf("%s: encode request: %w", cl.op, err)
		}
		body = bytes.NewReader(b)
	} else if cl.method != http.MethodGet {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), body)
	if err != nil {
		return response{}, fmt.Errorf("%s: %w", cl.op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.ua)
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	start := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		return response{}, &provider.TransportError{Op: cl.op, Err: scrubURLError(err)}
	}
	defer res.Body.Close() //nolint:errcheck // the body was read whole; closing it frees the connection and its error tells nothing
	b, err := readBody(res, cl.buf)
	if err != nil {
		return response{}, &provider.TransportError{Op: cl.op, Err: fmt.Errorf("read response: %w", err)}
	}
	c.log.Debug("API call", "op", cl.op, "method", cl.method, "path", cl.path, "status", res.StatusCode, "ms", time.Since(start).Milliseconds())
	if res.StatusCode < 200 || res.StatusCode > 299 {
		ae := decodeAPIError(cl.op, res.StatusCode, b)
		ae.RetryAfter = retryAfter(res.Header.Get("Retry-After"), c.clock.Now())
		return response{status: res.StatusCode, body: b}, ae
	}
	var env envelope
	if !cl.ownEnvelope && json.Unmarshal(b, &env) == nil && env.Success != nil && !*env.Success {
		return response{status: res.StatusCode, body: b}, decodeAPIError(cl.op, res.StatusCode, b)
	}
	return response{status: res.StatusCode, body: b}, nil
}

// maxBody bounds what one response may hold.
const maxBody = 64 << 20

// readBody reads a response's body whole, at most maxBody bytes, into buf
// (a new buffer when nil), sized from its Content-Length when it has one
// (io.ReadAll grows from 512 bytes by doubling).
func readBody(res *http.Response, buf *bytes.Buffer) ([]byte, error) {
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	if n := res.ContentLength; n > 0 && n < maxBody {
		buf.Grow(int(n) + bytes.MinRead) // ReadFrom wants MinRead free to see EOF without growing
	}
	_, err := buf.ReadFrom(io.LimitReader(res.Body, maxBody))
	return buf.Bytes(), err
}

// retryAfter reads a Retry-After header: delta-seconds or an HTTP date.
// Anything else, or a time already past, is no ask at all.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// scrubURLError drops the URL from a *url.Error: ours never carries the
// key, but result URLs can carry signed tokens.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

func decode(op string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: decode response: %w", op, err)
	}
	return nil
}

func jsonParam(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// SearchOffers implements provider.OfferSearcher (POST /api/v0/bundles/).
func (c *Client) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	op := "search offers"
	res, err := c.do(ctx, call{op: op, method: http.MethodPost, path: "/api/v0/bundles/", body: q})
	if err != nil {
		return nil, err
	}
	var out struct {
		Offers []wireOffer `json:"offers"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return nil, err
	}
	seen := c.clock.Now()
	offers := make([]provider.Offer, 0, len(out.Offers))
	for _, w := range out.Offers {
		o := w.domain()
		o.SeenAt = seen
		offers = append(offers, o)
	}
	return offers, nil
}

type createBody struct {
	ClientID      string            `json:"client_id"`
	Image         string            `json:"image,omitempty"` // omitted only when a template supplies it
	Disk          float64           `json:"disk"`
	Label         string            `json:"label,omitempty"`
	Env           map[string]string `json:"env"`
	Onstart       string            `json:"onstart,omitempty"`
	Runtype       string            `json:"runtype"`
	Args          []string          `json:"args,omitempty"`
	Price         *float64          `json:"price"`
	ImageLogin    *string           `json:"image_login"`
	CancelUnavail bool              `json:"cancel_unavail"`
	// Sent only when set: the document declares neither as nullable.
	TemplateHashID string `json:"template_hash_id,omitempty"`
	TargetState    string `json:"target_state,omitempty"`
}

// CreateInstance implements provider.InstanceCreator (PUT /api/v0/asks/{id}/).
func (c *Client) CreateInstance(ctx context.Context, req provider.CreateRequest) (provider.CreateResult, error) {
	op := fmt.Sprintf("create instance from offer %d", req.OfferID)
	b := createBody{
		ClientID: "me", Image: req.Image, Disk: req.DiskGB, Label: req.Label, Env: req.Env,
		Onstart: req.Onstart, Runtype: req.Runtype, Args: req.Args, CancelUnavail: req.CancelUnavail,
	}
	if b.Env == nil {
		b.Env = map[string]string{}
	}
	if b.Runtype == "" {
		b.Runtype = "ssh_direc ssh_proxy"
	}
	if req.BidPrice > 0 {
		p := provider.BidWire(req.BidPrice, req.NumGPUs)
		if p < provider.MinBidPrice || p > provider.MaxCreateBidPrice {
			return provider.CreateResult{}, fmt.Errorf("%s: bid $%g/h is outside %g..%g $/h: %w", op, p, provider.MinBidPrice, provider.MaxCreateBidPrice, provider.ErrInvalidRequest)
		}
		b.Price = &p
		// A bid that cannot start now must fail (410), not leave a stopped
		// contract billing storage.
		b.CancelUnavail = true
	}
	if req.ImageLogin != "" {
		l := req.ImageLogin
		b.ImageLogin = &l
	}
	b.TemplateHashID = req.TemplateHashID
	if req.Stopped {
		b.TargetState = "stopped"
	}
	res, err := c.do(ctx, call{op: op, method: http.MethodPut, path: fmt.Sprintf("/api/v0/asks/%d/", req.OfferID), body: b})
	unknown := func(id provider.InstanceID, cause error) error {
		return &provider.OutcomeUnknownError{Op: op, Label: req.Label, InstanceID: id, Err: cause}
	}
	if err != nil {
		if errors.Is(err, provider.ErrTransport) {
			return provider.CreateResult{}, unknown(0, err)
		}
		var apiErr *provider.APIError
		if errors.As(err, &apiErr) {
			// An error that still names a contract (e.g. a bid below market
			// leaves a stopped instance) has rented something.
			var env envelope
			_ = json.Unmarshal(res.body, &env)
			if env.NewContract > 0 {
				return provider.CreateResult{}, unknown(provider.InstanceID(env.NewContract), err)
			}
			if apiErr.Status >= 500 {
				return provider.CreateResult{}, unknown(0, err)
			}
		}
		return provider.CreateResult{}, err
	}
	var out struct {
		NewContract    num    `json:"new_contract"`
		InstanceAPIKey string `json:"instance_api_key"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return provider.CreateResult{}, unknown(0, err)
	}
	if out.NewContract <= 0 {
		return provider.CreateResult{}, unknown(0, errors.New("success without new_contract"))
	}
	return provider.CreateResult{InstanceID: provider.InstanceID(out.NewContract), InstanceAPIKey: out.InstanceAPIKey}, nil
}

// ShowInstance implements provider.InstanceReader (GET /api/v0/instances/{id}/).
// Both {"instances": null} and 404 mean the instance is gone.
func (c *Client) ShowInstance(ctx context.Context, id provider.InstanceID) (provider.Instance, error) {
	op := fmt.Sprintf("show instance %d", id)
	// No owner=me: the vendor's document declares no query here, and Vast's
	// 2026 input validation refuses undeclared parameters where it runs.
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: fmt.Sprintf("/api/v0/instances/%d/", id)})
	if err != nil {
		return provider.Instance{}, err
	}
	var out struct {
		Instances *wireInstance `json:"instances"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return provider.Instance{}, err
	}
	if out.Instances == nil || out.Instances.ID == 0 {
		return provider.Instance{}, fmt.Errorf("%s: %w", op, provider.ErrNotFound)
	}
	return out.Instances.domain(), nil
}

// maxListPages bounds a listing so a server that never ends pagination
// cannot hang us; hitting it is an incomplete listing.
const maxListPages = 2000

// ListInstances implements provider.InstanceReader (GET /api/v1/instances/),
// walking every page. Any failed page, a repeated cursor, or fewer rows
// than the server's total makes the whole listing an error.
func (c *Client) ListInstances(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	op := "list instances"
	if len(opts.Labels) > 0 {
		op = fmt.Sprintf("list instances labelled %s", strings.Join(opts.Labels, ","))
	}
	q := url.Values{
		"limit":    {"25"},
		"order_by": {jsonParam([]map[string]string{{"col": "id", "dir": "asc"}})},
	}
	if len(opts.Labels) > 0 {
		q.Set("select_filters", jsonParam(map[string]any{"label": map[string]any{"in": opts.Labels}}))
	}
	if opts.Brief {
		q.Set("select_cols", briefCols)
	}
	var all []provider.Instance
	var rows []wireInstance // one page's rows, its array reused page after page
	// and its body's buffer: in a process that runs no GC, every fresh
	// byte is a fresh page to fault in
	body := new(bytes.Buffer)
	seen := map[string]bool{}
	total := -1
	for page := 0; ; page++ {
		if page >= maxListPages {
			return nil, fmt.Errorf("%s: more than %d pages: %w", op, maxListPages, provider.ErrIncompleteListing)
		}
		res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v1/instances/", query: q, ownEnvelope: true, buf: body})
		// The decoder fills a reused array's elements in place, so they are
		// zeroed first: a key one row lacks is zero, not the last page's.
		clear(rows[:cap(rows)])
		out := struct {
			Success        *bool          `json:"success"`
			Instances      []wireInstance `json:"instances"`
			TotalInstances *num           `json:"total_instances"`
			NextToken      *str           `json:"next_token"`
		}{Instances: rows[:0]}
		var derr error
		if err == nil {
			// One pass reads the page and its success flag (ownEnvelope).
			derr = decode(op, res.body, &out)
			if out.Success != nil && !*out.Success {
				err = decodeAPIError(op, res.status, res.body)
			}
		}
		if err != nil {
			if page > 0 {
				return nil, fmt.Errorf("%s: page %d: %w (%w)", op, page+1, provider.ErrIncompleteListing, err)
			}
			return nil, err
		}
		if derr != nil {
			return nil, fmt.Errorf("%w (%w)", provider.ErrIncompleteListing, derr)
		}
		if out.TotalInstances != nil && total < 0 {
			total = int(*out.TotalInstances)
			all = slices.Grow(all, min(max(total, 0), 100_000))
		}
		rows = out.Instances
		for _, w := range out.Instances {
			all = append(all, w.domain())
		}
		if out.NextToken == nil || *out.NextToken == "" {
			break
		}
		tok := string(*out.NextToken)
		if seen[tok] {
			return nil, fmt.Errorf("%s: cursor repeated: %w", op, provider.ErrIncompleteListing)
		}
		seen[tok] = true
		q.Set("after_token", tok)
	}
	if total >= 0 && len(all) < total {
		return nil, fmt.Errorf("%s: got %d of %d instances: %w", op, len(all), total, provider.ErrIncompleteListing)
	}
	if len(opts.Labels) > 0 { // never trust a server-side filter with a destroy decision
		want := map[string]bool{}
		for _, l := range opts.Labels {
			want[l] = true
		}
		kept := all[:0]
		for _, inst := range all {
			if want[inst.Label] {
				kept = append(kept, inst)
			}
		}
		all = kept
	}
	return all, nil
}

// briefCols are the columns a brief listing asks for (select_cols): what
// provider.ListOptions.Brief promises.
var briefCols = jsonParam([]string{"id", "label", "actual_status", "intended_status", "cur_state", "next_state"})

// DestroyInstance implements provider.InstanceDestroyer (DELETE
// /api/v0/instances/{id}/); an instance that is already gone is success.
func (c *Client) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	_, err := c.DestroyInstanceGone(ctx, id)
	return err
}

// DestroyInstanceGone is DestroyInstance that tells the two successes
// apart: gone is true when the API answered that no such instance exists
// (404), as a destroy is answered once the instance is gone. The
// on-instance dead-man switch, whose key may only start, stop or destroy
// its own instance, sends it until then.
func (c *Client) DestroyInstanceGone(ctx context.Context, id provider.InstanceID) (gone bool, err error) {
	op := fmt.Sprintf("destroy instance %d", id)
	_, err = c.do(ctx, call{op: op, method: http.MethodDelete, path: fmt.Sprintf("/api/v0/instances/%d/", id)})
	if err != nil && errors.Is(err, provider.ErrNotFound) && !errors.Is(err, provider.ErrAuth) {
		return true, nil
	}
	return false, err
}

func (c *Client) manage(ctx context.Context, op string, id provider.InstanceID, body map[string]any) error {
	_, err := c.do(ctx, call{op: op, method: http.MethodPut, path: fmt.Sprintf("/api/v0/instances/%d/", id), body: body})
	return err
}

// LabelInstance sets an instance's label.
func (c *Client) LabelInstance(ctx context.Context, id provider.InstanceID, label string) error {
	return c.manage(ctx, fmt.Sprintf("label instance %d", id), id, map[string]any{"label": label})
}

// StopInstance stops (pauses) an instance; it keeps billing storage.
func (c *Client) StopInstance(ctx context.Context, id provider.InstanceID) error {
	return c.manage(ctx, fmt.Sprintf("stop instance %d", id), id, map[string]any{"state": "stopped"})
}

// StartInstance starts a stopped instance.
func (c *Client) StartInstance(ctx context.Context, id provider.InstanceID) error {
	return c.manage(ctx, fmt.Sprintf("start instance %d", id), id, map[string]any{"state": "running"})
}

// AttachSSHKey authorises a public key on one instance. Attaching is not
// idempotent on the wire: a key already on the instance is answered 200
// {"success": false, "msg": "SSH key already associated with instance."}
// (vast-api.md §12.1). So a 200 refusal, whatever its message, is judged
// by the instance's key list: the key on it is success, as the caller
// asked for nothing else; a key not on it returns the refusal.
func (c *Client) AttachSSHKey(ctx context.Context, id provider.InstanceID, publicKey string) error {
	op := fmt.Sprintf("attach SSH key to instance %d", id)
	key := strings.TrimSpace(publicKey)
	_, err := c.do(ctx, call{op: op, method: http.MethodPost, path: fmt.Sprintf("/api/v0/instances/%d/ssh/", id),
		body: map[string]string{"ssh_key": key}})
	var ae *provider.APIError
	if err == nil || !errors.As(err, &ae) || ae.Status != http.StatusOK {
		return err
	}
	keys, lerr := c.InstanceSSHKeys(ctx, id)
	if lerr != nil {
		return fmt.Errorf("%w; and its key list, read to check, failed: %w", err, lerr)
	}
	for _, k := range keys {
		if sameKey(k, key) {
			c.log.Debug("SSH key already on the instance", "op", op, "msg", ae.Msg)
			return nil
		}
	}
	return err
}

// InstanceSSHKeys lists the public keys attached to one instance
// (GET /api/v0/instances/{id}/ssh/, whose ssh_keys is a JSON-encoded
// string of [{id, name, public_key}], vast-api.md §2.6).
func (c *Client) InstanceSSHKeys(ctx context.Context, id provider.InstanceID) ([]string, error) {
	op := fmt.Sprintf("list SSH keys of instance %d", id)
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: fmt.Sprintf("/api/v0/instances/%d/ssh/", id)})
	if err != nil {
		return nil, err
	}
	var out struct {
		SSHKeys json.RawMessage `json:"ssh_keys"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return nil, err
	}
	raw := []byte(out.SSHKeys)
	var enc string
	if json.Unmarshal(raw, &enc) == nil { // the documented string form
		raw = []byte(enc)
	}
	var rows []struct {
		PublicKey string `json:"public_key"`
	}
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := decode(op, raw, &rows); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(rows))
	for _, r := range rows {
		keys = append(keys, r.PublicKey)
	}
	return keys, nil
}

// sameKey compares two authorized_keys lines by key type and material,
// ignoring options-free comments.
func sameKey(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) >= 2 && len(fb) >= 2 && fa[0] == fb[0] && fa[1] == fb[1]
}

// RequestLogs asks for a log tail and polls its result_url (fetched without
// our key: it is a plain object-store URL) until the text is there.
func (c *Client) RequestLogs(ctx context.Context, id provider.InstanceID, lr provider.LogRequest) (string, error) {
	op := fmt.Sprintf("request logs of instance %d", id)
	body := map[string]string{}
	if lr.Tail > 0 {
		body["tail"] = fmt.Sprint(lr.Tail)
	}
	if lr.Filter != "" {
		body["filter"] = lr.Filter
	}
	if lr.Daemon {
		body["daemon_logs"] = "true"
	}
	res, err := c.do(ctx, call{op: op, method: http.MethodPut, path: fmt.Sprintf("/api/v0/instances/request_logs/%d/", id), body: body})
	if err != nil {
		return "", err
	}
	var out struct {
		ResultURL string `json:"result_url"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return "", err
	}
	return c.fetchResult(ctx, op, out.ResultURL)
}

// CurrentUser reads GET /api/v0/users/current/. It sends no query: since
// 2026-04-29 Vast answers 400 to any parameter there, owner=me included
// (vast-cli #382).
func (c *Client) CurrentUser(ctx context.Context) (provider.User, error) {
	op := "show current user"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/users/current/"})
	if err != nil {
		return provider.User{}, err
	}
	var w struct {
		ID       num `json:"id"`
		KeyID    num `json:"key_id"`
		Username str `json:"username"`
		Email    str `json:"email"`
		Balance  num `json:"balance"`
		Credit   num `json:"credit"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return provider.User{}, err
	}
	return provider.User{ID: int64(w.ID), KeyID: int64(w.KeyID), Username: string(w.Username), Email: string(w.Email), Balance: float64(w.Balance), Credit: float64(w.Credit)}, nil
}

// Charges reads per-contract charges (GET /api/v0/charges/), all pages.
func (c *Client) Charges(ctx context.Context, cq provider.ChargeQuery) ([]provider.Charge, error) {
	op := "list charges"
	q := url.Values{
		"select_filters": {jsonParam(map[string]any{"day": map[string]any{"gte": cq.From.Unix(), "lte": cq.To.Unix()}})},
		"format":         {"table"},
		"limit":          {"100"},
	}
	type wireItem struct {
		Start       num `json:"start"`
		End         num `json:"end"`
		Type        str `json:"type"`
		Source      str `json:"source"`
		Description str `json:"description"`
		Amount      num `json:"amount"`
		Metadata    any `json:"metadata"`
		Items       []wireItem
	}
	var all []provider.Charge
	err := c.eachPage(ctx, op, "/api/v0/charges/", q, func(body []byte) (*str, error) {
		var out struct {
			Results   []wireItem `json:"results"`
			NextToken *str       `json:"next_token"`
		}
		if err := decode(op, body, &out); err != nil {
			return nil, err
		}
		for _, r := range out.Results {
			ch := provider.Charge{Description: string(r.Description), Amount: float64(r.Amount), Start: unixTime(r.Start), End: unixTime(r.End)}
			if s := string(r.Source); strings.HasPrefix(s, "instance-") {
				// A source that names no instance leaves the charge unattributed.
				var id int64
				if _, err := fmt.Sscanf(strings.TrimPrefix(s, "instance-"), "%d", &id); err == nil {
					ch.InstanceID = provider.InstanceID(id)
				}
			}
			if m, ok := r.Metadata.(map[string]any); ok {
				if l, ok := m["label"].(string); ok {
					ch.Label = l
				}
			}
			for _, it := range r.Items {
				ch.Items = append(ch.Items, provider.ChargeItem{Type: string(it.Type), Description: string(it.Description),
					Amount: float64(it.Amount), Start: unixTime(it.Start), End: unixTime(it.End)})
			}
			all = append(all, ch)
		}
		return out.NextToken, nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// eachPage GETs path with q, passing each page's body to page, following
// next_token until it is null. A repeated cursor is an incomplete listing.
func (c *Client) eachPage(ctx context.Context, op, path string, q url.Values, page func([]byte) (next *str, err error)) error {
	seen := map[string]bool{}
	for n := 0; n < maxListPages; n++ {
		res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: path, query: q})
		if err != nil {
			if n > 0 {
				return fmt.Errorf("%s: page %d: %w (%w)", op, n+1, provider.ErrIncompleteListing, err)
			}
			return err
		}
		next, err := page(res.body)
		if err != nil {
			return err
		}
		if next == nil || *next == "" {
			return nil
		}
		if seen[string(*next)] {
			return fmt.Errorf("%s: cursor repeated: %w", op, provider.ErrIncompleteListing)
		}
		seen[string(*next)] = true
		q.Set("after_token", string(*next))
	}
	return fmt.Errorf("%s: more than %d pages: %w", op, maxListPages, provider.ErrIncompleteListing)
}

func unixTime(n num) time.Time {
	if n <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(n), 0).UTC()
}

// APIKeys lists the account's API keys with their permissions
// (GET /api/v0/auth/apikeys/). UNCERTAIN in the docs: the permission field
// is "rights" in listings and "permissions" on create, and may be an object
// or a JSON-encoded string; all forms are accepted, and a null or absent
// value means an unrestricted key.
func (c *Client) APIKeys(ctx context.Context) ([]provider.APIKeyInfo, error) {
	op := "list API keys"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/auth/apikeys/"})
	if err != nil {
		return nil, err
	}
	var out struct {
		APIKeys []struct {
			ID          num             `json:"id"`
			Name        str             `json:"name"`
			Key         str             `json:"key"`
			Rights      json.RawMessage `json:"rights"`
			Permissions json.RawMessage `json:"permissions"`
		} `json:"apikeys"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return nil, err
	}
	keys := make([]provider.APIKeyInfo, 0, len(out.APIKeys))
	for _, k := range out.APIKeys {
		raw := k.Rights
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			raw = k.Permissions
		}
		perms, full := decodePermissions(raw)
		keys = append(keys, provider.APIKeyInfo{ID: int64(k.ID), Name: string(k.Name), Permissions: perms, Full: full})
	}
	return keys, nil
}

func decodePermissions(raw json.RawMessage) (map[string]any, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "false" {
		return nil, true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		raw = json.RawMessage(s)
	}
	var doc map[string]any
	if json.Unmarshal(raw, &doc) != nil {
		return nil, false
	}
	if api, ok := doc["api"].(map[string]any); ok {
		return api, false
	}
	return doc, false
}

type wireSSHKey struct {
	ID        num `json:"id"`
	PublicKey str `json:"public_key"`
	Key       str `json:"key"`
	SSHKey    str `json:"ssh_key"`
}

func (w wireSSHKey) domain() provider.SSHKey {
	k := string(w.PublicKey)
	if k == "" {
		k = string(w.Key)
	}
	if k == "" {
		k = string(w.SSHKey)
	}
	return provider.SSHKey{ID: int64(w.ID), PublicKey: k}
}

// SSHKeys lists account SSH keys (GET /api/v0/ssh/). UNCERTAIN in the docs:
// a bare array or {"ssh_keys": [...]}, with public_key or key; all accepted.
func (c *Client) SSHKeys(ctx context.Context) ([]provider.SSHKey, error) {
	op := "list SSH keys"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/ssh/"})
	if err != nil {
		return nil, err
	}
	var list []wireSSHKey
	if err := json.Unmarshal(res.body, &list); err != nil {
		var wrapped struct {
			SSHKeys []wireSSHKey `json:"ssh_keys"`
		}
		if err := decode(op, res.body, &wrapped); err != nil {
			return nil, err
		}
		list = wrapped.SSHKeys
	}
	out := make([]provider.SSHKey, 0, len(list))
	for _, w := range list {
		out = append(out, w.domain())
	}
	return out, nil
}

// AddSSHKey registers an account SSH key (POST /api/v0/ssh/). Not
// idempotent: a repeat would register the key twice.
func (c *Client) AddSSHKey(ctx context.Context, publicKey string) (provider.SSHKey, error) {
	op := "add SSH key"
	res, err := c.do(ctx, call{op: op, method: http.MethodPost, path: "/api/v0/ssh/", body: map[string]string{"ssh_key": strings.TrimSpace(publicKey)}})
	if err != nil {
		return provider.SSHKey{}, err
	}
	var out struct {
		Key wireSSHKey `json:"key"`
	}
	if err := decode(op, res.body, &out); err != nil {
		return provider.SSHKey{}, err
	}
	return out.Key.domain(), nil
}

// Invoices reads payment records (GET /api/v1/invoices/) in [q.From, q.To],
// all pages.
func (c *Client) Invoices(ctx context.Context, iq provider.ChargeQuery) ([]provider.Invoice, error) {
	op := "list invoices"
	q := url.Values{
		"select_filters": {jsonParam(map[string]any{"when": map[string]any{"gte": iq.From.Unix(), "lte": iq.To.Unix()}})},
		"limit":          {"100"},
	}
	var all []provider.Invoice
	err := c.eachPage(ctx, op, "/api/v1/invoices/", q, func(body []byte) (*str, error) {
		var out struct {
			Results []struct {
				Start       num `json:"start"`
				Type        str `json:"type"`
				Source      str `json:"source"`
				Description str `json:"description"`
				Amount      num `json:"amount"`
				Metadata    struct {
					Service str `json:"service"`
				} `json:"metadata"`
			} `json:"results"`
			NextToken *str `json:"next_token"`
		}
		if err := decode(op, body, &out); err != nil {
			return nil, err
		}
		for _, r := range out.Results {
			all = append(all, provider.Invoice{Type: string(r.Type), Source: string(r.Source), Service: string(r.Metadata.Service),
				Description: string(r.Description), Amount: float64(r.Amount), When: unixTime(r.Start)})
		}
		return out.NextToken, nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}
