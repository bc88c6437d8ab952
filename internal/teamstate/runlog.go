package teamstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EntrySchema names a journal object's format.
const EntrySchema = "vastrun.state.entry"

// Entry is one journal object: runs/<id>/journal/<seq:010d>.json.
type Entry struct {
	Schema     string          `json:"schema"`
	V          int             `json:"v"`
	Run        string          `json:"run"`
	Seq        int64           `json:"seq"`
	Generation int64           `json:"generation"`
	Holder     string          `json:"holder"` // Holder.ID
	Time       time.Time       `json:"time"`
	Type       string          `json:"type"`
	Step       string          `json:"step,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// TypeTakeover is the entry a new holder writes first.
const TypeTakeover = "takeover"

func journalPrefix(run string) string { return "runs/" + run + "/journal/" }

func entryKey(run string, seq int64) string {
	return fmt.Sprintf("%s%010d.json", journalPrefix(run), seq)
}

// RunLog appends a run's journal to a Backend, fenced by the lease.
type RunLog struct {
	b     Backend
	lease *Lease
	run   string
	next  int64
	now   func() time.Time
}

// OpenRunLog starts writing the run's journal under lease: it finds the
// next free sequence number and appends a takeover entry carrying the
// lease's generation, which fences off every older writer.
func OpenRunLog(ctx context.Context, b Backend, lease *Lease, now func() time.Time) (*RunLog, error) {
	if now == nil {
		now = time.Now
	}
	l := &RunLog{b: b, lease: lease, run: lease.Record().Run, now: now}
	if err := l.resync(ctx); err != nil {
		return nil, err
	}
	data, _ := json.Marshal(map[string]any{"generation": lease.Generation(), "holder": lease.Record().Holder})
	if _, err := l.Append(ctx, TypeTakeover, "", json.RawMessage(data)); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *RunLog) resync(ctx context.Context) error {
	keys, err := l.b.List(ctx, journalPrefix(l.run))
	if err != nil {
		return fmt.Errorf("journal of run %s: %w", l.run, err)
	}
	l.next = 1
	for _, k := range keys {
		if n, ok := seqOf(l.run, k); ok && n >= l.next {
			l.next = n + 1
		}
	}
	return nil
}

func seqOf(run, key string) (int64, bool) {
	s, ok := strings.CutPrefix(key, journalPrefix(run))
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ".json")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// Append writes the next entry with If-None-Match: *. Before writing it
// checks the lease's fence; when another writer took the slot it re-reads
// the lease, and a newer generation there means this controller lost the
// run (ErrLeaseLost). A write whose outcome was unknown and that did land
// is recognized as our own and not written twice.
func (l *RunLog) Append(ctx context.Context, typ, step string, data any) (Entry, error) {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return Entry{}, fmt.Errorf("journal %s %s: encode: %w", typ, step, err)
		}
		raw = b
	}
	rec := l.lease.Record()
	for attempt := 0; attempt < 16; attempt++ {
		if err := l.lease.Check(); err != nil {
			return Entry{}, fmt.Errorf("journal %s %s: %w", typ, step, err)
		}
		e := Entry{Schema: EntrySchema, V: 1, Run: l.run, Seq: l.next, Generation: rec.Generation, Holder: rec.Holder.ID,
			Time: l.now().UTC(), Type: typ, Step: step, Data: raw}
		body, _ := json.Marshal(e)
		key := entryKey(l.run, e.Seq)
		_, err := l.b.PutIfAbsent(ctx, key, body)
		if err == nil {
			l.next++
			return e, nil
		}
		if !errors.Is(err, ErrPrecondition) {
			return Entry{}, fmt.Errorf("journal %s %s of run %s: %w", typ, step, l.run, err)
		}
		// The slot is taken. Ours, from a write whose answer was lost?
		if o, _, gerr := l.b.Get(ctx, key); gerr == nil {
			var got Entry
			if json.Unmarshal(o.Data, &got) == nil && got.Holder == e.Holder && got.Generation == e.Generation &&
				got.Type == e.Type && got.Step == e.Step && bytes.Equal(got.Data, e.Data) {
				l.next++
				return got, nil
			}
		}
		cur, _, _, lerr := ReadLease(ctx, l.b, l.run)
		if lerr != nil {
			return Entry{}, fmt.Errorf("journal %s %s of run %s: %w", typ, step, l.run, lerr)
		}
		if cur.Generation != rec.Generation || cur.Holder.ID != rec.Holder.ID {
			l.lease.mu.Lock()
			l.lease.failLocked(ErrLeaseLost)
			err := l.lease.errorLocked()
			l.lease.mu.Unlock()
			return Entry{}, fmt.Errorf("journal %s %s: %w (now generation %d, %s)", typ, step, err, cur.Generation, cur.Holder)
		}
		if err := l.resync(ctx); err != nil {
			return Entry{}, err
		}
	}
	return Entry{}, fmt.Errorf("journal %s %s of run %s: too many lost slots", typ, step, l.run)
}

// ReadRunLog returns a run's journal in order, without the entries of a
// fenced-off writer: an entry whose generation is lower than one already
// seen was written by a controller that had lost the run.
func ReadRunLog(ctx context.Context, b Backend, run string) ([]Entry, error) {
	return ReadRunLogAfter(ctx, b, run, nil)
}

// ReadRunLogAfter is ReadRunLog that reuses prev, an earlier result:
// journal objects never change once created, so only the newer ones are
// fetched. A controller reads the journal before it takes the lease and
// only the tail after, which keeps the read under the lease short.
func ReadRunLogAfter(ctx context.Context, b Backend, run string, prev []Entry) ([]Entry, error) {
	keys, err := b.List(ctx, journalPrefix(run))
	if err != nil {
		return nil, fmt.Errorf("journal of run %s: %w", run, err)
	}
	type kv struct {
		seq int64
		key string
	}
	var ks []kv
	for _, k := range keys {
		if n, ok := seqOf(run, k); ok {
			ks = append(ks, kv{n, k})
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].seq < ks[j].seq })
	out := append([]Entry(nil), prev...)
	var maxGen, last int64
	for _, e := range prev {
		maxGen, last = max(maxGen, e.Generation), max(last, e.Seq)
	}
	for _, k := range ks {
		if k.seq <= last {
			continue
		}
		o, _, err := b.Get(ctx, k.key)
		if err != nil {
			return nil, fmt.Errorf("journal of run %s: %w", run, err)
		}
		var e Entry
		if err := json.Unmarshal(o.Data, &e); err != nil || e.Schema != EntrySchema || e.Seq != k.seq {
			return nil, fmt.Errorf("journal of run %s: %s is not a journal entry", run, k.key)
		}
		if e.Generation < maxGen {
			continue
		}
		maxGen = e.Generation
		out = append(out, e)
	}
	return out, nil
}
