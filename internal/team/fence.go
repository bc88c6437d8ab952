package team

import (
	"context"
	"fmt"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// FencedMarket checks the run's lease before every mutating marketplace
// call (rent, destroy, attach a key), so that a controller that lost its
// lease, or fenced itself, changes nothing on the marketplace. Reads pass.
type FencedMarket struct {
	provider.Market
	Lease func() *teamstate.Lease
}

// Fence wraps m; calls made before the lease exists are refused too. The
// result offers ChangeBid and the price-increase routes (their answers
// fenced like every mutating call) exactly when m does, so re-bidding and
// answering a host's increase work under team state as without it.
func (c *Controller) Fence(m provider.Market) provider.Market {
	f := &FencedMarket{Market: m, Lease: c.Lease}
	bc, bids := m.(provider.BidChanger)
	pi, prices := m.(provider.PriceIncreases)
	switch {
	case bids && prices:
		return &struct {
			*fencedBidMarket
			fencedPrices
		}{&fencedBidMarket{FencedMarket: f, bids: bc}, fencedPrices{f, pi}}
	case bids:
		return &fencedBidMarket{FencedMarket: f, bids: bc}
	case prices:
		return &struct {
			*FencedMarket
			fencedPrices
		}{f, fencedPrices{f, pi}}
	}
	return f
}

// fencedPrices are the price-increase routes of a fenced market: the list
// is a read and passes; an answer changes a contract and is fenced.
type fencedPrices struct {
	f *FencedMarket
	p provider.PriceIncreases
}

func (f fencedPrices) PendingPriceIncreases(ctx context.Context) ([]provider.PriceIncrease, error) {
	return f.p.PendingPriceIncreases(ctx)
}

func (f fencedPrices) AcceptPriceIncrease(ctx context.Context, id int64) error {
	if err := f.f.check(fmt.Sprintf("accept price increase %d", id)); err != nil {
		return err
	}
	return f.p.AcceptPriceIncrease(ctx, id)
}

func (f fencedPrices) RejectPriceIncrease(ctx context.Context, id int64) error {
	if err := f.f.check(fmt.Sprintf("reject price increase %d", id)); err != nil {
		return err
	}
	return f.p.RejectPriceIncrease(ctx, id)
}

// fencedBidMarket is a FencedMarket over a market with a change-bid route.
type fencedBidMarket struct {
	*FencedMarket
	bids provider.BidChanger
}

func (f *fencedBidMarket) ChangeBid(ctx context.Context, id provider.InstanceID, price float64) error {
	if err := f.check(fmt.Sprintf("change the bid of instance %d", id)); err != nil {
		return err
	}
	return f.bids.ChangeBid(ctx, id, price)
}

func (f *FencedMarket) check(op string) error {
	l := f.Lease()
	if l == nil {
		return fmt.Errorf("%s: team state: no lease held on this run", op)
	}
	if err := l.Check(); err != nil {
		return &FenceError{Op: op, Err: err}
	}
	return nil
}

// FenceError is a marketplace call refused because this controller no
// longer holds the run's lease (teamstate.ErrLeaseLost or teamstate.ErrFenced).
// It is permanent: retrying cannot bring the lease back, and the
// controller that takes the run over finishes it, teardown included.
type FenceError struct {
	Op  string
	Err error
}

func (e *FenceError) Error() string   { return e.Op + ": " + e.Err.Error() }
func (e *FenceError) Unwrap() error   { return e.Err }
func (e *FenceError) Permanent() bool { return true }

func (f *FencedMarket) CreateInstance(ctx context.Context, req provider.CreateRequest) (provider.CreateResult, error) {
	if err := f.check(fmt.Sprintf("rent offer %d", req.OfferID)); err != nil {
		return provider.CreateResult{}, err
	}
	return f.Market.CreateInstance(ctx, req)
}

func (f *FencedMarket) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	if err := f.check(fmt.Sprintf("destroy instance %d", id)); err != nil {
		return err
	}
	return f.Market.DestroyInstance(ctx, id)
}

func (f *FencedMarket) AttachSSHKey(ctx context.Context, id provider.InstanceID, publicKey string) error {
	if err := f.check(fmt.Sprintf("attach a key to instance %d", id)); err != nil {
		return err
	}
	return f.Market.AttachSSHKey(ctx, id, publicKey)
}
