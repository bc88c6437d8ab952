package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
)

// BulkDestroyer is a market's bulk destroy (DELETE /api/v0/instances/,
// vast-api.md §12.1): the real client and the retry decorator have it. The
// Confirmer finds it by type assertion and destroys one id at a time
// without it.
type BulkDestroyer interface {
	DestroyInstances(ctx context.Context, ids []provider.InstanceID) error
}

// maxListedLabels is the most labels one listing filters on: more are
// listed in several listings of this many (the filter travels in the URL).
const maxListedLabels = 32

// destroyAll sends the destroy of every id: in bulk, provider.MaxBulkIDs ids
// a call, when the market has it (the first round); one call per id
// otherwise, or for a chunk the bulk call refused. A bulk answer of 404
// means none of the chunk's ids is the account's any more: gone, which is
// what a destroy wants. What the destroys did is for the confirmation to
// prove, so only an authentication failure is returned (retrying cannot
// help); any other failure leaves its ids for the confirmation to find.
func (c Confirmer) destroyAll(ctx context.Context, ids []provider.InstanceID, bulk bool) error {
	for _, id := range ids {
		if c.OnIntent != nil {
			c.OnIntent(id)
		}
	}
	bd, ok := c.Market.(BulkDestroyer)
	for chunk := range slices.Chunk(ids, provider.MaxBulkIDs) {
		if bulk && ok && len(chunk) > 1 {
			err := bd.DestroyInstances(ctx, chunk)
			if err == nil || errors.Is(err, provider.ErrNotFound) {
				c.done(chunk...)
				continue
			}
			if errors.Is(err, provider.ErrAuth) {
				return err
			}
			// Refused or failed as a whole: whether a mix of live and gone
			// ids destroys the live ones is not documented (§12.1), so
			// every id is sent on its own.
		}
		for _, id := range chunk {
			err := c.Market.DestroyInstance(ctx, id)
			if errors.Is(err, provider.ErrAuth) {
				return err
			}
			if err == nil {
				c.done(id)
			}
		}
	}
	return nil
}

func (c Confirmer) done(ids ...provider.InstanceID) {
	if c.OnDone == nil {
		return
	}
	for _, id := range ids {
		c.OnDone(id)
	}
}

// DestroyConfirmAll destroys every instance in targets (id → its label,
// "" when unknown) in O(1) calls and proves each gone: the destroys go in
// bulk, then one complete listing of the targets' labels (one per
// maxListedLabels labels) confirms every id it does not show
// ("label_listing"), and only the ids it still shows, or that have no
// label, are read by id (404: "show"). Ids still present are destroyed
// again, one call each, and looked for again with backoff until deadline
// (on c.Clock). A listing that fails is no verdict: every id is then read
// by id. It returns the evidence per confirmed id and the error per id
// that could not be confirmed.
func (c Confirmer) DestroyConfirmAll(ctx context.Context, targets map[provider.InstanceID]string, deadline time.Time) (map[provider.InstanceID][]string, map[provider.InstanceID]error) {
	confirmed := map[provider.InstanceID][]string{}
	failed := map[provider.InstanceID]error{}
	pending := make([]provider.InstanceID, 0, len(targets))
	for id := range targets {
		pending = append(pending, id)
	}
	slices.Sort(pending)
	if len(pending) == 0 {
		return confirmed, failed
	}
	last := map[provider.InstanceID]error{}
	var authErr error
	round := 0
	err := poll.Until(ctx, c.Clock, poll.Policy{Initial: time.Second, Max: 15 * time.Second, Deadline: deadline}, func(ctx context.Context) (bool, error) {
		round++
		if authErr = c.destroyAll(ctx, pending, round == 1); authErr != nil {
			return false, authErr
		}
		gone, present, errs := c.confirmAll(ctx, targets, pending)
		for id, via := range gone {
			confirmed[id] = via
		}
		pending, last = present, errs
		return len(pending) == 0, nil
	})
	if err == nil {
		return confirmed, failed
	}
	for _, id := range pending {
		switch {
		case authErr != nil:
			failed[id] = fmt.Errorf("destroy instance %d: %w", id, authErr)
		case errors.Is(err, poll.ErrDeadline):
			failed[id] = fmt.Errorf("destroy instance %d: not confirmed before the deadline: %w", id, orErr(last[id], ErrStillPresent))
		default:
			failed[id] = fmt.Errorf("destroy instance %d: %w (last: %w)", id, err, orErr(last[id], ErrStillPresent))
		}
	}
	return confirmed, failed
}

// confirmAll looks for ids once: one complete listing, then a read by id
// of what the listing still shows or cannot speak for. It returns the
// evidence for each id proven gone, the ids not (yet) proven gone, and why.
func (c Confirmer) confirmAll(ctx context.Context, labels map[provider.InstanceID]string, ids []provider.InstanceID) (map[provider.InstanceID][]string, []provider.InstanceID, map[provider.InstanceID]error) {
	gone := map[provider.InstanceID][]string{}
	var present []provider.InstanceID
	errs := map[provider.InstanceID]error{}
	listed, complete := c.listFor(ctx, labels, ids)
	for _, id := range ids {
		if complete[labels[id]] && !listed[id] {
			gone[id] = []string{viaLabelListing}
			continue
		}
		_, err := c.Market.ShowInstance(ctx, id)
		switch {
		case errors.Is(err, provider.ErrNotFound):
			// Gone by id; a listing that still shows it lags.
			gone[id] = []string{viaShow}
		case err == nil:
			present = append(present, id)
			errs[id] = fmt.Errorf("instance %d: %w", id, ErrStillPresent)
		default:
			present = append(present, id)
			errs[id] = fmt.Errorf("confirm instance %d: %w", id, err)
		}
	}
	return gone, present, errs
}

// listFor lists the labels of ids completely (one listing per
// maxListedLabels labels) and returns the ids shown and the labels whose
// listing completed.
func (c Confirmer) listFor(ctx context.Context, labels map[provider.InstanceID]string, ids []provider.InstanceID) (map[provider.InstanceID]bool, map[string]bool) {
	var want []string
	for _, id := range ids {
		if l := labels[id]; l != "" && !slices.Contains(want, l) {
			want = append(want, l)
		}
	}
	listed := map[provider.InstanceID]bool{}
	list, complete := listLabels(ctx, c.Market, want) // a label not complete: its ids are read by id
	for _, in := range list {
		listed[in.ID] = true
	}
	return listed, complete
}

// listLabels lists labels completely, maxListedLabels to a listing, and
// returns what the listings showed and the labels whose listing completed.
// A listing that fails is no verdict on its labels: they are left out of
// complete.
func listLabels(ctx context.Context, m provider.InstanceReader, labels []string) ([]provider.Instance, map[string]bool) {
	var shown []provider.Instance
	complete := map[string]bool{}
	for chunk := range slices.Chunk(labels, maxListedLabels) {
		list, err := m.ListInstances(ctx, provider.ListOptions{Labels: chunk, Brief: true})
		if err != nil {
			continue
		}
		for _, l := range chunk {
			complete[l] = true
		}
		shown = append(shown, list...)
	}
	return shown, complete
}

func orErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}
