// Package journal is vastrun's append-only run log: one JSON object per
// line, fsync'd before Append returns, guarded by an exclusive file lock so
// that two vastrun processes never drive the same run at once.
//
// Contract: a caller writes an "intent" record before every side effect on
// the marketplace and an outcome record after it. Replaying the records
// rebuilds what happened, so a run can be resumed (or torn down) after any
// crash. A torn last line (a crash mid-write) is ignored on read; any other
// damage is an error, never silently skipped. A journal that is nothing
// but a torn line is damage too (ErrTornOnly): that line is the only record
// of the run, so it is never cut away. Given a redactor (SetRedactor),
// the journal masks every record's data before its mirror or its file
// sees it: no secret is journaled, whatever a caller hands it.
package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/redact"
)

// FileName is the journal's name inside a run directory.
const FileName = "journal.jsonl"

// Version is the record format version.
const Version = 1

// ErrLocked means another process holds the run's journal.
var ErrLocked = errors.New("journal is locked by another vastrun process")

// ErrTornOnly means the journal holds a torn line and no complete record
// before it: a crash during the first write, or a file cut short. It is
// left as it is; the run's label is in state.json beside it.
var ErrTornOnly = errors.New("the journal holds only a torn line, no complete record")

// Record is one line of the journal.
type Record struct {
	V    int             `json:"v"`
	Seq  int             `json:"seq"`
	Time time.Time       `json:"time"`
	Type string          `json:"type"` // intent, done, failed, condition, event
	Step string          `json:"step"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Decode unmarshals the record's data into v.
func (r Record) Decode(v any) error {
	if len(r.Data) == 0 {
		return nil
	}
	return json.Unmarshal(r.Data, v)
}

// Journal is an open, locked journal.
type Journal struct {
	mu   sync.Mutex
	f    *os.File
	path string
	seq  int
	now  func() time.Time
	// fault, when set, is asked before each write (fault injection).
	fault func(Record) error
	// mirror, when set, receives each record before it is written here.
	mirror func(Record) error
	// red masks every record's data before the mirror or the file sees it.
	red *redact.Redactor
}

// SetRedactor makes every later Append mask its record's data with r
// (after decoding, so it stays JSON) before the mirror or the file sees
// it. The journal keeps its own locked, fsync'd file rather than a
// redact.Sink, and takes the sink's masking here.
func (j *Journal) SetRedactor(r *redact.Redactor) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.red = r
}

// SetMirror makes every later Append hand the record to f before writing
// it locally; an error from f fails the Append with nothing written here.
// Team state uses it: the bucket is authoritative, this file its cache.
func (j *Journal) SetMirror(f func(Record) error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.mirror = f
}

// SetWriteFault makes every later Append ask f first: a non-nil error
// fails that Append as a full disk would, with nothing written. It exists
// so that tests can prove a run stops when its journal cannot be written.
func (j *Journal) SetWriteFault(f func(Record) error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.fault = f
}

// Open creates (0700) dir if needed, opens its journal for appending and
// takes the lock. It fails with ErrLocked when another process holds it.
func Open(dir string, now func() time.Time) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create run directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() //nolint:errcheck // the lock error is the one to report
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("open journal %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock journal %s: %w", path, err)
	}
	// Validate before repairing: a damaged journal is left as it was.
	recs, err := readFile(f)
	if err != nil {
		f.Close() //nolint:errcheck // the read error is the one to report
		return nil, fmt.Errorf("read journal %s: %w", path, err)
	}
	if err := truncateTornTail(f); err != nil {
		f.Close() //nolint:errcheck // the repair error is the one to report
		return nil, fmt.Errorf("repair journal %s: %w", path, err)
	}
	j := &Journal{f: f, path: path, now: now}
	if n := len(recs); n > 0 {
		j.seq = recs[n-1].Seq
	}
	if j.now == nil {
		j.now = time.Now
	}
	return j, nil
}

// Path is the journal file's path.
func (j *Journal) Path() string { return j.path }

// Append writes one record and fsyncs it. data may be nil.
func (j *Journal) Append(typ, step string, data any) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return Record{}, errors.New("journal is closed")
	}
	rec := Record{V: Version, Seq: j.seq + 1, Time: j.now().UTC(), Type: typ, Step: step}
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return Record{}, fmt.Errorf("journal %s %s: encode: %w", typ, step, err)
		}
		rec.Data = b
		if j.red != nil {
			rec.Data = j.red.JSON(b)
		}
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return Record{}, err
	}
	line = append(line, '\n')
	if j.fault != nil {
		if err := j.fault(rec); err != nil {
			return Record{}, fmt.Errorf("journal %s %s: write: %w", typ, step, err)
		}
	}
	if j.mirror != nil {
		if err := j.mirror(rec); err != nil {
			return Record{}, fmt.Errorf("journal %s %s: %w", typ, step, err)
		}
	}
	// A failed write (a full disk) may leave part of the line: cut back to
	// where it started, so that a later record starts on a line of its own.
	end, serr := j.f.Seek(0, io.SeekEnd)
	if _, err := j.f.Write(line); err != nil {
		err = fmt.Errorf("journal %s %s: write: %w", typ, step, err)
		if serr == nil {
			err = errors.Join(err, j.cutBack(end))
		}
		return Record{}, err
	}
	if err := j.f.Sync(); err != nil {
		err = fmt.Errorf("journal %s %s: fsync: %w", typ, step, err)
		if serr == nil {
			err = errors.Join(err, j.cutBack(end))
		}
		return Record{}, err
	}
	j.seq = rec.Seq
	return rec, nil
}

// Records re-reads every record from disk.
func (j *Journal) Records() ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil, errors.New("journal is closed")
	}
	return readFile(j.f)
}

// Close releases the lock.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// cutBack truncates the journal to end after a failed append; a part line
// it cannot cut is repaired as a torn tail on the next Open.
func (j *Journal) cutBack(end int64) error {
	if err := j.f.Truncate(end); err != nil {
		return fmt.Errorf("cut back to %d bytes: %w", end, err)
	}
	return nil
}

// Read reads a journal without locking it (for status and reports).
func Read(dir string) ([]Record, error) {
	f, err := os.Open(filepath.Join(dir, FileName))
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read-only file
	return readFile(f)
}

func readFile(f *os.File) ([]Record, error) {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, err
	}
	var recs []Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	complete := len(b) == 0 || b[len(b)-1] == '\n'
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(text, &r); err != nil {
			if !complete && !hasMoreLines(sc) {
				break // a torn final write from a crash: the record never happened
			}
			return nil, fmt.Errorf("line %d is not a journal record: %w", line, err)
		}
		if r.V != Version {
			return nil, fmt.Errorf("line %d has version %d; this vastrun reads version %d", line, r.V, Version)
		}
		if len(recs) > 0 && r.Seq != recs[len(recs)-1].Seq+1 {
			return nil, fmt.Errorf("line %d: sequence %d follows %d: records are missing", line, r.Seq, recs[len(recs)-1].Seq)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(recs) == 0 && len(bytes.TrimSpace(b)) > 0 {
		return nil, fmt.Errorf("its %d bytes end without a newline: %w", len(b), ErrTornOnly)
	}
	return recs, nil
}

// truncateTornTail cuts a partial last line left by a crash after the
// last complete record, so that the next record starts on a line of its
// own. A file with no complete line is never cut (readFile refuses it).
func truncateTornTail(f *os.File) error {
	b, err := os.ReadFile(f.Name())
	if err != nil || len(b) == 0 || b[len(b)-1] == '\n' {
		return err
	}
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return fmt.Errorf("%d bytes with no newline: %w", len(b), ErrTornOnly)
	}
	return f.Truncate(int64(end + 1))
}

func hasMoreLines(sc *bufio.Scanner) bool { return sc.Scan() }
