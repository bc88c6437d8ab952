package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

// bulkFakeMarket is fakeMarket with the bulk destroy, logged as
// "bulk <n ids>".
type bulkFakeMarket struct{ *fakeMarket }

func (b bulkFakeMarket) DestroyInstances(_ context.Context, ids []provider.InstanceID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.call("bulk", len(ids)); err != nil {
		return err
	}
	for _, id := range ids {
		if in, ok := b.instances[id]; ok {
			in.destroyed = true
		}
	}
	return nil
}

// TestTeardownAllInFewCalls: 5 runs of 3 instances each, torn down
// together, cost one bulk destroy, one listing that confirms all 15 and
// one listing of the 5 labels for their sweeps — no show, no single
// destroy — while each run's journal holds its own ids' destroy intent
// before the destroy and their confirmation after. A run whose label
// still carries an instance its journal never knew sweeps it as Teardown
// does (adopted, destroyed, confirmed).
func TestTeardownAllInFewCalls(t *testing.T) {
	m := newFakeMarket()
	bm := bulkFakeMarket{m}
	var rigs []*stepRig
	var scopes []*Scope
	for run := range 5 {
		r := newStepRig(t, stepConfig, m)
		if err := Freeze.Do(context.Background(), r.s); err != nil {
			t.Fatal(err)
		}
		r.s.Market = bm
		for k := range 3 {
			id := provider.InstanceID(1000 + 10*run + k)
			m.add(id, int64(id), r.s.State().Label, 0)
			r.rented(id, int64(id))
		}
		rigs = append(rigs, r)
		scopes = append(scopes, r.s)
	}
	m.add(2000, 2000, rigs[4].s.State().Label, 0) // unknown to run 4's journal

	errs := TeardownAll(context.Background(), scopes)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if live := m.live(); len(live) != 0 {
		t.Fatalf("left live: %v", live)
	}
	calls := m.calls()
	// Run 4's sweep: its listing shows 2000, destroyed and shown by id,
	// and a second listing is clean.
	want := []string{"bulk 15", "list", "list", "list", "destroy 2000", "show 2000", "list"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	for i, r := range rigs {
		j := r.journal()
		n := 3
		if i == 4 {
			n = 4 // and 2000, adopted
		}
		if count(j, "intent:destroy") != n || count(j, "done:destroy") != n || !before(j, "intent:destroy", "done:destroy") || !before(j, "done:destroy", "done:confirm") {
			t.Fatalf("run %d's journal: %v", i, j)
		}
		for _, a := range r.s.State().Attempts {
			want := []string{"label_listing"}
			if a.InstanceID == 2000 {
				want = []string{"show", "label_listing"} // its sweep's destroy, then a clean listing
			}
			if !a.Confirmed || !slices.Equal(a.ConfirmedBy, want) {
				t.Fatalf("run %d, instance %d: %+v", i, a.InstanceID, a)
			}
		}
	}
	if !slices.Contains(rigs[4].s.State().Extras, 2000) {
		t.Fatalf("instance 2000 not adopted: %+v", rigs[4].s.State().Extras)
	}
}

// A listing that fails leaves every id to be read by id (the promise
// holds without it), and each run sweeps its own label.
func TestTeardownAllListingFails(t *testing.T) {
	m := newFakeMarket()
	bm := bulkFakeMarket{m}
	var scopes []*Scope
	for run := range 3 {
		r := newStepRig(t, stepConfig, m)
		if err := Freeze.Do(context.Background(), r.s); err != nil {
			t.Fatal(err)
		}
		r.s.Market = bm
		id := provider.InstanceID(1000 + run)
		m.add(id, int64(id), r.s.State().Label, 0)
		r.rented(id, int64(id))
		scopes = append(scopes, r.s)
	}
	m.fail("list", fmt.Errorf("list: %w", provider.ErrIncompleteListing), fmt.Errorf("list: %w", provider.ErrIncompleteListing))
	for i, err := range TeardownAll(context.Background(), scopes) {
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	calls := only(m.calls(), "bulk", "show", "destroy")
	if !slices.Equal(calls, []string{"bulk 3", "show 1000", "show 1001", "show 1002"}) {
		t.Fatalf("calls %v", m.calls())
	}
	for i, e := range scopes {
		a := e.State().Attempts[0]
		// By id, then the run's own sweep listed the label clean.
		if !a.Confirmed || !slices.Equal(a.ConfirmedBy, []string{"show", "label_listing"}) {
			t.Fatalf("run %d: %+v", i, a)
		}
	}
}
