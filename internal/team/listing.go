package team

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/teamstate"
)

// Lease states in a listing.
const (
	LeaseLive     = "live"
	LeaseExpired  = "expired"
	LeaseReleased = "released"
	LeaseNone     = "none"
)

// Row is one run in the team listing (vastrun runs --all).
type Row struct {
	Summary
	Lease string `json:"lease"` // live, expired, released, none
	// LeaseLeft is how long a live lease has unless renewed (server clock).
	LeaseLeftS float64 `json:"lease_left_s,omitempty"`
	// State is the run's outcome, "running" under a live lease, or
	// "abandoned" when its lease expired before an outcome.
	State string `json:"state"`
}

// RunIDs lists the runs that have objects in the backend.
func RunIDs(ctx context.Context, b teamstate.Backend) ([]string, error) {
	keys, err := b.List(ctx, "runs/")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, k := range keys {
		id, _, ok := strings.Cut(strings.TrimPrefix(k, "runs/"), "/")
		if ok && id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// List reads every run's summary and lease. A run whose summary is missing
// is listed from its lease alone; one that has neither is skipped.
func List(ctx context.Context, b teamstate.Backend) ([]Row, error) {
	ids, err := RunIDs(ctx, b)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, id := range ids {
		r := Row{Lease: LeaseNone}
		s, serr := ReadSummary(ctx, b, id)
		if serr != nil && !errors.Is(serr, teamstate.ErrNotExist) {
			return nil, serr
		}
		r.Summary = s
		r.RunID = id
		rec, live, left, lerr := teamstate.ReadLease(ctx, b, id)
		switch {
		case lerr == nil && rec.Released:
			r.Lease = LeaseReleased
		case lerr == nil && live:
			r.Lease, r.LeaseLeftS = LeaseLive, left.Round(time.Second).Seconds()
		case lerr == nil:
			r.Lease = LeaseExpired
		case !errors.Is(lerr, teamstate.ErrNotExist):
			return nil, lerr
		}
		if lerr == nil {
			r.Holder, r.Generation = rec.Holder, rec.Generation
		}
		switch {
		case r.Outcome != "":
			r.State = r.Outcome
		case r.Lease == LeaseLive:
			r.State = "running"
		default:
			r.State = "abandoned"
		}
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Started.After(rows[j].Started) })
	return rows, nil
}

// HeldFrom keeps the rows whose run is held, or was last held, by the
// given user on the given host (`vastrun runs --all --mine`). The process
// and lease ids are not compared: a run counts as mine after the
// controller that held it has gone.
func HeldFrom(rows []Row, me teamstate.Holder) []Row {
	var kept []Row
	for _, r := range rows {
		if r.Holder.Host == me.Host && r.Holder.User == me.User {
			kept = append(kept, r)
		}
	}
	return kept
}
