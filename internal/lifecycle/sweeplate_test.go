package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// TestSweepLate: after a create judged not rented (the reconcile grace
// passed with nothing carrying the label), the teardown watches the label
// until LateCreateWindow after that create was sent, on the run's clock;
// what lands is journaled as a late create before it is destroyed, and
// the receipt names it. Each case tears down teardownAt after the
// ambiguous create was sent; the run's own rental (101) is known.
func TestSweepLate(t *testing.T) {
	rate := &provider.APIError{Op: "list instances", Status: 429}
	for _, tc := range []struct {
		name string
		// ambiguous: the run journaled a create judged not rented.
		ambiguous  bool
		teardownAt time.Duration // after the ambiguous create was sent
		// late instances land at these offsets after the create was sent.
		late        map[provider.InstanceID]time.Duration
		list        []error // the listing's answers, in order (then it works)
		destroy     []error
		wantLate    []provider.InstanceID
		wantErr     bool
		wantLists   int  // exact count of listings; 0: not checked
		wantWatched bool // a listing at or after the window's end
	}{
		{name: "no ambiguous create: no watch, one listing", teardownAt: 130 * time.Second, wantLists: 1},
		{name: "a create lands 200 s late, while the teardown watches", ambiguous: true, teardownAt: 130 * time.Second,
			late: map[provider.InstanceID]time.Duration{150: 200 * time.Second}, wantLate: []provider.InstanceID{150}, wantWatched: true},
		{name: "nothing lands: watched to the end of the window", ambiguous: true, teardownAt: 130 * time.Second, wantWatched: true},
		{name: "it landed during the run: found by the first sweep, still a late create", ambiguous: true, teardownAt: 130 * time.Second,
			late: map[provider.InstanceID]time.Duration{150: 100 * time.Second}, wantLate: []provider.InstanceID{150}, wantWatched: true},
		{name: "torn down after the window (down an hour later): the sweep's clean listing ends the watch", ambiguous: true, teardownAt: time.Hour,
			late: map[provider.InstanceID]time.Duration{150: 200 * time.Second}, wantLate: []provider.InstanceID{150}, wantLists: 2, wantWatched: true},
		{name: "torn down after the window, nothing landed: one listing", ambiguous: true, teardownAt: time.Hour, wantLists: 1, wantWatched: true},
		{name: "the late instance's destroy answered 503 first: sent again, confirmed", ambiguous: true, teardownAt: 130 * time.Second,
			late:    map[provider.InstanceID]time.Duration{150: 250 * time.Second},
			destroy: []error{nil, &provider.APIError{Op: "destroy instance 150", Status: 503}}, wantLate: []provider.InstanceID{150}, wantWatched: true},
		{name: "a 429 storm in the window that ends: the late create is still caught", ambiguous: true, teardownAt: 130 * time.Second,
			late: map[provider.InstanceID]time.Duration{150: 200 * time.Second}, list: slices.Repeat([]error{rate}, 12),
			wantLate: []provider.InstanceID{150}, wantWatched: true},
		{name: "two creates land late", ambiguous: true, teardownAt: 130 * time.Second,
			late:     map[provider.InstanceID]time.Duration{150: 140 * time.Second, 151: 290 * time.Second},
			wantLate: []provider.InstanceID{150, 151}, wantWatched: true},
		{name: "the label cannot be listed after the window: not confirmed", ambiguous: true, teardownAt: 130 * time.Second,
			list: slices.Repeat([]error{rate}, 10000), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMarket()
			r := newStepRig(t, stepConfig, m)
			if err := Freeze.Do(context.Background(), r.s); err != nil {
				t.Fatal(err)
			}
			label := r.s.State().Label
			sent := r.clk.Now()
			if tc.ambiguous {
				if err := r.s.Record("intent", stepRent, runstate.RentIntent{Label: label, Offer: 1, Attempt: receipt.Attempt{MachineID: 10}}); err != nil {
					t.Fatal(err)
				}
				r.clk.Advance(reconcileGrace)
				if err := r.s.Record("failed", stepRent, runstate.InstanceData{Reason: "ambiguous create: nothing carries the label after the grace period", Ambiguous: true}); err != nil {
					t.Fatal(err)
				}
				if got := r.s.State().PossiblyLiveSince; !got.Equal(sent) {
					t.Fatalf("possibly live since %s, want the create's %s", got, sent)
				}
			}
			for id, at := range tc.late {
				m.addAt(id, label, sent.Add(at))
			}
			r.clk.Advance(sent.Add(tc.teardownAt - time.Second).Sub(r.clk.Now()))
			m.add(101, 20, label, 0)
			r.rented(101, 20)
			r.clk.Advance(time.Second)
			m.fail("list", tc.list...)
			m.fail("destroy", tc.destroy...)
			start := r.clk.Now()

			err := r.s.Teardown(context.Background())

			var ce *CleanupError
			if tc.wantErr {
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), "late-create window") {
					t.Fatalf("teardown: %v, want an unconfirmed cleanup naming the window", err)
				}
				if j := r.journal(); count(j, "event:alert") != 1 {
					t.Fatalf("not escalated: %v", j)
				}
			} else if err != nil {
				t.Fatalf("teardown: %v", err)
			}
			if len(r.s.cleanupWarnings) != 0 {
				t.Fatalf("warnings %q: a possibly live label is watched, not warned about", r.s.cleanupWarnings)
			}
			st := r.s.State()
			if !slices.Equal(st.Late, tc.wantLate) {
				t.Fatalf("late %v, want %v", st.Late, tc.wantLate)
			}
			if live := m.live(); !tc.wantErr && len(live) != 0 {
				t.Fatalf("live after teardown: %v", live)
			}
			calls, at := m.calls(), m.callsAt()
			for _, id := range tc.wantLate {
				a := st.AttemptFor(id)
				if a == nil || !a.Confirmed || !slices.Contains(a.ConfirmedBy, "show") {
					t.Fatalf("late instance %d: %+v", id, a)
				}
				// Journaled (adopted as a late create) before any destroy of it.
				if j := r.journalData(); !before(j, fmt.Sprintf("event:adopt:%d:%s", id, runstate.ReasonLateCreate), fmt.Sprintf("intent:destroy:%d:", id)) {
					t.Fatalf("instance %d destroyed before it was journaled: %v", id, j)
				}
				if !before(calls, "destroy 101", fmt.Sprintf("destroy %d", id)) {
					t.Fatalf("the known instance was not destroyed first: %v", calls)
				}
			}
			lists := count(calls, "list")
			if tc.wantLists > 0 && lists != tc.wantLists {
				t.Fatalf("%d listings, want %d: %v", lists, tc.wantLists, calls)
			}
			if !tc.wantErr {
				// The watch ended with a complete listing, none after it
				// was clean past the window.
				until := sent.Add(LateCreateWindow)
				var lastList time.Time
				for i, c := range calls {
					if c == "list" {
						lastList = at[i]
					}
				}
				if tc.wantWatched != !lastList.Before(until) {
					t.Fatalf("last listing at +%s, window ends at +%s (watched: %v)", lastList.Sub(sent), LateCreateWindow, tc.wantWatched)
				}
			}
			// Never past the teardown limit after the window (or after
			// the start, when the window had passed), plus a listing's slack.
			end := maxTime(start, sent.Add(LateCreateWindow)).Add(r.s.TeardownLimit() + listSlack)
			if last := at[len(at)-1]; last.After(end) {
				t.Fatalf("a call at +%s, past the watch's deadline +%s", last.Sub(sent), end.Sub(sent))
			}
			rec := finish(context.Background(), r.s, OutcomePassed, err)
			if !slices.Equal(rec.Cleanup.LateInstanceIDs, tc.wantLate) {
				t.Fatalf("receipt late_instance_ids %v, want %v", rec.Cleanup.LateInstanceIDs, tc.wantLate)
			}
			if rows := receipt.CleanupRows(rec.Cleanup); len(tc.wantLate) > 0 && (len(rows) != len(tc.wantLate) || rows[0][0] != "late") {
				t.Fatalf("summary rows %v", rows)
			}
		})
	}
}

// A run resumed from its journal knows its label is possibly live: the
// late-create watch survives a controller restart (and down uses it).
func TestPossiblyLiveSurvivesReplay(t *testing.T) {
	r := newStepRig(t, stepConfig, newFakeMarket())
	label := r.s.State().Label
	sent := r.clk.Now()
	if err := r.s.Record("intent", stepRent, runstate.RentIntent{Label: label, Offer: 1}); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(reconcileGrace)
	if err := r.s.Record("failed", stepRent, runstate.InstanceData{Reason: "ambiguous create", Ambiguous: true}); err != nil {
		t.Fatal(err)
	}
	// A plain failed rent (an answer that said no) leaves nothing possibly live.
	if err := r.s.Record("intent", stepRent, runstate.RentIntent{Label: label, Offer: 2}); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Record("failed", stepRent, runstate.InstanceData{Reason: "no_such_ask"}); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Record("event", stepAdopt, runstate.InstanceData{Instance: 150, Reason: runstate.ReasonLateCreate}); err != nil {
		t.Fatal(err)
	}
	r.s.Close()
	st, err := runstate.LoadState(r.s.RunDir())
	if err != nil {
		t.Fatal(err)
	}
	if !st.PossiblyLiveSince.Equal(sent) || !slices.Equal(st.Late, []provider.InstanceID{150}) || !slices.Equal(st.Extras, []provider.InstanceID{150}) {
		t.Fatalf("replayed: possibly live since %s (want %s), late %v, extras %v", st.PossiblyLiveSince, sent, st.Late, st.Extras)
	}
}
