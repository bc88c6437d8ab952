// Package team drives runs whose state lives on a shared backend
// (state: s3://bucket/prefix): it holds the run's lease while the engine
// works, mirrors every journal record to the bucket before it is written
// locally (the bucket is authoritative, the local directory a cache),
// fences every mutating marketplace call on the lease, rebuilds a local
// cache from the bucket for a controller on another machine, and keeps a
// small summary per run for the team listing.
//
// Contracts:
//   - A run is driven only under its lease. Controller.Hook acquires it for
//     a new run; Controller.Resume for an existing one, refusing with a
//     *teamstate.HeldError that names a live holder.
//   - Once the lease is lost or fenced, every later journal record and every
//     create, destroy or key attachment fails with teamstate.ErrLeaseLost or
//     teamstate.ErrFenced, and the controller says so on stderr.
//   - The lease is released (tombstone) only when the run reached an outcome.
//   - A reaper that takes a run over journals its destroys in the run's own
//     journal, so the run's summary agrees with the marketplace.
//   - A run settles in the team ledger only once it may bill no more
//     (SettlementOf); until then its reservation stands.
package team

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/runstate"
	"github.com/vastrun/vastrun/internal/teamstate"
)

// Reporter shows progress to people.
type Reporter interface {
	Infof(format string, args ...any)
}

// Options configure a Controller.
type Options struct {
	Backend teamstate.Backend
	Holder  teamstate.Holder
	Lease   teamstate.LeaseOptions
	UI      Reporter
	// Now stamps journal entries and summaries (the engine's clock).
	Now func() time.Time
	// Redactor masks what is copied from the bucket to this machine (the
	// journal cache, the frozen manifest), with the run's secrets.
	Redactor *redact.Redactor
}

// Controller drives one run under its lease.
type Controller struct {
	o Options

	mu      sync.Mutex
	run     string
	runDir  string
	lease   *teamstate.Lease
	log     *teamstate.RunLog
	recs    []journal.Record
	sumETag string
	stop    context.CancelFunc
	kept    chan error
	said    bool
	ended   chan struct{}
	endOnce sync.Once
}

// New returns a controller; nothing is acquired yet.
func New(o Options) *Controller {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Lease.Clock == nil {
		o.Lease.Clock = clock.Real{}
	}
	return &Controller{o: o, ended: make(chan struct{})}
}

// Backend is the state backend.
func (c *Controller) Backend() teamstate.Backend { return c.o.Backend }

// Lease is the held lease, or nil.
func (c *Controller) Lease() *teamstate.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease
}

func (c *Controller) infof(format string, args ...any) {
	if c.o.UI != nil {
		c.o.UI.Infof(format, args...)
	}
}

// acquire takes the lease and opens the fenced journal.
func (c *Controller) acquire(ctx context.Context, runID string) error {
	l, err := teamstate.Acquire(ctx, c.o.Backend, runID, c.o.Holder, c.o.Lease)
	if err != nil {
		return err
	}
	rl, err := teamstate.OpenRunLog(ctx, c.o.Backend, l, c.o.Now)
	if err != nil {
		return err
	}
	if prev := l.TookOver(); prev != nil && !prev.Released {
		c.infof("took over run %s from %s, whose lease expired (generation %d → %d)", runID, prev.Holder, prev.Generation, l.Generation())
	}
	kctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.run, c.lease, c.log, c.stop, c.kept = runID, l, rl, cancel, make(chan error, 1)
	c.mu.Unlock()
	go func() { c.kept <- l.Keep(kctx) }()
	go func() {
		select {
		case <-l.Done():
			if !c.released() {
				c.sayLost(l.Check())
			}
		case <-kctx.Done():
		}
		c.end()
	}()
	return nil
}

// Done is closed once the run's lease is lost, fenced or released, or the
// controller is closed.
func (c *Controller) Done() <-chan struct{} { return c.ended }

func (c *Controller) end() { c.endOnce.Do(func() { close(c.ended) }) }

// Released reports whether this controller handed the lease back.
func (c *Controller) Released() bool { return c.released() }

func (c *Controller) released() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease != nil && c.lease.Record().Released
}

func (c *Controller) sayLost(err error) {
	c.mu.Lock()
	if c.said {
		c.mu.Unlock()
		return
	}
	c.said = true
	c.mu.Unlock()
	if errors.Is(err, teamstate.ErrFenced) {
		c.infof("self-fenced: no lease renewal reached %s in time; stopping every side effect on run %s (another controller may take it over once the lease expires)", c.o.Backend.URI(), c.run)
	} else {
		c.infof("lost the lease of run %s to another controller; stopping every side effect", c.run)
	}
}

// Hook is the engine's JournalHook: for a new run it acquires the lease
// (the run is new, so nobody else holds it); for a resumed run the lease
// is already held by Resume. It returns the mirror that writes each record
// to the bucket first.
func (c *Controller) Hook(runID, runDir string) (func(journal.Record) error, error) {
	c.mu.Lock()
	held := c.lease != nil
	c.mu.Unlock()
	if held && c.run != runID {
		return nil, fmt.Errorf("team state: holding the lease of run %s, not %s", c.run, runID)
	}
	if !held {
		if err := c.acquire(context.Background(), runID); err != nil {
			return nil, fmt.Errorf("team state: %w", err)
		}
	}
	c.mu.Lock()
	c.runDir = runDir
	c.mu.Unlock()
	return c.mirror, nil
}

// EntryRecord is the entry type of a mirrored journal record.
const EntryRecord = "record"

func (c *Controller) mirror(r journal.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.mu.Lock()
	rl, runDir := c.log, c.runDir
	c.mu.Unlock()
	if _, err := rl.Append(ctx, EntryRecord, r.Step, r); err != nil {
		if errors.Is(err, teamstate.ErrFenced) || errors.Is(err, teamstate.ErrLeaseLost) {
			c.sayLost(err)
		}
		return fmt.Errorf("team state %s: %w", c.o.Backend.URI(), err)
	}
	if r.Type == "done" && r.Step == "freeze" {
		// The frozen manifest the hash covers: another machine's resume
		// checks its configuration against these very bytes.
		if b, err := os.ReadFile(filepath.Join(runDir, "manifest.json")); err == nil {
			if _, err := c.o.Backend.PutIfAbsent(ctx, ManifestKey(c.run), b); err != nil && !errors.Is(err, teamstate.ErrPrecondition) {
				return fmt.Errorf("team state %s: frozen manifest: %w", c.o.Backend.URI(), err)
			}
		}
	}
	c.mu.Lock()
	c.recs = append(c.recs, r)
	recs := append([]journal.Record(nil), c.recs...)
	c.mu.Unlock()
	// The summary is for listing only: a failed update is not the run's
	// failure, the journal is what counts.
	c.writeSummary(ctx, recs)
	return nil
}

// ManifestKey is where a run's frozen manifest lives.
func ManifestKey(run string) string { return "runs/" + run + "/frozen-manifest.json" }

// Resume takes the lease of an existing run, for a controller on any
// machine: it rebuilds the local cache (journal, frozen manifest) in
// stateRoot/runs/<id> from the bucket, which is authoritative. A live
// holder yields a *teamstate.HeldError; with wait > 0 it waits up to wait for
// that lease to expire or be released.
func (c *Controller) Resume(ctx context.Context, runID, stateRoot string, wait time.Duration, clk clock.Clock) (string, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	deadline := clk.Now().Add(wait)
	for {
		err := c.acquire(ctx, runID)
		var held *teamstate.HeldError
		if errors.As(err, &held) && wait > 0 && clk.Now().Before(deadline) {
			c.infof("run %s is driven by %s; waiting for its lease (up to %s)", runID, held.Holder, deadline.Sub(clk.Now()).Round(time.Second))
			if err := clock.Sleep(ctx, clk, min(max(held.ExpiresIn/2, time.Second), deadline.Sub(clk.Now())+time.Millisecond)); err != nil {
				return "", err
			}
			continue
		}
		if err != nil {
			return "", err
		}
		break
	}
	dir := filepath.Join(stateRoot, "runs", runID)
	recs, err := Materialize(ctx, c.o.Backend, runID, dir, redact.NewSink(c.o.Redactor))
	if err != nil {
		c.Close(ctx, false) //nolint:errcheck // the materialize error is the one to report
		return "", err
	}
	c.mu.Lock()
	c.recs = recs
	c.mu.Unlock()
	return dir, nil
}

// Materialize writes the bucket's journal of runID (and its frozen
// manifest) into dir through sink, replacing the local cache, and returns
// the records.
func Materialize(ctx context.Context, b teamstate.Backend, runID, dir string, sink redact.Sink) ([]journal.Record, error) {
	entries, err := teamstate.ReadRunLog(ctx, b, runID)
	if err != nil {
		return nil, err
	}
	recs, err := records(runID, entries)
	if err != nil {
		return nil, err
	}
	var lines []byte
	for _, r := range recs {
		line, _ := json.Marshal(r)
		lines = append(append(lines, sink.Redactor().JSON(line)...), '\n') // masked after decoding: each line stays a record
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("run %s: %w: no journal records in %s", runID, ErrNoRun, b.URI())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := sink.WriteFile(filepath.Join(dir, journal.FileName), lines, 0o600); err != nil {
		return nil, err
	}
	if o, _, err := b.Get(ctx, ManifestKey(runID)); err == nil {
		if err := sink.WriteFile(filepath.Join(dir, "manifest.json"), o.Data, 0o600); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, teamstate.ErrNotExist) {
		return nil, err
	}
	return recs, nil
}

// records are the run's journal records among its bucket entries.
func records(runID string, entries []teamstate.Entry) ([]journal.Record, error) {
	var recs []journal.Record
	for _, e := range entries {
		if e.Type != EntryRecord {
			continue
		}
		var r journal.Record
		if err := json.Unmarshal(e.Data, &r); err != nil {
			return nil, fmt.Errorf("run %s: journal entry %d: %w", runID, e.Seq, err)
		}
		// Renumbered: a record whose local write failed after the bucket
		// took it may share its number with the next one.
		r.Seq = len(recs) + 1
		recs = append(recs, r)
	}
	return recs, nil
}

// record journals a record of this controller's own (not the engine's:
// the reaper's) in the run's journal, through the mirror, so the bucket's
// journal and the run's summary carry it.
func (c *Controller) record(step, typ string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("journal %s %s: %w", typ, step, err)
	}
	c.mu.Lock()
	seq := len(c.recs) + 1
	c.mu.Unlock()
	return c.mirror(journal.Record{V: journal.Version, Seq: seq, Time: c.o.Now().UTC(), Type: typ, Step: step, Data: b})
}

// ErrNoRun: the bucket has no such run.
var ErrNoRun = errors.New("no such run")

// Close stops renewing; with release (the run reached its outcome) it
// hands the lease back so the run reads as finished, not abandoned.
func (c *Controller) Close(ctx context.Context, release bool) error {
	defer c.end()
	c.mu.Lock()
	l, stop := c.lease, c.stop
	c.mu.Unlock()
	if l == nil {
		return nil
	}
	var err error
	if release {
		err = l.Release(ctx)
	}
	stop()
	return err
}

// HolderID is a stable digest of the holder for the summary (the random
// process ID is not shown to other users in full).
func HolderID(h teamstate.Holder) string {
	s := sha256.Sum256([]byte(h.ID))
	return hex.EncodeToString(s[:4])
}

// Summary is runs/<id>/summary.json, written by the holder after each
// record: what `vastrun runs --all` shows.
type Summary struct {
	Schema     string           `json:"schema"`
	V          int              `json:"v"`
	RunID      string           `json:"run_id"`
	Label      string           `json:"label"`
	Workflow   string           `json:"workflow"`
	Outcome    string           `json:"outcome,omitempty"` // empty while the run goes on
	Holder     teamstate.Holder `json:"holder"`
	Generation int64            `json:"generation"`
	Instances  []int64          `json:"instance_ids"`
	Live       []int64          `json:"live_instance_ids"`
	DPH        float64          `json:"dph"`
	CostUSD    float64          `json:"cost_usd"`
	Started    time.Time        `json:"started"`
	Updated    time.Time        `json:"updated"`
}

// SummarySchema names the summary's format.
const SummarySchema = "vastrun.team.summary"

// SummaryKey is where a run's summary lives.
func SummaryKey(run string) string { return "runs/" + run + "/summary.json" }

// Summarize derives the summary from the run's records.
func Summarize(recs []journal.Record, now time.Time) (Summary, error) {
	st, err := runstate.Replay(recs)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Schema: SummarySchema, V: 1, RunID: st.RunID, Label: st.Label, Workflow: st.Workflow, Outcome: string(st.Outcome),
		Started: st.Started, Updated: now.UTC()}
	for _, a := range st.Attempts {
		if a.InstanceID == 0 {
			continue
		}
		s.Instances = append(s.Instances, int64(a.InstanceID))
		end := now
		if !a.DestroySentAt.IsZero() {
			end = a.DestroySentAt
		}
		if !a.Confirmed {
			s.Live = append(s.Live, int64(a.InstanceID))
			s.DPH += a.DPHTotal
		}
		start := a.RentedAt
		if start.IsZero() {
			start = a.IntentAt
		}
		if a.Charged != nil {
			s.CostUSD += *a.Charged
		} else if !start.IsZero() && end.After(start) {
			s.CostUSD += a.DPHTotal * end.Sub(start).Hours()
		}
	}
	for _, id := range st.Extras {
		s.Instances = append(s.Instances, int64(id))
	}
	return s, nil
}

func (c *Controller) writeSummary(ctx context.Context, recs []journal.Record) {
	s, err := Summarize(recs, c.o.Now())
	if err != nil {
		return
	}
	l := c.Lease()
	s.Holder, s.Generation = l.Record().Holder, l.Generation()
	b, _ := json.Marshal(s)
	key := SummaryKey(c.run)
	c.mu.Lock()
	etag := c.sumETag
	c.mu.Unlock()
	for range 3 {
		var err error
		var ne string
		if etag == "" {
			ne, err = c.o.Backend.PutIfAbsent(ctx, key, b)
		} else {
			ne, err = c.o.Backend.PutIfMatch(ctx, key, b, etag)
		}
		if err == nil {
			c.mu.Lock()
			c.sumETag = ne
			c.mu.Unlock()
			return
		}
		if !errors.Is(err, teamstate.ErrPrecondition) {
			return
		}
		// Written by an earlier holder: take its ETag, once we still lead.
		if l.Check() != nil {
			return
		}
		o, _, gerr := c.o.Backend.Get(ctx, key)
		if gerr != nil {
			etag = ""
			continue
		}
		etag = o.ETag
	}
}

// ReadSummary reads a run's summary.
func ReadSummary(ctx context.Context, b teamstate.Backend, runID string) (Summary, error) {
	o, _, err := b.Get(ctx, SummaryKey(runID))
	if err != nil {
		return Summary{}, err
	}
	var s Summary
	if err := json.Unmarshal(o.Data, &s); err != nil || s.Schema != SummarySchema {
		return Summary{}, fmt.Errorf("run %s: summary is not a %s object", runID, SummarySchema)
	}
	return s, nil
}
