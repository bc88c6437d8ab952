package lifecycle

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// TeardownAll tears several runs down together (`vastrun down --all`) in
// a few calls, where one Teardown each costs a destroy, a show and a
// listing per instance. Each run's teardown keeps Teardown's order and
// its promise, only its calls are shared:
//
//  1. the instances every run's journal knows are destroyed in bulk and
//     each proven gone by id (404) or by its absence from a complete
//     listing of its run's label (Confirmer.DestroyConfirmAll: one
//     listing per 32 labels, a show only for an id still listed). Each
//     run's journal records its own ids' destroy intent before the
//     destroy is sent, and their confirmation after;
//  2. one listing of every run's label (32 a filter) stands for the first
//     listing of each run's sweep: a run whose label it shows clean is
//     done, unless its sweep must see the label stay clean for a while;
//     any other run sweeps its label as Teardown does;
//  3. step 3 of Teardown, run by run.
//
// The shared calls go through the first scope's market and clock: scopes
// whose market is another (another account, a team's fence) are torn down
// on their own. It returns each scope's error (nil, or *CleanupError as
// Teardown), in the order of scopes.
func TeardownAll(ctx context.Context, scopes []*Scope) []error {
	errs := make([]error, len(scopes))
	var shared []*teardown
	for i, e := range scopes {
		if !sameMarket(e.Market, scopes[0].Market) {
			errs[i] = e.Teardown(ctx)
			continue
		}
		shared = append(shared, startTeardown(ctx, e))
	}
	if len(shared) == 0 {
		return errs
	}
	clean := teardownKnown(ctx, shared)
	k := 0
	for i, e := range scopes {
		if k < len(shared) && shared[k].e == e {
			errs[i] = shared[k].finish(ctx, clean[e.state.Label])
			k++
		}
	}
	return errs
}

// teardownKnown is step 1 and the listing of step 2 of TeardownAll, for
// the teardowns ts begun on one market: the errors of step 1 go to each
// teardown's errs. It returns the labels listed clean after step 1.
func teardownKnown(ctx context.Context, ts []*teardown) map[string]bool {
	first := ts[0].e
	deadline := ts[0].deadline
	limit := time.Duration(0)
	targets := map[provider.InstanceID]string{}
	owners := map[provider.InstanceID][]*teardown{}
	var labels []string
	for _, t := range ts {
		deadline = maxTime(deadline, t.deadline)
		limit = max(limit, t.e.TeardownLimit())
		for _, id := range t.e.state.Unconfirmed() {
			targets[id] = t.e.state.Label
			owners[id] = append(owners[id], t)
		}
		if l := t.e.state.Label; l != "" && !slices.Contains(labels, l) {
			labels = append(labels, l)
		}
	}
	// Detached from ctx as each teardown's own context is, with the same
	// wall-clock safety net for the longest limit.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit+30*time.Second)
	defer cancel()
	c := Confirmer{
		Market: first.Market, Clock: first.Clock,
		// Each id's records go to the journal of the run that rented it.
		OnIntent: func(id provider.InstanceID) {
			for _, t := range owners[id] {
				confirmer(t.e).OnIntent(id)
			}
		},
		OnDone: func(id provider.InstanceID) {
			for _, t := range owners[id] {
				confirmer(t.e).OnDone(id)
			}
		},
	}
	vias, fails := c.DestroyConfirmAll(sctx, targets, deadline)
	for _, id := range slices.Sorted(maps.Keys(vias)) {
		for _, t := range owners[id] {
			recordConfirmed(t.e, id, vias[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(fails)) {
		for _, t := range owners[id] {
			t.errs = append(t.errs, fails[id])
		}
	}

	bctx, cancelB := boundOnClock(sctx, first.Clock, deadline.Add(listSlack))
	defer cancelB()
	// A label whose listing failed is not clean: its run sweeps it itself.
	list, clean := listLabels(bctx, first.Market, labels)
	for _, in := range list {
		clean[in.Label] = false
	}
	return clean
}

// sameMarket says whether a and b are one market (equal, comparable
// values): only then can one call serve both.
func sameMarket(a, b provider.Market) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta != nil && ta == tb && ta.Comparable() && a == b
}

// DownAll tears several runs down together (TeardownAll) and records each
// as Down records one: its receipt, state and outcome. It returns each
// run's receipt and error, in the order of scopes.
func DownAll(ctx context.Context, scopes []*Scope) ([]*receipt.Receipt, []error) {
	terrs := TeardownAll(ctx, scopes)
	rs := make([]*receipt.Receipt, len(scopes))
	errs := make([]error, len(scopes))
	for i, e := range scopes {
		rs[i], errs[i] = recordDown(ctx, e, terrs[i])
	}
	return rs, errs
}
