package retry

import (
	"context"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
)

// InvoiceReader reads the account's payment records; the real client
// offers it beside provider.Account.
type InvoiceReader interface {
	Invoices(ctx context.Context, q provider.ChargeQuery) ([]provider.Invoice, error)
}

// Surface is every call vastrun makes on a marketplace client: the
// lifecycle and account calls (provider.Marketplace), the instance routes
// beyond them (provider.Operations) and the invoice reads. Consumers keep
// naming only the small interfaces they call; the decorator offers all of
// them, so wrapping the client never hides a method (the engine asks its
// market for ChangeBid by type assertion, for one).
type Surface interface {
	provider.Marketplace
	provider.Operations
	InvoiceReader
}

// Client retries the calls of the Surface it wraps. It holds the wrapped
// client in a field rather than embedding it, so that a method added to
// Surface fails to compile here until its retry class is chosen, instead
// of passing through unretried.
type Client struct {
	inner  Surface
	policy Policy
}

var _ Surface = (*Client)(nil)

// Wrap decorates s with p. Without p.Budget, the client's calls share a
// default one.
func Wrap(s Surface, p Policy) *Client {
	if p.Budget == nil {
		p.Budget = NewRateBudget(p.Clock, 0, 0)
	}
	return &Client{inner: s, policy: p}
}

func (c *Client) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	return call(ctx, &c.policy, "search offers", safe, func(ctx context.Context) ([]provider.Offer, error) {
		return c.inner.SearchOffers(ctx, q)
	})
}

// CreateInstance is sent again only after a 429; see the package contract.
func (c *Client) CreateInstance(ctx context.Context, r provider.CreateRequest) (provider.CreateResult, error) {
	return call(ctx, &c.policy, fmt.Sprintf("create instance from offer %d", r.OfferID), once, func(ctx context.Context) (provider.CreateResult, error) {
		return c.inner.CreateInstance(ctx, r)
	})
}

func (c *Client) ShowInstance(ctx context.Context, id provider.InstanceID) (provider.Instance, error) {
	return call(ctx, &c.policy, fmt.Sprintf("show instance %d", id), safe, func(ctx context.Context) (provider.Instance, error) {
		return c.inner.ShowInstance(ctx, id)
	})
}

// ListInstances retries the whole listing: a page that failed, a cursor
// that repeated or a short total all mean the listing is read again.
func (c *Client) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	return call(ctx, &c.policy, listOp(o), safe, func(ctx context.Context) ([]provider.Instance, error) {
		return c.inner.ListInstances(ctx, o)
	})
}

func (c *Client) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("destroy instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.DestroyInstance(ctx, id)
	})
}

func (c *Client) LabelInstance(ctx context.Context, id provider.InstanceID, label string) error {
	return do(ctx, &c.policy, fmt.Sprintf("label instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.LabelInstance(ctx, id, label)
	})
}

func (c *Client) StopInstance(ctx context.Context, id provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("stop instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.StopInstance(ctx, id)
	})
}

func (c *Client) StartInstance(ctx context.Context, id provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("start instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.StartInstance(ctx, id)
	})
}

func (c *Client) AttachSSHKey(ctx context.Context, id provider.InstanceID, key string) error {
	return do(ctx, &c.policy, fmt.Sprintf("attach SSH key to instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.AttachSSHKey(ctx, id, key)
	})
}

// RequestLogs asks again for the tail: asking twice yields the same text.
func (c *Client) RequestLogs(ctx context.Context, id provider.InstanceID, r provider.LogRequest) (string, error) {
	return call(ctx, &c.policy, fmt.Sprintf("request logs of instance %d", id), safe, func(ctx context.Context) (string, error) {
		return c.inner.RequestLogs(ctx, id, r)
	})
}

func (c *Client) CurrentUser(ctx context.Context) (provider.User, error) {
	return call(ctx, &c.policy, "show current user", safe, c.inner.CurrentUser)
}

func (c *Client) Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error) {
	return call(ctx, &c.policy, "list charges", safe, func(ctx context.Context) ([]provider.Charge, error) {
		return c.inner.Charges(ctx, q)
	})
}

func (c *Client) APIKeys(ctx context.Context) ([]provider.APIKeyInfo, error) {
	return call(ctx, &c.policy, "list API keys", safe, c.inner.APIKeys)
}

func (c *Client) SSHKeys(ctx context.Context) ([]provider.SSHKey, error) {
	return call(ctx, &c.policy, "list SSH keys", safe, c.inner.SSHKeys)
}

// AddSSHKey is sent again only after a 429: a repeat would register the
// key twice.
func (c *Client) AddSSHKey(ctx context.Context, key string) (provider.SSHKey, error) {
	return call(ctx, &c.policy, "add SSH key", once, func(ctx context.Context) (provider.SSHKey, error) {
		return c.inner.AddSSHKey(ctx, key)
	})
}

func (c *Client) Invoices(ctx context.Context, q provider.ChargeQuery) ([]provider.Invoice, error) {
	return call(ctx, &c.policy, "list invoices", safe, func(ctx context.Context) ([]provider.Invoice, error) {
		return c.inner.Invoices(ctx, q)
	})
}

func (c *Client) StopInstances(ctx context.Context, ids []provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("stop instances %v", ids), safe, func(ctx context.Context) error {
		return c.inner.StopInstances(ctx, ids)
	})
}

func (c *Client) StartInstances(ctx context.Context, ids []provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("start instances %v", ids), safe, func(ctx context.Context) error {
		return c.inner.StartInstances(ctx, ids)
	})
}

func (c *Client) DestroyInstances(ctx context.Context, ids []provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("destroy instances %v", ids), safe, func(ctx context.Context) error {
		return c.inner.DestroyInstances(ctx, ids)
	})
}

// RebootInstance is retried: a reboot that ran twice leaves the container
// as one that ran once, restarted and keeping its GPU.
func (c *Client) RebootInstance(ctx context.Context, id provider.InstanceID) error {
	return do(ctx, &c.policy, fmt.Sprintf("reboot instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.RebootInstance(ctx, id)
	})
}

// Execute is sent again only after a 429: rm is not idempotent.
func (c *Client) Execute(ctx context.Context, id provider.InstanceID, command string) (string, error) {
	return call(ctx, &c.policy, fmt.Sprintf("execute on instance %d", id), once, func(ctx context.Context) (string, error) {
		return c.inner.Execute(ctx, id, command)
	})
}

// ChangeBid is retried: it sets the bid, it does not add to it.
func (c *Client) ChangeBid(ctx context.Context, id provider.InstanceID, price float64) error {
	return do(ctx, &c.policy, fmt.Sprintf("change bid of instance %d", id), safe, func(ctx context.Context) error {
		return c.inner.ChangeBid(ctx, id, price)
	})
}

func (c *Client) Deposit(ctx context.Context, id provider.InstanceID) (provider.Deposit, error) {
	return call(ctx, &c.policy, fmt.Sprintf("show deposit of instance %d", id), safe, func(ctx context.Context) (provider.Deposit, error) {
		return c.inner.Deposit(ctx, id)
	})
}

func (c *Client) InstanceFilters(ctx context.Context) (map[string][]string, error) {
	return call(ctx, &c.policy, "list instance filters", safe, c.inner.InstanceFilters)
}

func (c *Client) GPUNames(ctx context.Context) ([]string, error) {
	return call(ctx, &c.policy, "list GPU names", safe, c.inner.GPUNames)
}

func (c *Client) LegacyInvoices(ctx context.Context, from, to time.Time) ([]provider.LegacyInvoice, error) {
	return call(ctx, &c.policy, "list legacy invoices", safe, func(ctx context.Context) ([]provider.LegacyInvoice, error) {
		return c.inner.LegacyInvoices(ctx, from, to)
	})
}

func (c *Client) InvoiceRows(ctx context.Context, from, to time.Time) ([]provider.InvoiceRow, error) {
	return call(ctx, &c.policy, "search invoices", safe, func(ctx context.Context) ([]provider.InvoiceRow, error) {
		return c.inner.InvoiceRows(ctx, from, to)
	})
}

// CopyDirect is retried: copying the same path again leaves the same bytes.
func (c *Client) CopyDirect(ctx context.Context, src, dst provider.InstanceID, srcPath, dstPath string) error {
	return do(ctx, &c.policy, fmt.Sprintf("copy %d:%s to %d:%s", src, srcPath, dst, dstPath), safe, func(ctx context.Context) error {
		return c.inner.CopyDirect(ctx, src, dst, srcPath, dstPath)
	})
}

func (c *Client) RsyncTarget(ctx context.Context, id provider.InstanceID, path string, upload bool) (provider.SSHEndpoint, error) {
	return call(ctx, &c.policy, fmt.Sprintf("rsync endpoint of instance %d", id), safe, func(ctx context.Context) (provider.SSHEndpoint, error) {
		return c.inner.RsyncTarget(ctx, id, path, upload)
	})
}

func (c *Client) CloudIntegrations(ctx context.Context) ([]provider.CloudIntegration, error) {
	return call(ctx, &c.policy, "list cloud integrations", safe, c.inner.CloudIntegrations)
}

func (c *Client) Templates(ctx context.Context) ([]provider.Template, error) {
	return call(ctx, &c.policy, "list templates", safe, c.inner.Templates)
}

// CloudCopy is sent again only after a 429: a second copy job would run
// beside the first.
func (c *Client) CloudCopy(ctx context.Context, r provider.CloudCopyRequest) (string, error) {
	return call(ctx, &c.policy, fmt.Sprintf("cloud copy %s to %s for instance %d", r.Src, r.Dst, r.Instance), once, func(ctx context.Context) (string, error) {
		return c.inner.CloudCopy(ctx, r)
	})
}

func (c *Client) InstanceSSHKeys(ctx context.Context, id provider.InstanceID) ([]string, error) {
	return call(ctx, &c.policy, fmt.Sprintf("list SSH keys of instance %d", id), safe, func(ctx context.Context) ([]string, error) {
		return c.inner.InstanceSSHKeys(ctx, id)
	})
}

func (c *Client) SpendRate(ctx context.Context) (provider.SpendRate, error) {
	return call(ctx, &c.policy, "read spend rate", safe, c.inner.SpendRate)
}

func (c *Client) MachineEarnings(ctx context.Context, from, to time.Time) (provider.Earnings, error) {
	return call(ctx, &c.policy, "read machine earnings", safe, func(ctx context.Context) (provider.Earnings, error) {
		return c.inner.MachineEarnings(ctx, from, to)
	})
}

func (c *Client) PendingPriceIncreases(ctx context.Context) ([]provider.PriceIncrease, error) {
	return call(ctx, &c.policy, "list pending price increases", safe, c.inner.PendingPriceIncreases)
}

// AcceptPriceIncrease and RejectPriceIncrease are safe: a repeat of an
// answer that took finds the increase gone (not found, never retried),
// which the caller reads as answered.
func (c *Client) AcceptPriceIncrease(ctx context.Context, id int64) error {
	return do(ctx, &c.policy, fmt.Sprintf("accept price increase %d", id), safe, func(ctx context.Context) error {
		return c.inner.AcceptPriceIncrease(ctx, id)
	})
}

func (c *Client) RejectPriceIncrease(ctx context.Context, id int64) error {
	return do(ctx, &c.policy, fmt.Sprintf("reject price increase %d", id), safe, func(ctx context.Context) error {
		return c.inner.RejectPriceIncrease(ctx, id)
	})
}
