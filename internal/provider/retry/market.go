package retry

import (
	"context"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
)

// Market is [Client] for a caller that holds only a provider.Market, such
// as a market already fenced by team state: same classes, same policy.
// Every method of provider.Market is written here, so nothing passes
// through unretried.
type Market struct {
	Inner provider.Market
	Clock clock.Clock // default: the wall clock
	// MaxTries bounds the sends of one call (default 5).
	MaxTries int
	// Initial and Max shape the waits (defaults 500ms and 20s).
	Initial, Max time.Duration
	// Report, when set, is told of each failed send that is retried.
	Report func(op string, err error, wait time.Duration)
	// Budget and Throttled are Policy's (nil Budget: none across calls).
	Budget    *RateBudget
	Throttled func(endpoint string, spent int)
}

var _ provider.Market = (*Market)(nil)

// New wraps m with the default policy on clk.
func New(m provider.Market, clk clock.Clock) *Market { return &Market{Inner: m, Clock: clk} }

func (m *Market) policy() *Policy {
	return &Policy{Clock: m.Clock, MaxTries: m.MaxTries, Initial: m.Initial, Max: m.Max, Report: m.Report, Budget: m.Budget, Throttled: m.Throttled}
}

func (m *Market) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	return call(ctx, m.policy(), "search offers", safe, func(ctx context.Context) ([]provider.Offer, error) {
		return m.Inner.SearchOffers(ctx, q)
	})
}

// CreateInstance is sent again only after a 429; see the package contract.
func (m *Market) CreateInstance(ctx context.Context, r provider.CreateRequest) (provider.CreateResult, error) {
	return call(ctx, m.policy(), fmt.Sprintf("create instance from offer %d", r.OfferID), once, func(ctx context.Context) (provider.CreateResult, error) {
		return m.Inner.CreateInstance(ctx, r)
	})
}

func (m *Market) ShowInstance(ctx context.Context, id provider.InstanceID) (provider.Instance, error) {
	return call(ctx, m.policy(), fmt.Sprintf("show instance %d", id), safe, func(ctx context.Context) (provider.Instance, error) {
		return m.Inner.ShowInstance(ctx, id)
	})
}

func (m *Market) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	return call(ctx, m.policy(), listOp(o), safe, func(ctx context.Context) ([]provider.Instance, error) {
		return m.Inner.ListInstances(ctx, o)
	})
}

func (m *Market) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	return do(ctx, m.policy(), fmt.Sprintf("destroy instance %d", id), safe, func(ctx context.Context) error {
		return m.Inner.DestroyInstance(ctx, id)
	})
}

func (m *Market) AttachSSHKey(ctx context.Context, id provider.InstanceID, key string) error {
	return do(ctx, m.policy(), fmt.Sprintf("attach SSH key to instance %d", id), safe, func(ctx context.Context) error {
		return m.Inner.AttachSSHKey(ctx, id, key)
	})
}

func (m *Market) Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error) {
	return call(ctx, m.policy(), "list charges", safe, func(ctx context.Context) ([]provider.Charge, error) {
		return m.Inner.Charges(ctx, q)
	})
}
