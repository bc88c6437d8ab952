package team_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/team"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Racing reservations never take the ledger past its limit: of ten runs
// asking $1 each against a $5 limit, exactly five get it.
func TestReserveRacing(t *testing.T) {
	b := teamstate.NewMemory(nil)
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = team.Reserve(context.Background(), b, now, label.NewRunID(now.Add(time.Duration(i)*time.Second)), "h", 1, 5)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, team.ErrOverBudget):
			t.Fatalf("reserve: %v", err)
		}
	}
	l, _, err := team.ReadLedger(context.Background(), b, team.Period(now))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, committed := l.Totals(); ok != 5 || committed != 5 {
		t.Fatalf("%d reservations granted, $%g committed; want 5 and $5", ok, committed)
	}
	// Settling replaces a reservation: the room comes back.
	id := l.RunIDs()[0]
	if _, err := team.Settle(context.Background(), b, team.Period(now), id, team.Settlement{USD: 0.25, Basis: team.BasisCharges}, now); err != nil {
		t.Fatal(err)
	}
	if err := team.Reserve(context.Background(), b, now, "other", "h", 0.75, 5); err != nil {
		t.Fatalf("after settling $0.25 of a $1 reservation, $0.75 more must fit: %v", err)
	}
}

func TestClassify(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	b := teamstate.NewMemory(nil)
	mk := func(run string) string {
		l, err := label.New("vastrun", run, now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return l.String()
	}
	liveRun, deadRun, goneRun := label.NewRunID(now), label.NewRunID(now.Add(time.Second)), label.NewRunID(now.Add(2*time.Second))
	if _, err := teamstate.Acquire(ctx, b, liveRun, teamstate.Holder{Host: "a", ID: teamstate.NewID()}, teamstate.LeaseOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// A dead controller: a lease that expired long ago on the server.
	old := time.Now().Add(-time.Hour)
	bOld := &shifted{Memory: b, at: old}
	if _, err := teamstate.Acquire(ctx, bOld, deadRun, teamstate.Holder{Host: "b", ID: teamstate.NewID()}, teamstate.LeaseOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	list := []provider.Instance{
		{ID: 1, Label: "someone-elses-box", StartDate: now.Add(-time.Hour)},
		{ID: 2, Label: mk(liveRun), StartDate: now.Add(-time.Hour)},
		{ID: 3, Label: mk(deadRun), StartDate: now.Add(-time.Hour)},
		{ID: 4, Label: mk(goneRun), StartDate: now.Add(-time.Hour)},
		{ID: 5, Label: mk(deadRun), StartDate: now.Add(-time.Minute)},
	}
	got := map[provider.InstanceID]string{}
	for _, j := range team.Classify(ctx, b, list, "vastrun-", 5*time.Minute, now) {
		got[j.Instance] = j.Verdict
	}
	want := map[provider.InstanceID]string{1: team.VerdictNotOurs, 2: team.VerdictLive, 3: team.VerdictOrphan, 4: team.VerdictUntracked, 5: team.VerdictYoung}
	for id, v := range want {
		if got[id] != v {
			t.Errorf("instance %d: %s, want %s", id, got[id], v)
		}
	}
	// The bucket failing makes the verdict unknown, never an orphan.
	b.SetFault(func(op, key string) error { return errors.New("connection reset") })
	for _, j := range team.Classify(ctx, b, list[2:3], "vastrun-", 5*time.Minute, now) {
		if j.Verdict != team.VerdictUnknown {
			t.Fatalf("bucket down: verdict %s, want unknown", j.Verdict)
		}
	}
}

// shifted writes with the server's clock set back, as if long ago.
type shifted struct {
	*teamstate.Memory
	at time.Time
}

func (s *shifted) PutIfAbsent(ctx context.Context, key string, data []byte) (string, error) {
	clk := s.Memory.Clock
	s.Memory.Clock = fixed(s.at)
	defer func() { s.Memory.Clock = clk }()
	return s.Memory.PutIfAbsent(ctx, key, data)
}

type fixed time.Time

func (f fixed) Now() time.Time                         { return time.Time(f) }
func (f fixed) After(d time.Duration) <-chan time.Time { return nil }
