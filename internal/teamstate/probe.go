package teamstate

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

	"github.com/vastrun/vastrun/internal/redact"
)

// ProbeSchema names a cached verdict's format.
const ProbeSchema = "vastrun.state.probe"

// ErrNoConditionalWrites: the backend accepted a conditional write it
// should have refused, so it cannot hold leases.
var ErrNoConditionalWrites = errors.New("the S3 server does not enforce conditional writes")

// ProbeCheck is one step of the probe.
type ProbeCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Got  string `json:"got"`
	Want string `json:"want"`
}

// Verdict is the probe's result for one backend.
type Verdict struct {
	Schema string       `json:"schema"`
	V      int          `json:"v"`
	URI    string       `json:"uri"`
	OK     bool         `json:"ok"`
	Checks []ProbeCheck `json:"checks"`
	At     time.Time    `json:"at"`
}

// Err is nil for a passing verdict, else an error wrapping
// ErrNoConditionalWrites that names the failed checks.
func (v Verdict) Err() error {
	if v.OK {
		return nil
	}
	msg := ""
	for _, c := range v.Checks {
		if !c.OK {
			msg += fmt.Sprintf("\n  %s: got %s, want %s", c.Name, c.Got, c.Want)
		}
	}
	return fmt.Errorf("state %s: %w:%s\nhint: team state needs If-None-Match/If-Match (AWS S3, R2, recent MinIO, versitygw or moto pass); use state: local, or another bucket", v.URI, ErrNoConditionalWrites, msg)
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "success"
	case errors.Is(err, ErrPrecondition):
		return "refused (412)"
	case errors.Is(err, ErrNotExist):
		return "not found (404)"
	default:
		return "error: " + err.Error()
	}
}

// ParallelCreates is how many creates race in the probe.
const ParallelCreates = 8

// Probe proves conditional writes on b under probe/<random>/: create twice
// (success then refused), replace with a wrong ETag (refused), replace a
// missing key (not success), replace with the right ETag (success), and
// ParallelCreates racing creates of one key (exactly one success). An
// unreachable backend is an error, not a verdict — except in the race
// once an earlier check failed: the refusal stands (a server that ignores
// the conditions may also fail racing plain writes).
func Probe(ctx context.Context, b Backend) (Verdict, error) {
	v := Verdict{Schema: ProbeSchema, V: 1, URI: b.URI(), At: time.Now().UTC()}
	base := "probe/" + NewID()
	add := func(name string, err error, want string, ok bool) {
		v.Checks = append(v.Checks, ProbeCheck{Name: name, OK: ok, Got: outcome(err), Want: want})
	}
	unreachable := func(err error) bool { return err != nil && errors.Is(err, ErrUnavailable) }
	body := []byte(`{"probe":1}`)

	etag, err := b.PutIfAbsent(ctx, base+"/a", body)
	if unreachable(err) {
		return Verdict{}, fmt.Errorf("probe %s: %w", b.URI(), err)
	}
	add("create a new key", err, "success", err == nil)
	_, err = b.PutIfAbsent(ctx, base+"/a", body)
	if unreachable(err) {
		return Verdict{}, fmt.Errorf("probe %s: %w", b.URI(), err)
	}
	add("create an existing key (If-None-Match: *)", err, "refused (412)", errors.Is(err, ErrPrecondition))
	_, err = b.PutIfMatch(ctx, base+"/a", []byte(`{"probe":2}`), "0123456789abcdef0123456789abcdef")
	if unreachable(err) {
		return Verdict{}, fmt.Errorf("probe %s: %w", b.URI(), err)
	}
	add("replace with a wrong ETag (If-Match)", err, "refused (412)", errors.Is(err, ErrPrecondition))
	_, err = b.PutIfMatch(ctx, base+"/missing", body, "0123456789abcdef0123456789abcdef")
	if unreachable(err) {
		return Verdict{}, fmt.Errorf("probe %s: %w", b.URI(), err)
	}
	add("replace a missing key (If-Match)", err, "refused (412) or not found", err != nil)
	if etag != "" {
		_, err = b.PutIfMatch(ctx, base+"/a", []byte(`{"probe":3}`), etag)
		if unreachable(err) {
			return Verdict{}, fmt.Errorf("probe %s: %w", b.URI(), err)
		}
		add("replace with the right ETag (If-Match)", err, "success", err == nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, ParallelCreates)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.PutIfAbsent(ctx, base+"/race", fmt.Appendf(nil, `{"racer":%d}`, i))
		}()
	}
	wg.Wait()
	failedSoFar := false
	for _, c := range v.Checks {
		failedSoFar = failedSoFar || !c.OK
	}
	wins, refused := 0, 0
	for _, e := range errs {
		if unreachable(e) && !failedSoFar {
			return Verdict{}, fmt.Errorf("probe %s: %w", b.URI(), e)
		}
		if e == nil {
			wins++
		} else if errors.Is(e, ErrPrecondition) {
			refused++
		}
	}
	c := ProbeCheck{Name: fmt.Sprintf("%d parallel creates of one key", ParallelCreates), Got: fmt.Sprintf("%d successes, %d refused", wins, refused),
		Want: fmt.Sprintf("1 success, %d refused", ParallelCreates-1)}
	c.OK = wins == 1 && refused == ParallelCreates-1
	v.Checks = append(v.Checks, c)
	v.OK = true
	for _, c := range v.Checks {
		v.OK = v.OK && c.OK
	}
	return v, nil
}

// ProbeCache keeps verdicts per backend URI and endpoint in Dir, for
// MaxAge (default a day), so that the probe runs on first use only.
type ProbeCache struct {
	Dir    string
	MaxAge time.Duration
	Now    func() time.Time
}

func (c ProbeCache) path(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(c.Dir, "probe-"+hex.EncodeToString(sum[:8])+".json")
}

// Verify returns the cached verdict for b (id names its endpoint and
// bucket) or probes and caches it. A failing verdict is an error wrapping
// ErrNoConditionalWrites; fresh reports whether the probe ran now.
func (c ProbeCache) Verify(ctx context.Context, b Backend, id string) (v Verdict, fresh bool, err error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	if c.Dir != "" {
		if data, err := os.ReadFile(c.path(id)); err == nil {
			if json.Unmarshal(data, &v) == nil && v.Schema == ProbeSchema && v.URI == b.URI() && now().Sub(v.At) < maxAge {
				return v, false, v.Err()
			}
		}
	}
	v, err = Probe(ctx, b)
	if err != nil {
		return Verdict{}, true, err
	}
	v.At = now().UTC()
	if c.Dir != "" {
		if err := os.MkdirAll(c.Dir, 0o700); err == nil {
			data, _ := json.MarshalIndent(v, "", "  ")
			// A cache: a verdict not saved is probed again. It names no
			// secret; the sink masks token shapes all the same.
			redact.NewSink(nil).WriteJSON(c.path(id), data, 0o600) //nolint:errcheck // a cache: a verdict not saved is probed again
		}
	}
	return v, true, v.Err()
}
