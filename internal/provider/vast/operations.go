package vast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
)

var _ provider.Operations = (*Client)(nil)

func idList(ids []provider.InstanceID) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// bulkState changes every listed instance; Vast answers success when at
// least one of them was updated, with no per-id result.
func (c *Client) bulkState(ctx context.Context, verb, state string, ids []provider.InstanceID) error {
	op := fmt.Sprintf("%s instances %v", verb, ids)
	// Vast takes at most 64 ids a call (vast-api.md §12.1); refuse locally
	// what it would refuse.
	if len(ids) > provider.MaxBulkIDs {
		return fmt.Errorf("%s: %d ids, over the %d one call takes (send them in chunks): %w", op, len(ids), provider.MaxBulkIDs, provider.ErrInvalidRequest)
	}
	_, err := c.do(ctx, call{op: op, method: http.MethodPut, path: "/api/v0/instances/",
		body: map[string]any{"ids": idList(ids), "state": state}})
	return err
}

// StopInstances stops every listed instance (PUT /api/v0/instances/).
func (c *Client) StopInstances(ctx context.Context, ids []provider.InstanceID) error {
	return c.bulkState(ctx, "stop", "stopped", ids)
}

// StartInstances starts every listed instance (PUT /api/v0/instances/).
func (c *Client) StartInstances(ctx context.Context, ids []provider.InstanceID) error {
	return c.bulkState(ctx, "start", "running", ids)
}

// DestroyInstances destroys every listed instance (DELETE /api/v0/instances/).
func (c *Client) DestroyInstances(ctx context.Context, ids []provider.InstanceID) error {
	op := fmt.Sprintf("destroy instances %v", ids)
	if len(ids) > provider.MaxBulkIDs { // held to the bulk state change's cap (provider.MaxBulkIDs)
		return fmt.Errorf("%s: %d ids, over the %d one call takes (send them in chunks): %w", op, len(ids), provider.MaxBulkIDs, provider.ErrInvalidRequest)
	}
	_, err := c.do(ctx, call{op: op, method: http.MethodDelete, path: "/api/v0/instances/",
		body: map[string]any{"instance_ids": idList(ids)}})
	return err
}

// RebootInstance restarts the container in place (PUT /api/v0/instances/reboot/{id}/).
func (c *Client) RebootInstance(ctx context.Context, id provider.InstanceID) error {
	op := fmt.Sprintf("reboot instance %d", id)
	_, err := c.do(ctx, call{op: op, method: http.MethodPut, path: fmt.Sprintf("/api/v0/instances/reboot/%d/", id)})
	return err
}

// Execute runs a constrained command (PUT /api/v0/instances/command/{id}/)
// and fetches its output from result_url. Not idempotent: rm is not.
func (c *Client) Execute(ctx context.Context, id provider.InstanceID, command string) (string, error) {
	op := fmt.Sprintf("execute on instance %d", id)
	res, err := c.do(ctx, call{op: op, method: http.MethodPut, path: fmt.Sprintf("/api/v0/instances/command/%d/", id),
		body: map[string]string{"command": command}})
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

// resultPolls bounds the wait for a result_url: 40 reads, about a minute
// and a half of waits growing from 300ms to 3s.
const resultPolls = 40

// errResultNotReady is a result_url that did not answer 200 yet.
var errResultNotReady = errors.New("result not ready")

// fetchResult polls a result_url (a plain object-store URL, fetched
// without our key) until it answers 200. The object appears some time
// after the API call answered, so a miss is expected, not a failure.
func (c *Client) fetchResult(ctx context.Context, op, resultURL string) (string, error) {
	if resultURL == "" {
		return "", fmt.Errorf("%s: response has no result_url", op)
	}
	var text string
	reads := 0
	err := poll.Until(ctx, c.clock, poll.Policy{Initial: 300 * time.Millisecond, Max: 3 * time.Second, Factor: 1.5,
		Permanent: func(err error) bool { return !errors.Is(err, errResultNotReady) }},
		func(ctx context.Context) (bool, error) {
			reads++
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, resultURL, nil)
			if err != nil {
				return false, fmt.Errorf("bad result_url: %w", err)
			}
			r, err := c.http.Do(req)
			if err == nil {
				b, rerr := io.ReadAll(io.LimitReader(r.Body, 32<<20))
				r.Body.Close() //nolint:errcheck // the body was read whole; closing it frees the connection and its error tells nothing
				if r.StatusCode == http.StatusOK && rerr == nil {
					text = string(b)
					return true, nil
				}
			}
			if reads >= resultPolls {
				return false, fmt.Errorf("result not ready at result_url after %d polls", resultPolls)
			}
			return false, errResultNotReady
		})
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	return text, nil
}

// ChangeBid sets an interruptible bid of price $/h per machine
// (PUT /api/v0/instances/bid_price/{id}/ {"client_id": "me", "price": …}).
// The wire unit is provider.BidPerGPU's: per GPU needs the instance's GPU
// count, read first.
func (c *Client) ChangeBid(ctx context.Context, id provider.InstanceID, price float64) error {
	op := fmt.Sprintf("change bid of instance %d", id)
	gpus := 1
	if provider.BidPerGPU {
		in, err := c.ShowInstance(ctx, id)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		gpus = in.NumGPUs
	}
	wire := provider.BidWire(price, gpus)
	// Vast takes 0.001..32 here; refuse locally what it would refuse.
	if price <= 0 || wire < provider.MinBidPrice || wire > provider.MaxChangeBidPrice {
		return fmt.Errorf("%s: bid $%g/h is outside %g..%g $/h: %w", op, price, provider.MinBidPrice, provider.MaxChangeBidPrice, provider.ErrInvalidRequest)
	}
	_, err := c.do(ctx, call{op: op, method: http.MethodPut, path: fmt.Sprintf("/api/v0/instances/bid_price/%d/", id),
		body: map[string]any{"client_id": "me", "price": wire}})
	return err
}

// Deposit reads GET /api/v0/instances/balance/{id}/.
func (c *Client) Deposit(ctx context.Context, id provider.InstanceID) (provider.Deposit, error) {
	op := fmt.Sprintf("show deposit of instance %d", id)
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: fmt.Sprintf("/api/v0/instances/balance/%d/", id)})
	if err != nil {
		return provider.Deposit{}, err
	}
	var w struct {
		Refundable num `json:"refundable_deposit"`
		Discount   num `json:"total_discount"`
		Months     num `json:"discount_months"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return provider.Deposit{}, err
	}
	return provider.Deposit{Refundable: float64(w.Refundable), TotalDiscount: float64(w.Discount), DiscountMonths: int(w.Months)}, nil
}

// InstanceFilters reads GET /api/v0/instances/filters/.
func (c *Client) InstanceFilters(ctx context.Context) (map[string][]string, error) {
	op := "list instance filters"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/instances/filters/"})
	if err != nil {
		return nil, err
	}
	var w struct {
		Filters []struct {
			Name   str   `json:"name"`
			Values []str `json:"values"`
		} `json:"filters"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, f := range w.Filters {
		vs := make([]string, 0, len(f.Values))
		for _, v := range f.Values {
			vs = append(vs, string(v))
		}
		out[string(f.Name)] = vs
	}
	return out, nil
}

// GPUNames reads GET /api/v0/gpu_names/unique/.
func (c *Client) GPUNames(ctx context.Context) ([]string, error) {
	op := "list GPU names"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/gpu_names/unique/"})
	if err != nil {
		return nil, err
	}
	var w struct {
		Names []str `json:"gpu_names"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(w.Names))
	for _, n := range w.Names {
		out = append(out, string(n))
	}
	return out, nil
}

// LegacyInvoices reads GET /api/v0/users/me/invoices, with owner=me as the
// 2026 CLI still sends it there (§1.2: only /users/current was reported to
// refuse it).
func (c *Client) LegacyInvoices(ctx context.Context, from, to time.Time) ([]provider.LegacyInvoice, error) {
	op := "list legacy invoices"
	q := url.Values{"owner": {"me"}, "sdate": {strconv.FormatInt(from.Unix(), 10)}, "edate": {strconv.FormatInt(to.Unix(), 10)}, "inc_charges": {"true"}}
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/users/me/invoices", query: q})
	if err != nil {
		return nil, err
	}
	var w struct {
		Invoices []struct {
			Type        str `json:"type"`
			InstanceID  num `json:"instance_id"`
			Description str `json:"description"`
			Amount      num `json:"amount"`
			Timestamp   num `json:"timestamp"`
		} `json:"invoices"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	out := make([]provider.LegacyInvoice, 0, len(w.Invoices))
	for _, r := range w.Invoices {
		out = append(out, provider.LegacyInvoice{Type: string(r.Type), InstanceID: provider.InstanceID(r.InstanceID),
			Description: string(r.Description), Amount: float64(r.Amount), When: unixTime(r.Timestamp)})
	}
	return out, nil
}

// InvoiceRows reads GET /api/v0/invoices, filtered on when.
func (c *Client) InvoiceRows(ctx context.Context, from, to time.Time) ([]provider.InvoiceRow, error) {
	op := "search invoices"
	q := url.Values{"select_cols": {`["*"]`}, "select_filters": {jsonParam(map[string]any{"when": map[string]any{"gte": from.Unix(), "lte": to.Unix()}})}}
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/invoices", query: q})
	if err != nil {
		return nil, err
	}
	var w struct {
		Invoices []struct {
			ID          num  `json:"id"`
			When        num  `json:"when"`
			AmountCents num  `json:"amount_cents"`
			IsCredit    bool `json:"is_credit"`
			Service     str  `json:"service"`
		} `json:"invoices"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	out := make([]provider.InvoiceRow, 0, len(w.Invoices))
	for _, r := range w.Invoices {
		out = append(out, provider.InvoiceRow{ID: int64(r.ID), When: unixTime(r.When), AmountCents: int64(r.AmountCents), IsCredit: r.IsCredit, Service: string(r.Service)})
	}
	return out, nil
}

// CopyDirect copies between two instances (PUT /api/v0/commands/copy_direct/).
// It sends only the fields the document declares (no client_id).
func (c *Client) CopyDirect(ctx context.Context, src, dst provider.InstanceID, srcPath, dstPath string) error {
	op := fmt.Sprintf("copy %d:%s to %d:%s", src, srcPath, dst, dstPath)
	_, err := c.do(ctx, call{op: op, method: http.MethodPut, path: "/api/v0/commands/copy_direct/", body: map[string]any{
		"src_id": strconv.FormatInt(int64(src), 10), "dst_id": strconv.FormatInt(int64(dst), 10), "src_path": srcPath, "dst_path": dstPath,
	}})
	return err
}

// RsyncTarget asks where rsync over SSH reaches path on id
// (PUT /api/v0/commands/rsync/, the local side null).
func (c *Client) RsyncTarget(ctx context.Context, id provider.InstanceID, path string, upload bool) (provider.SSHEndpoint, error) {
	op := fmt.Sprintf("rsync endpoint of instance %d", id)
	side := "src"
	body := map[string]any{"client_id": "me", "src_id": strconv.FormatInt(int64(id), 10), "dst_id": nil, "src_path": path, "dst_path": path}
	if upload {
		side = "dst"
		body["src_id"], body["dst_id"] = nil, strconv.FormatInt(int64(id), 10)
	}
	res, err := c.do(ctx, call{op: op, method: http.MethodPut, path: "/api/v0/commands/rsync/", body: body})
	if err != nil {
		return provider.SSHEndpoint{}, err
	}
	var w map[string]any
	if err := decode(op, res.body, &w); err != nil {
		return provider.SSHEndpoint{}, err
	}
	host, _ := w[side+"_addr"].(string)
	port, _ := w[side+"_port"].(float64)
	if host == "" || port <= 0 {
		return provider.SSHEndpoint{}, errors.New(op + ": response names no " + side + "_addr/" + side + "_port")
	}
	return provider.SSHEndpoint{Host: host, Port: int(port), Via: "proxy"}, nil
}

// CloudIntegrations reads GET /api/v0/users/cloud_integrations/.
func (c *Client) CloudIntegrations(ctx context.Context) ([]provider.CloudIntegration, error) {
	op := "list cloud integrations"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/users/cloud_integrations/"})
	if err != nil {
		return nil, err
	}
	var w []struct {
		ID        num `json:"id"`
		Name      str `json:"name"`
		CloudType str `json:"cloud_type"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	out := make([]provider.CloudIntegration, 0, len(w))
	for _, r := range w {
		out = append(out, provider.CloudIntegration{ID: int64(r.ID), Name: string(r.Name), CloudType: string(r.CloudType)})
	}
	return out, nil
}

// CloudCopy runs an rclone copy (POST /api/v0/commands/rclone/) and
// returns its transfer log from result_url.
func (c *Client) CloudCopy(ctx context.Context, req provider.CloudCopyRequest) (string, error) {
	op := fmt.Sprintf("cloud copy %s to %s for instance %d", req.Src, req.Dst, req.Instance)
	transfer := "Cloud To Instance"
	if req.ToCloud {
		transfer = "Instance To Cloud"
	}
	res, err := c.do(ctx, call{op: op, method: http.MethodPost, path: "/api/v0/commands/rclone/", body: map[string]any{
		"instance_id": strconv.FormatInt(int64(req.Instance), 10), "selected": strconv.FormatInt(req.Integration, 10),
		"src": req.Src, "dst": req.Dst, "transfer": transfer, "flags": []string{},
	}})
	if err != nil {
		return "", err
	}
	var w struct {
		ResultURL string `json:"result_url"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return "", err
	}
	return c.fetchResult(ctx, op, w.ResultURL)
}

// Templates reads the template catalog (GET /api/v0/template/).
func (c *Client) Templates(ctx context.Context) ([]provider.Template, error) {
	op := "list templates"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/template/"})
	if err != nil {
		return nil, err
	}
	var w struct {
		Templates []struct {
			ID     num `json:"id"`
			HashID str `json:"hash_id"`
			Name   str `json:"name"`
			Image  str `json:"image"`
		} `json:"templates"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	out := make([]provider.Template, 0, len(w.Templates))
	for _, t := range w.Templates {
		out = append(out, provider.Template{ID: int64(t.ID), HashID: string(t.HashID), Name: string(t.Name), Image: string(t.Image)})
	}
	return out, nil
}

// SpendRate reads GET /api/v0/users/spend-rate (vast-api.md §12.2).
func (c *Client) SpendRate(ctx context.Context) (provider.SpendRate, error) {
	op := "read spend rate"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/users/spend-rate"})
	if err != nil {
		return provider.SpendRate{}, err
	}
	var w struct {
		GPU    num  `json:"gpu_cost_per_hour"`
		Disk   num  `json:"container_storage_cost_per_hour"`
		Volume num  `json:"volume_storage_cost_per_hour"`
		Active flag `json:"has_active_resources"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return provider.SpendRate{}, err
	}
	return provider.SpendRate{GPU: float64(w.GPU), ContainerStorage: float64(w.Disk), VolumeStorage: float64(w.Volume), HasActiveResources: bool(w.Active)}, nil
}

// MachineEarnings reads GET /api/v0/users/me/machine-earnings?sday&eday,
// days counted from the Unix epoch as both official clients send them.
func (c *Client) MachineEarnings(ctx context.Context, from, to time.Time) (provider.Earnings, error) {
	op := "read machine earnings"
	day := func(t time.Time) string { return strconv.FormatInt(t.Unix()/86400, 10) }
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/users/me/machine-earnings",
		query: url.Values{"sday": {day(from)}, "eday": {day(to)}}})
	if err != nil {
		return provider.Earnings{}, err
	}
	var w struct {
		Summary struct {
			GPU  num `json:"total_gpu"`
			Stor num `json:"total_stor"`
			BWU  num `json:"total_bwu"`
			BWD  num `json:"total_bwd"`
		} `json:"summary"`
		PerMachine []json.RawMessage `json:"per_machine"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return provider.Earnings{}, err
	}
	return provider.Earnings{GPU: float64(w.Summary.GPU), Storage: float64(w.Summary.Stor), BandwidthUp: float64(w.Summary.BWU),
		BandwidthDown: float64(w.Summary.BWD), Machines: len(w.PerMachine)}, nil
}

// PendingPriceIncreases reads GET /api/v0/instances/pending-price-increases/
// (vast-api.md §12.2). A truncated list is an incomplete listing.
func (c *Client) PendingPriceIncreases(ctx context.Context) ([]provider.PriceIncrease, error) {
	op := "list pending price increases"
	res, err := c.do(ctx, call{op: op, method: http.MethodGet, path: "/api/v0/instances/pending-price-increases/"})
	if err != nil {
		return nil, err
	}
	var w struct {
		Truncated flag `json:"truncated"`
		Rows      []struct {
			ID          num `json:"pending_price_increase_id"`
			Contract    num `json:"contract_id"`
			OldGPU      num `json:"old_gpu_costpersec"`
			NewGPU      num `json:"new_gpu_costpersec"`
			OldDisk     num `json:"old_disk_ram_costpersec"`
			NewDisk     num `json:"new_disk_ram_costpersec"`
			ContractEnd num `json:"contract_end_date"`
			AskEnd      num `json:"ask_end_date"`
			Created     num `json:"created_at"`
		} `json:"pending_price_increases"`
	}
	if err := decode(op, res.body, &w); err != nil {
		return nil, err
	}
	if w.Truncated {
		return nil, fmt.Errorf("%s: the answer is truncated: %w", op, provider.ErrIncompleteListing)
	}
	out := make([]provider.PriceIncrease, 0, len(w.Rows))
	for _, r := range w.Rows {
		out = append(out, provider.PriceIncrease{ID: int64(r.ID), ContractID: provider.InstanceID(r.Contract),
			OldGPUCostPerSec: float64(r.OldGPU), NewGPUCostPerSec: float64(r.NewGPU),
			OldDiskCostPerSec: float64(r.OldDisk), NewDiskCostPerSec: float64(r.NewDisk),
			ContractEnd: unixTime(r.ContractEnd), AskEnd: unixTime(r.AskEnd), CreatedAt: unixTime(r.Created)})
	}
	return out, nil
}

// AcceptPriceIncrease is PUT /api/v0/instances/accept-price-increase/ with
// exactly {"pending_price_increase_id": id} (vast-api.md §12.2: extra keys
// are refused). An increase already answered or gone is 404
// no_pending_price_increase (older backends: 409), both not found here.
func (c *Client) AcceptPriceIncrease(ctx context.Context, id int64) error {
	return c.answerPriceIncrease(ctx, "accept", id)
}

// RejectPriceIncrease is PUT /api/v0/instances/reject-price-increase/: the
// contract then ends at its contract_end_date at the old price.
func (c *Client) RejectPriceIncrease(ctx context.Context, id int64) error {
	return c.answerPriceIncrease(ctx, "reject", id)
}

func (c *Client) answerPriceIncrease(ctx context.Context, verb string, id int64) error {
	op := fmt.Sprintf("%s price increase %d", verb, id)
	_, err := c.do(ctx, call{op: op, method: http.MethodPut, path: "/api/v0/instances/" + verb + "-price-increase/",
		body: map[string]any{"pending_price_increase_id": id}})
	var ae *provider.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		// The older backends' answer to a stale row (§12.2): not found.
		return fmt.Errorf("%w: %w", provider.ErrNotFound, err)
	}
	return err
}
