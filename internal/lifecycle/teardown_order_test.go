package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// lines records what a step tells people, one entry per line.
type lines struct{ got []string }

func (l *lines) Infof(format string, args ...any) {
	l.got = append(l.got, fmt.Sprintf(format, args...))
}

func (l *lines) with(prefix string) []string {
	var out []string
	for _, s := range l.got {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// TestTeardownKnownFirst: whatever the label listing answers (a 429 storm,
// 503s, incomplete listings, a lost connection), every instance the
// journal knows is destroyed and confirmed by id before the label is
// listed, and the listing's retries end at the teardown deadline. A
// listing that never completes is then a warning (one line, the
// receipt's cleanup.warnings), not a failure.
func TestTeardownKnownFirst(t *testing.T) {
	rate := &provider.APIError{Op: "list instances", Status: 429, Msg: "API requests too frequent"}
	unavailable := &provider.APIError{Op: "list instances", Status: 503}
	incomplete := fmt.Errorf("list instances: %w", provider.ErrIncompleteListing)
	transport := &provider.TransportError{Op: "list instances", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name  string
		known []provider.InstanceID
		// unknown carry the label without the journal knowing them.
		unknown []provider.InstanceID
		list    []error // the listing's answers, in order (then it works)
		destroy []error
		// wantWarning: the sweep never completed; wantErr: the cleanup is
		// not confirmed (a *CleanupError).
		wantWarning, wantErr bool
		wantVia              []string // every known id's confirmed_by
	}{
		{name: "429 on every listing", known: []provider.InstanceID{101, 102}, list: slices.Repeat([]error{rate}, 1000),
			wantWarning: true, wantVia: []string{"show"}},
		{name: "503 on every listing", known: []provider.InstanceID{101}, list: slices.Repeat([]error{unavailable}, 1000),
			wantWarning: true, wantVia: []string{"show"}},
		{name: "every listing incomplete", known: []provider.InstanceID{101}, list: slices.Repeat([]error{incomplete}, 1000),
			wantWarning: true, wantVia: []string{"show"}},
		{name: "the connection drops on every listing", known: []provider.InstanceID{101}, list: slices.Repeat([]error{transport}, 1000),
			wantWarning: true, wantVia: []string{"show"}},
		{name: "429 on every listing, and the destroy answered 503 once", known: []provider.InstanceID{101}, list: slices.Repeat([]error{rate}, 1000),
			destroy: []error{&provider.APIError{Op: "destroy instance 101", Status: 503}}, wantWarning: true, wantVia: []string{"show"}},
		{name: "an unknown instance behind a listing that never completes is missed: a warning names the way to look",
			known: []provider.InstanceID{101}, unknown: []provider.InstanceID{150}, list: slices.Repeat([]error{rate}, 1000),
			wantWarning: true, wantVia: []string{"show"}},
		{name: "a 429 storm that ends before the deadline: the listing confirms too, no warning", known: []provider.InstanceID{101, 102},
			list: slices.Repeat([]error{rate}, 6), wantVia: []string{"show", "label_listing"}},
		{name: "mixed failures that end: the unknown instance is found and destroyed", known: []provider.InstanceID{101}, unknown: []provider.InstanceID{150},
			list: []error{transport, unavailable, incomplete, rate}, wantVia: []string{"show", "label_listing"}},
		{name: "a listing refused for auth is no mere warning", known: []provider.InstanceID{101},
			list: []error{&provider.APIError{Op: "list instances", Status: 401, Code: "auth_error"}}, wantErr: true, wantVia: []string{"show"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMarket()
			r := newStepRig(t, strings.Replace(stepConfig, "  job: 5m\n", "  job: 5m\n  teardown: 1m\n", 1), m)
			ui := &lines{}
			r.s.UI = ui
			if err := Freeze.Do(context.Background(), r.s); err != nil {
				t.Fatal(err)
			}
			label := r.s.State().Label
			for _, id := range tc.known {
				m.add(id, int64(id), label, 0)
				r.rented(id, int64(id))
			}
			for _, id := range tc.unknown {
				m.add(id, int64(id), label, 0)
			}
			m.fail("list", tc.list...)
			m.fail("destroy", tc.destroy...)
			start := r.clk.Now()
			err := r.s.Teardown(context.Background())

			calls, at := m.calls(), m.callsAt()
			firstList := slices.Index(calls, "list")
			for _, id := range tc.known {
				show := slices.Index(calls, fmt.Sprintf("show %d", id))
				if show < 0 || (firstList >= 0 && firstList < show) {
					t.Fatalf("instance %d not confirmed by id before the first listing: %v", id, calls)
				}
				a := r.s.State().AttemptFor(id)
				if a == nil || !a.Confirmed || !slices.Equal(a.ConfirmedBy, tc.wantVia) {
					t.Fatalf("instance %d: %+v, want confirmed by %v", id, a, tc.wantVia)
				}
			}
			// The listing's retries stop at the deadline (1m), with a
			// listing's slack.
			if last := at[len(at)-1]; last.Sub(start) > time.Minute+listSlack {
				t.Fatalf("last call %s after the teardown began", last.Sub(start))
			}
			var ce *CleanupError
			if tc.wantErr != errors.As(err, &ce) {
				t.Fatalf("teardown: %v, want a cleanup error: %v", err, tc.wantErr)
			}
			if !tc.wantErr && err != nil {
				t.Fatalf("teardown: %v", err)
			}
			warns := ui.with("warning: ")
			if tc.wantWarning {
				if len(warns) != 1 || !strings.Contains(warns[0], "could not be listed completely") || !strings.Contains(warns[0], "vastrun down --label "+label) {
					t.Fatalf("stderr warnings %q", warns)
				}
				if len(r.s.cleanupWarnings) != 1 {
					t.Fatalf("receipt warnings %q", r.s.cleanupWarnings)
				}
			} else if len(warns) != 0 || len(r.s.cleanupWarnings) != 0 {
				t.Fatalf("unexpected warnings %q %q", warns, r.s.cleanupWarnings)
			}
			for _, id := range tc.known {
				if slices.Contains(m.live(), id) {
					t.Fatalf("known instance %d still live", id)
				}
			}
			for _, id := range tc.unknown {
				found := slices.Contains(r.s.State().Extras, id)
				if found == tc.wantWarning || found == slices.Contains(m.live(), id) {
					t.Fatalf("unknown instance %d: adopted %v, live %v", id, found, m.live())
				}
			}
		})
	}
}

// The warning reaches the receipt (cleanup.warnings), summary.md (a row)
// and stays a success: the run's cleanup is confirmed.
func TestTeardownWarningInReceipt(t *testing.T) {
	m := newFakeMarket()
	r := newStepRig(t, stepConfig, m)
	if err := Freeze.Do(context.Background(), r.s); err != nil {
		t.Fatal(err)
	}
	m.add(101, 10, r.s.State().Label, 0)
	r.rented(101, 10)
	m.fail("list", slices.Repeat([]error{&provider.APIError{Op: "list instances", Status: 429}}, 1000)...)
	if err := r.s.Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := finish(context.Background(), r.s, OutcomePassed, nil)
	if !rec.Cleanup.Confirmed || len(rec.Cleanup.Warnings) != 1 || !rec.Outcome.Succeeded() {
		t.Fatalf("cleanup %+v outcome %s", rec.Cleanup, rec.Outcome)
	}
	b, err := os.ReadFile(filepath.Join(r.s.EvidenceDir, "receipt.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cleanup struct {
			Warnings []string `json:"warnings"`
		} `json:"cleanup"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Cleanup.Warnings) != 1 || !strings.Contains(doc.Cleanup.Warnings[0], "could not be listed completely") {
		t.Fatalf("receipt.json cleanup: %+v %v", doc.Cleanup, err)
	}
	md, _ := os.ReadFile(filepath.Join(r.s.EvidenceDir, "summary.md"))
	if !strings.Contains(string(md), "| cleanup warning | label "+r.s.State().Label+" could not be listed completely") ||
		!strings.Contains(string(md), "| cleanup | all instances confirmed destroyed |") {
		t.Fatalf("summary.md:\n%s", md)
	}
	if got := receipt.CleanupRows(rec.Cleanup); len(got) != 1 || got[0][0] != "cleanup warning" {
		t.Fatalf("rows %v", got)
	}
}

// A listing that lags a destroy still shows an id confirmed gone by id:
// it is destroyed again (harmless) until a listing is clean, and its
// journaled confirmation, whose time the cost counts to, stands.
func TestTeardownListingLagsADestroy(t *testing.T) {
	m := newFakeMarket()
	r := newStepRig(t, stepConfig, m)
	if err := Freeze.Do(context.Background(), r.s); err != nil {
		t.Fatal(err)
	}
	m.add(101, 10, r.s.State().Label, 0)
	m.instances[101].ghost = 2
	r.rented(101, 10)
	if err := r.s.Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := r.s.State().AttemptFor(101)
	if a == nil || !a.Confirmed || !slices.Equal(a.ConfirmedBy, []string{"show", "label_listing"}) {
		t.Fatalf("attempt %+v", a)
	}
	calls := m.calls()
	// One confirmation journaled: re-journaling it would move the time
	// the cost estimate counts to.
	if count(calls, "destroy 101") != 3 || count(calls, "list") != 3 || count(r.journal(), "done:confirm") != 1 {
		t.Fatalf("calls %v journal %v", calls, r.journal())
	}
}
