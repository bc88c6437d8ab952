package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/vastrun/vastrun/internal/provider"
)

// CoalesceDestroys returns m with its single destroys grouped, for the
// runs of a matrix or a sweep, which share one market and tear down
// together (a Ctrl-C ends them all): each run destroys its own instance,
// and destroys that arrive together go as a few bulk calls instead of one
// call each — where they meet Vast's rate limits (vast-api.md §6).
//
// It is a group commit, with no timer: the first DestroyInstance goes at
// once, alone; the ones that arrive while a call is in flight wait, and go
// together as the next bulk destroy (provider.MaxBulkIDs ids a call), sent
// by the first of them once the call before ends. Each caller gets its own
// answer: a bulk success, or a 404 (none of the ids is the account's any
// more: gone, as destroyAll takes it), is success for each; an
// authentication failure goes to each; any other failure sends each
// caller's destroy again on its own, on its own context. A destroy's
// confirmation stays the caller's (a show by id): the grouping changes
// how the destroys travel, not what proves them.
//
// Without a bulk destroy (BulkDestroyer), m comes back as it is. The
// result offers provider.BidChanger and provider.PriceIncreases exactly
// when m does, and the bulk destroy itself, ungrouped.
func CoalesceDestroys(m provider.Market) provider.Market {
	bd, ok := m.(BulkDestroyer)
	if !ok {
		return m
	}
	c := &destroyGroup{inner: m, bulk: bd}
	bc, bids := m.(provider.BidChanger)
	pi, prices := m.(provider.PriceIncreases)
	switch {
	case bids && prices:
		return struct {
			*destroyGroup
			provider.BidChanger
			provider.PriceIncreases
		}{c, bc, pi}
	case bids:
		return struct {
			*destroyGroup
			provider.BidChanger
		}{c, bc}
	case prices:
		return struct {
			*destroyGroup
			provider.PriceIncreases
		}{c, pi}
	}
	return c
}

// destroyGroup is CoalesceDestroys' market. busy says a destroy (single or
// bulk) is in flight; queue holds the destroys waiting for it to end.
type destroyGroup struct {
	inner provider.Market
	bulk  BulkDestroyer

	mu    sync.Mutex
	busy  bool
	queue []*queuedDestroy
}

// queuedDestroy is one caller waiting in the group. Its turn comes once:
// to lead a batch (send it, then hand on), then, or only, its answer.
type queuedDestroy struct {
	id   provider.InstanceID
	turn chan destroyTurn // buffered: the sender never waits
}

type destroyTurn struct {
	lead []*queuedDestroy // the batch this caller sends
	err  error            // the answer
	own  bool             // the answer: send your destroy on your own
}

func (g *destroyGroup) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		err := g.inner.DestroyInstance(ctx, id)
		g.handOn()
		return err
	}
	q := &queuedDestroy{id: id, turn: make(chan destroyTurn, 2)}
	g.queue = append(g.queue, q)
	g.mu.Unlock()
	var t destroyTurn
	select {
	case t = <-q.turn:
	case <-ctx.Done():
		if g.withdraw(q) {
			return fmt.Errorf("destroy instance %d: %w", id, ctx.Err())
		}
		t = <-q.turn // already in a batch: its turn is on its way
	}
	if t.lead != nil {
		g.send(ctx, t.lead)
		g.handOn()
		t = <-q.turn
	}
	if t.own {
		return g.inner.DestroyInstance(ctx, id)
	}
	return t.err
}

// withdraw takes q out of the queue, unless a batch has taken it.
func (g *destroyGroup) withdraw(q *queuedDestroy) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, q)
	if i < 0 {
		return false
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	return true
}

// handOn ends the call in flight: what queued meanwhile is the next batch,
// sent by its first caller; with nothing queued the group is idle.
func (g *destroyGroup) handOn() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.busy = false
		return
	}
	batch := g.queue
	g.queue = nil
	batch[0].turn <- destroyTurn{lead: batch}
}

// send destroys batch in bulk calls of provider.MaxBulkIDs ids and
// answers each caller in it.
func (g *destroyGroup) send(ctx context.Context, batch []*queuedDestroy) {
	for chunk := range slices.Chunk(batch, provider.MaxBulkIDs) {
		if len(chunk) == 1 {
			chunk[0].turn <- destroyTurn{own: true} // a bulk call of one is a single destroy
			continue
		}
		ids := make([]provider.InstanceID, len(chunk))
		for i, q := range chunk {
			ids[i] = q.id
		}
		var t destroyTurn
		switch err := g.bulk.DestroyInstances(ctx, ids); {
		case err == nil, errors.Is(err, provider.ErrNotFound):
			// 404: none of the ids is the account's any more — gone.
		case errors.Is(err, provider.ErrAuth):
			t.err = err // sending again cannot help
		default:
			// Refused or failed as a whole: whether a mix of live and gone
			// ids destroys the live ones is not documented (§12.1).
			t.own = true
		}
		for _, q := range chunk {
			q.turn <- t
		}
	}
}

// DestroyInstances is the bulk destroy, sent as it is: a caller that
// destroys in bulk has grouped its ids already.
func (g *destroyGroup) DestroyInstances(ctx context.Context, ids []provider.InstanceID) error {
	return g.bulk.DestroyInstances(ctx, ids)
}

// The rest of provider.Market passes through.

func (g *destroyGroup) SearchOffers(ctx context.Context, q provider.Query) ([]provider.Offer, error) {
	return g.inner.SearchOffers(ctx, q)
}

func (g *destroyGroup) CreateInstance(ctx context.Context, r provider.CreateRequest) (provider.CreateResult, error) {
	return g.inner.CreateInstance(ctx, r)
}

func (g *destroyGroup) ShowInstance(ctx context.Context, id provider.InstanceID) (provider.Instance, error) {
	return g.inner.ShowInstance(ctx, id)
}

func (g *destroyGroup) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	return g.inner.ListInstances(ctx, o)
}

func (g *destroyGroup) AttachSSHKey(ctx context.Context, id provider.InstanceID, key string) error {
	return g.inner.AttachSSHKey(ctx, id, key)
}

func (g *destroyGroup) Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error) {
	return g.inner.Charges(ctx, q)
}
