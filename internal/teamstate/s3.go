package teamstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/vastrun/vastrun/internal/s3client"
)

// S3Options configure NewS3. Empty values come from the standard AWS
// variables, as for checkpoint storage: AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION, and credentials from
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN or the shared
// credentials file (AWS_PROFILE).
type S3Options struct {
	Endpoint  string
	Region    string
	AccessKey string
	SecretKey string
	Getenv    func(string) string
	// Transport, when set, carries every request (tests wrap it to drop a
	// controller's traffic).
	Transport http.RoundTripper
}

// S3 is a Backend in bucket/prefix of an S3 endpoint. Conditional writes
// use If-None-Match: * and If-Match: <etag>; only a server that passed the
// Probe may be trusted with them. The server's clock is read from the Date
// header of its latest response.
type S3 struct {
	core     minio.Core
	bucket   string
	prefix   string
	endpoint string
	dates    *dateTracker
}

var _ Backend = (*S3)(nil)

// NewS3 opens s3://bucket/prefix.
func NewS3(bucket, prefix string, o S3Options) (*S3, error) {
	dates := &dateTracker{}
	c, err := s3client.New(s3client.Config{
		Endpoint: o.Endpoint, Region: o.Region, AccessKey: o.AccessKey, SecretKey: o.SecretKey,
		Getenv: o.Getenv, Transport: o.Transport, MaxRetries: 1,
		Wrap: func(rt http.RoundTripper) http.RoundTripper { dates.next = rt; return dates },
	})
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	return &S3{core: minio.Core{Client: c.Client}, bucket: bucket, prefix: strings.Trim(prefix, "/"),
		endpoint: c.Endpoint, dates: dates}, nil
}

// Endpoint is the server's scheme://host, the key of the probe cache.
func (s *S3) Endpoint() string { return s.endpoint }

func (s *S3) URI() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + s.prefix
}

// EnsureBucket creates the bucket if it is missing (tests and first setup).
func (s *S3) EnsureBucket(ctx context.Context) error {
	ok, err := s.core.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("state bucket %s: %w", s.bucket, classify(err))
	}
	if ok {
		return nil
	}
	if err := s.core.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{}); err != nil {
		if r := minio.ToErrorResponse(err); r.Code == "BucketAlreadyOwnedByYou" || r.Code == "BucketAlreadyExists" {
			return nil
		}
		return fmt.Errorf("create state bucket %s: %w", s.bucket, classify(err))
	}
	return nil
}

func (s *S3) object(key string) (string, error) {
	k, err := s3client.CleanKey(key)
	if err != nil {
		return "", err
	}
	if s.prefix == "" {
		return k, nil
	}
	return s.prefix + "/" + k, nil
}

// classify maps a minio-go error onto the package's sentinels, keeping it
// wrapped for the details.
func classify(err error) error {
	if err == nil {
		return nil
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed":
		return fmt.Errorf("%w (%s)", ErrPrecondition, r.Code)
	case r.StatusCode == http.StatusConflict || r.Code == "ConditionalRequestConflict":
		// AWS: a conflicting conditional write was in flight; this one lost.
		return fmt.Errorf("%w (%s)", ErrPrecondition, r.Code)
	case r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey":
		return fmt.Errorf("%w (%s)", ErrNotExist, r.Code)
	case r.StatusCode == 0 || r.StatusCode >= 500:
		return fmt.Errorf("%w: %v", ErrUnavailable, err) //nolint:errorlint // the class is ErrUnavailable; the cause is context only
	}
	return err
}

func (s *S3) Get(ctx context.Context, key string) (Object, time.Time, error) {
	obj, err := s.object(key)
	if err != nil {
		return Object{}, time.Time{}, err
	}
	rc, info, _, err := s.core.GetObject(ctx, s.bucket, obj, minio.GetObjectOptions{})
	if err != nil {
		return Object{}, s.dates.now(), fmt.Errorf("get %s: %w", key, classify(err))
	}
	defer rc.Close() //nolint:errcheck // read-only; the read's error is checked
	data, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	if err != nil {
		return Object{}, s.dates.now(), fmt.Errorf("get %s: %w: %v", key, ErrUnavailable, err) //nolint:errorlint // the class is ErrUnavailable; the cause is context only
	}
	return Object{Key: key, Data: data, ETag: strings.Trim(info.ETag, `"`), LastModified: info.LastModified}, s.dates.now(), nil
}

func (s *S3) put(ctx context.Context, op, key string, data []byte, opts minio.PutObjectOptions) (string, error) {
	obj, err := s.object(key)
	if err != nil {
		return "", err
	}
	opts.DisableContentSha256 = true
	opts.ContentType = "application/json"
	info, err := s.core.PutObject(ctx, s.bucket, obj, bytes.NewReader(data), int64(len(data)), "", "", opts)
	if err != nil {
		err = classify(err)
		if op == "replace" && errors.Is(err, ErrNotExist) {
			// If-Match on a missing key: AWS says 404; it lost all the same.
			err = fmt.Errorf("%w (missing)", ErrPrecondition)
		}
		return "", fmt.Errorf("%s %s: %w", op, key, err)
	}
	return strings.Trim(info.ETag, `"`), nil
}

func (s *S3) PutIfAbsent(ctx context.Context, key string, data []byte) (string, error) {
	var opts minio.PutObjectOptions
	opts.SetMatchETagExcept("*")
	return s.put(ctx, "create", key, data, opts)
}

func (s *S3) PutIfMatch(ctx context.Context, key string, data []byte, etag string) (string, error) {
	if etag == "" || etag == "*" {
		return "", fmt.Errorf("replace %s: an exact ETag is required", key)
	}
	var opts minio.PutObjectOptions
	opts.SetMatchETag(etag)
	return s.put(ctx, "replace", key, data, opts)
}

func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	full := prefix
	if s.prefix != "" {
		full = s.prefix + "/" + prefix
	}
	var keys []string
	for o := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, classify(o.Err))
		}
		k := o.Key
		if s.prefix != "" {
			k = strings.TrimPrefix(k, s.prefix+"/")
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// dateTracker remembers the server's Date header of the latest response,
// with the local monotonic instant it arrived, so that the server's clock
// can be read between responses.
type dateTracker struct {
	next http.RoundTripper
	mu   sync.Mutex
	date time.Time
	at   time.Time
}

func (d *dateTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(r)
	if err == nil {
		if t, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			d.mu.Lock()
			d.date, d.at = t, time.Now()
			d.mu.Unlock()
		}
	}
	return resp, err
}

// now is the server's clock: the latest Date plus the time since it came.
// A zero time means no response has carried a Date yet.
func (d *dateTracker) now() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.date.IsZero() {
		return time.Time{}
	}
	return d.date.Add(time.Since(d.at))
}
