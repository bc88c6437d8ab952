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
// by the first of them, on its context, once the call before ends. Each
// caller gets its own answer: a bulk success, or a 404 (none of the ids is
// the account's any more: gone, as destroyAll takes it), is success for
// each; an authentication failure goes to each; any other failure sends
// each caller's destroy again on its own, on its own context. A destroy's
// confirmation stays the caller's (a show by id): the grouping changes
// how the destroys travel, not what proves them.
//
// The brief listings of one label that the runs' sweeps make go
// together the same way, one listing for up to maxListedLabels labels
// (destroyGroup.ListInstances).
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

// destroyGroup is CoalesceDestroys' market: its destroys, and its brief
// listings of one label, each go through a group commit.
type destroyGroup struct {
	inner    provider.Market
	bulk     BulkDestroyer
	destroys group[provider.InstanceID, destroyAnswer]
	lists    group[string, listAnswer]
}

// group is a group commit with no timer: a call made while none is in
// flight goes at once, alone; calls made while one is in flight wait in
// the queue, and go together once it ends, sent by the first of them (on
// its context). A call is always sent after it was made: no caller is
// answered by a call that began before its own.
type group[R, A any] struct {
	mu    sync.Mutex
	busy  bool
	queue []*member[R, A]
}

// member is one caller waiting in a group. Its turn comes once: to lead a
// batch (send it, then hand on), then, or only, its answer.
type member[R, A any] struct {
	req  R
	turn chan turn[R, A] // buffered: the sender never waits
}

type turn[R, A any] struct {
	lead []*member[R, A] // the batch this caller sends
	ans  A
}

// do makes req's call: alone when the group is idle, else in the next
// batch, which batch sends, answering each member. A caller whose context
// ends while it waits leaves the queue with gave(ctx.Err()), unless a
// batch has taken it already.
func (g *group[R, A]) do(ctx context.Context, req R, alone func(context.Context, R) A, batch func(context.Context, []*member[R, A]), gave func(error) A) A {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		a := alone(ctx, req)
		g.handOn()
		return a
	}
	m := &member[R, A]{req: req, turn: make(chan turn[R, A], 2)}
	g.queue = append(g.queue, m)
	g.mu.Unlock()
	var t turn[R, A]
	select {
	case t = <-m.turn:
	case <-ctx.Done():
		if g.withdraw(m) {
			return gave(ctx.Err())
		}
		t = <-m.turn // already in a batch: its turn is on its way
	}
	if t.lead != nil {
		batch(ctx, t.lead)
		g.handOn()
		t = <-m.turn
	}
	return t.ans
}

func (m *member[R, A]) answer(a A) { m.turn <- turn[R, A]{ans: a} }

// withdraw takes m out of the queue, unless a batch has taken it.
func (g *group[R, A]) withdraw(m *member[R, A]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, m)
	if i < 0 {
		return false
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	return true
}

// handOn ends the call in flight: what queued meanwhile is the next batch,
// sent by its first caller; with nothing queued the group is idle.
func (g *group[R, A]) handOn() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.busy = false
		return
	}
	b := g.queue
	g.queue = nil
	b[0].turn <- turn[R, A]{lead: b}
}

// destroyAnswer is a grouped destroy's answer: err, or own — send the
// destroy again on its own.
type destroyAnswer struct {
	err error
	own bool
}

func (g *destroyGroup) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	a := g.destroys.do(ctx, id,
		func(ctx context.Context, id provider.InstanceID) destroyAnswer {
			return destroyAnswer{err: g.inner.DestroyInstance(ctx, id)}
		},
		g.sendDestroys,
		func(err error) destroyAnswer {
			return destroyAnswer{err: fmt.Errorf("destroy instance %d: %w", id, err)}
		})
	if a.own {
		return g.inner.DestroyInstance(ctx, id)
	}
	return a.err
}

// sendDestroys destroys batch in bulk calls of provider.MaxBulkIDs ids
// and answers each caller in it.
func (g *destroyGroup) sendDestroys(ctx context.Context, batch []*member[provider.InstanceID, destroyAnswer]) {
	for chunk := range slices.Chunk(batch, provider.MaxBulkIDs) {
		if len(chunk) == 1 {
			chunk[0].answer(destroyAnswer{own: true}) // a bulk call of one is a single destroy
			continue
		}
		ids := make([]provider.InstanceID, len(chunk))
		for i, m := range chunk {
			ids[i] = m.req
		}
		var a destroyAnswer
		switch err := g.bulk.DestroyInstances(ctx, ids); {
		case err == nil, errors.Is(err, provider.ErrNotFound):
			// 404: none of the ids is the account's any more — gone.
		case errors.Is(err, provider.ErrAuth):
			a.err = err // sending again cannot help
		default:
			// Refused or failed as a whole: whether a mix of live and gone
			// ids destroys the live ones is not documented (§12.1).
			a.own = true
		}
		for _, m := range chunk {
			m.answer(a)
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

// listAnswer is a grouped listing's answer: its label's instances, or
// err; or own — list on your own.
type listAnswer struct {
	list []provider.Instance
	err  error
	own  bool
}

// ListInstances groups the brief listings of one label (each run's
// teardown sweep lists its own): those that wait together go as one
// listing filtering on up to maxListedLabels labels, and each caller gets
// its own label's instances. A listing that fails fails for each of its
// callers: it is complete for one label only when it is complete. Any
// other listing passes through.
func (g *destroyGroup) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	if len(o.Labels) != 1 || !o.Brief {
		return g.inner.ListInstances(ctx, o)
	}
	a := g.lists.do(ctx, o.Labels[0],
		func(ctx context.Context, _ string) listAnswer {
			list, err := g.inner.ListInstances(ctx, o)
			return listAnswer{list: list, err: err}
		},
		g.sendLists,
		func(err error) listAnswer {
			return listAnswer{err: fmt.Errorf("list instances labelled %s: %w", o.Labels[0], err)}
		})
	if a.own {
		return g.inner.ListInstances(ctx, o)
	}
	return a.list, a.err
}

// sendLists lists the labels of batch, maxListedLabels callers a listing,
// and answers each caller with its label's instances.
func (g *destroyGroup) sendLists(ctx context.Context, batch []*member[string, listAnswer]) {
	for chunk := range slices.Chunk(batch, maxListedLabels) {
		var labels []string
		for _, m := range chunk {
			if !slices.Contains(labels, m.req) {
				labels = append(labels, m.req)
			}
		}
		list, err := g.inner.ListInstances(ctx, provider.ListOptions{Labels: labels, Brief: true})
		for _, m := range chunk {
			switch {
			case err != nil && ctx.Err() != nil:
				m.answer(listAnswer{own: true}) // the sender's context ended, not the caller's
			case err != nil:
				m.answer(listAnswer{err: err})
			default:
				var mine []provider.Instance
				for _, in := range list {
					if in.Label == m.req {
						mine = append(mine, in)
					}
				}
				m.answer(listAnswer{list: mine})
			}
		}
	}
}

func (g *destroyGroup) AttachSSHKey(ctx context.Context, id provider.InstanceID, key string) error {
	return g.inner.AttachSSHKey(ctx, id, key)
}

func (g *destroyGroup) Charges(ctx context.Context, q provider.ChargeQuery) ([]provider.Charge, error) {
	return g.inner.Charges(ctx, q)
}
