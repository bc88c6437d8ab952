package teamstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors; callers classify with errors.Is.
var (
	// ErrNotExist: the key does not exist.
	ErrNotExist = errors.New("state object does not exist")
	// ErrPrecondition: a conditional write lost (the key exists, or its
	// ETag changed). The server said 412 or 409.
	ErrPrecondition = errors.New("conditional write refused")
	// ErrUnavailable: the backend could not be reached; the outcome of a
	// write is unknown.
	ErrUnavailable = errors.New("state backend unreachable")
)

// Object is one stored object.
type Object struct {
	Key          string
	Data         []byte
	ETag         string
	LastModified time.Time // server clock
}

// Backend is a flat key space of small objects with conditional writes.
// Keys are slash-separated and relative to the backend's root.
type Backend interface {
	// Get returns the object and the server's clock when it answered.
	Get(ctx context.Context, key string) (obj Object, serverTime time.Time, err error)
	// PutIfAbsent creates key; ErrPrecondition if it exists.
	PutIfAbsent(ctx context.Context, key string, data []byte) (etag string, err error)
	// PutIfMatch replaces key if its ETag is etag; ErrPrecondition otherwise
	// (a missing key included).
	PutIfMatch(ctx context.Context, key string, data []byte, etag string) (newETag string, err error)
	// List returns the keys under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// URI names the backend without credentials.
	URI() string
}

// Location is a parsed state setting: "local" or s3://bucket/prefix.
type Location struct {
	Kind   string // "local" or "s3"
	Bucket string
	Prefix string
}

// ParseLocation reads the value of the `state:` key or --state.
func ParseLocation(s string) (Location, error) {
	switch {
	case s == "" || s == "local":
		return Location{Kind: "local"}, nil
	case strings.HasPrefix(s, "s3://"):
		rest := strings.TrimPrefix(s, "s3://")
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return Location{}, fmt.Errorf("state %q: no bucket\nhint: write state: s3://BUCKET/PREFIX (for example s3://ml-team/vastrun)", s)
		}
		return Location{Kind: "s3", Bucket: bucket, Prefix: strings.Trim(prefix, "/")}, nil
	default:
		return Location{}, fmt.Errorf("state %q: unknown backend\nhint: use state: local (the default) or state: s3://BUCKET/PREFIX for a team bucket", s)
	}
}

// String renders the location as it is written in config.
func (l Location) String() string {
	if l.Kind != "s3" {
		return "local"
	}
	if l.Prefix == "" {
		return "s3://" + l.Bucket
	}
	return "s3://" + l.Bucket + "/" + l.Prefix
}
