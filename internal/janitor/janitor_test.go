package janitor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/provider"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func mustLabel(t *testing.T, prefix, run string, expiry time.Time) string {
	t.Helper()
	l, err := label.New(prefix, run, expiry)
	if err != nil {
		t.Fatal(err)
	}
	return l.String()
}

func TestExpired(t *testing.T) {
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	old := mustLabel(t, "vastrun", "mx1old", past)
	fresh := mustLabel(t, "vastrun", "mx1new", future)
	team := mustLabel(t, "vastrun-acme", "mx1team", past)
	forged := old[:len(old)-1] + map[bool]string{true: "0", false: "1"}[old[len(old)-1] != '0'] // checksum broken
	for _, tc := range []struct {
		name   string
		list   []provider.Instance
		prefix string
		want   []provider.InstanceID
	}{
		{"empty account", nil, "vastrun-", []provider.InstanceID{}},
		{"expired is reaped, fresh is not", []provider.Instance{{ID: 1, Label: old}, {ID: 2, Label: fresh}}, "vastrun-", []provider.InstanceID{1}},
		{"no label, foreign label", []provider.Instance{{ID: 3}, {ID: 4, Label: "my-dev-box"}}, "vastrun-", []provider.InstanceID{}},
		{"a label failing its own check", []provider.Instance{{ID: 5, Label: forged}}, "vastrun-", []provider.InstanceID{}},
		{"prefix narrows", []provider.Instance{{ID: 1, Label: old}, {ID: 6, Label: team}}, "vastrun-acme-", []provider.InstanceID{6}},
		{"the default prefix covers teams", []provider.Instance{{ID: 1, Label: old}, {ID: 6, Label: team}}, "vastrun-", []provider.InstanceID{1, 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []provider.InstanceID{}
			for _, c := range Expired(tc.list, tc.prefix, now) {
				got = append(got, c.ID)
				if c.Result != "would destroy (dry run)" || c.Expiry.After(now) {
					t.Errorf("candidate %+v", c)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Judged at a later time (reap --at), the fresh one expires too.
	if got := Expired([]provider.Instance{{ID: 2, Label: fresh}}, "vastrun-", now.Add(2*time.Hour)); len(got) != 1 {
		t.Errorf("--at later: %v", got)
	}
}

type fakeConfirmer map[provider.InstanceID]error

func (f fakeConfirmer) DestroyConfirmAll(_ context.Context, targets map[provider.InstanceID]string, _ time.Time) (map[provider.InstanceID][]string, map[provider.InstanceID]error) {
	ok, failed := map[provider.InstanceID][]string{}, map[provider.InstanceID]error{}
	for id := range targets {
		if err := f[id]; err != nil {
			failed[id] = err
		} else {
			ok[id] = []string{"show"}
		}
	}
	return ok, failed
}

func TestReapRecordsEachResult(t *testing.T) {
	cands := []Candidate{{ID: 1}, {ID: 2}, {ID: 3}}
	failed := Reap(context.Background(), fakeConfirmer{2: errors.New("still listed")}, cands, now)
	if !reflect.DeepEqual(failed, []provider.InstanceID{2}) {
		t.Fatalf("failed %v", failed)
	}
	want := []string{"destroyed (confirmed)", "NOT confirmed: still listed", "destroyed (confirmed)"}
	for i, c := range cands {
		if c.Result != want[i] {
			t.Errorf("candidate %d: %q, want %q", c.ID, c.Result, want[i])
		}
	}
}

type fakeReader map[provider.InstanceID]error

func (f fakeReader) ShowInstance(_ context.Context, id provider.InstanceID) (provider.Instance, error) {
	if err := f[id]; err != nil {
		return provider.Instance{}, err
	}
	return provider.Instance{ID: id, Label: fmt.Sprintf("label-%d", id)}, nil
}
func (fakeReader) ListInstances(context.Context, provider.ListOptions) ([]provider.Instance, error) {
	return nil, errors.New("not used")
}

func TestTarget(t *testing.T) {
	r := fakeReader{2: provider.ErrNotFound, 3: errors.New("503 from the API")}
	got := Target(context.Background(), r, []int64{3, 1, 2, 1})
	if !reflect.DeepEqual(got.IDs(), []provider.InstanceID{1, 2, 3}) {
		t.Fatalf("ids %v (a repeated id is one target)", got.IDs())
	}
	wantLabels := map[provider.InstanceID]string{1: "label-1", 2: "", 3: ""}
	if !reflect.DeepEqual(got.Labels, wantLabels) {
		t.Errorf("labels %v, want %v (a failed read leaves the label unknown)", got.Labels, wantLabels)
	}
	if !reflect.DeepEqual(got.NotFound, map[provider.InstanceID]bool{2: true}) {
		t.Errorf("not found %v: only a 404 is not found, a 503 is not", got.NotFound)
	}
	got.Drop([]provider.InstanceID{1})
	if !reflect.DeepEqual(got.IDs(), []provider.InstanceID{2, 3}) {
		t.Errorf("after a sweep: %v", got.IDs())
	}
}

func TestLiveStatus(t *testing.T) {
	for _, tc := range []struct {
		in      provider.Instance
		err     error
		want    string
		wantErr string
	}{
		{provider.Instance{ActualStatus: "running"}, nil, "running", ""},
		{provider.Instance{}, nil, "", ""},
		{provider.Instance{}, fmt.Errorf("show instance 7: %w", provider.ErrNotFound), "gone", ""},
		{provider.Instance{}, errors.New("timeout"), "unknown", "timeout"},
	} {
		if got, gotErr := LiveStatus(tc.in, tc.err); got != tc.want || gotErr != tc.wantErr {
			t.Errorf("LiveStatus(%+v, %v) = %q, %q, want %q, %q", tc.in, tc.err, got, gotErr, tc.want, tc.wantErr)
		}
	}
}

func TestKeyScope(t *testing.T) {
	keys := []provider.APIKeyInfo{
		{ID: 1, Permissions: map[string]any{"instance_read": nil, "instance_write": nil, "billing_read": nil}},
		{ID: 2, Permissions: map[string]any{"instance_write": nil, "billing_write": nil, "user_write": map[string]any{}}},
		{ID: 3, Full: true},
	}
	for _, tc := range []struct {
		id        int64
		wantRisky []string
		wantKnown bool
	}{
		{1, nil, true},
		{2, []string{"billing_write", "user_write"}, true},
		{3, []string{"full access (including billing and account settings)"}, true},
		{9, nil, false},
	} {
		risky, known := KeyScope(keys, tc.id)
		if !reflect.DeepEqual(risky, tc.wantRisky) || known != tc.wantKnown {
			t.Errorf("key %d: %v %v, want %v %v", tc.id, risky, known, tc.wantRisky, tc.wantKnown)
		}
	}
}
