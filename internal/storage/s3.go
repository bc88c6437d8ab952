package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Store keeps objects in an S3-compatible bucket under a prefix.
//
// Configuration, when not given in Options, comes from the standard AWS
// variables: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (default AWS),
// AWS_REGION or AWS_DEFAULT_REGION, AWS_S3_FORCE_PATH_STYLE, and credentials
// from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN or the
// shared credentials file (~/.aws/credentials, AWS_PROFILE).
type S3Store struct {
	core     minio.Core
	bucket   string
	prefix   string
	partSize int64
	threads  int
	endpoint string
}

var _ Store = (*S3Store)(nil)

const minPartSize = 5 << 20 // S3's minimum for every part but the last

// NewS3Store opens bucket/prefix.
func NewS3Store(bucket, prefix string, o Options) (*S3Store, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	first := func(vals ...string) string {
		for _, v := range vals {
			if v != "" {
				return v
			}
		}
		return ""
	}
	endpoint := first(o.Endpoint, getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL"), "https://s3.amazonaws.com")
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("S3 endpoint %q: want https://host[:port]", endpoint)
	}
	region := first(o.Region, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), "us-east-1")
	lookup := minio.BucketLookupAuto
	pathStyle := o.PathStyle != nil && *o.PathStyle
	if o.PathStyle == nil {
		// Custom endpoints (MinIO, moto, SeaweedFS, Ceph) mostly want path style.
		pathStyle = strings.EqualFold(getenv("AWS_S3_FORCE_PATH_STYLE"), "true") || !strings.HasSuffix(u.Host, "amazonaws.com")
	}
	if pathStyle {
		lookup = minio.BucketLookupPath
	}
	var creds *credentials.Credentials
	if o.AccessKey != "" {
		creds = credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.FileAWSCredentials{Profile: getenv("AWS_PROFILE")},
		})
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("S3 client: %w", err)
	}
	s := &S3Store{core: minio.Core{Client: c}, bucket: bucket, prefix: strings.Trim(prefix, "/"), partSize: o.PartSize, threads: o.Threads, endpoint: u.Scheme + "://" + u.Host}
	if s.partSize < minPartSize {
		s.partSize = 16 << 20
	}
	if s.threads <= 0 {
		s.threads = 4
	}
	return s, nil
}

// URI names the store.
func (s *S3Store) URI() string { return fmt.Sprintf("s3://%s/%s", s.bucket, s.prefix) }

func (s *S3Store) object(key string) (string, error) {
	k, err := CleanKey(key)
	if err != nil {
		return "", err
	}
	if s.prefix == "" {
		return k, nil
	}
	return s.prefix + "/" + k, nil
}

func notExist(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == "NoSuchKey" || r.StatusCode == http.StatusNotFound
}

// Put uploads r, as one PUT when it fits a part and as a parallel
// multipart upload otherwise, hashing SHA-256 in stream order.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader) (Object, error) {
	obj, err := s.object(key)
	if err != nil {
		return Object{}, err
	}
	h := sha256.New()
	src := io.TeeReader(r, h)
	first := make([]byte, s.partSize)
	n, err := io.ReadFull(src, first)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		sum := hex.EncodeToString(h.Sum(nil))
		opts := minio.PutObjectOptions{DisableContentSha256: true, UserMetadata: map[string]string{"sha256": sum}}
		if _, err := s.core.PutObject(ctx, s.bucket, obj, bytes.NewReader(first[:n]), int64(n), "", "", opts); err != nil {
			return Object{}, fmt.Errorf("put %s: %w", key, err)
		}
		return Object{Key: key, Size: int64(n), SHA256: sum}, nil
	}
	if err != nil {
		return Object{}, fmt.Errorf("put %s: read: %w", key, err)
	}
	uploadID, err := s.core.NewMultipartUpload(ctx, s.bucket, obj, minio.PutObjectOptions{DisableContentSha256: true})
	if err != nil {
		return Object{}, fmt.Errorf("put %s: start multipart: %w", key, err)
	}
	size, parts, err := s.uploadParts(ctx, obj, uploadID, first, src)
	if err != nil {
		s.core.AbortMultipartUpload(context.WithoutCancel(ctx), s.bucket, obj, uploadID)
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, obj, uploadID, parts, minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
		s.core.AbortMultipartUpload(context.WithoutCancel(ctx), s.bucket, obj, uploadID)
		return Object{}, fmt.Errorf("put %s: complete multipart: %w", key, err)
	}
	return Object{Key: key, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// uploadParts reads parts in order (so the hash sees the stream in order)
// and uploads up to s.threads of them at once.
func (s *S3Store) uploadParts(ctx context.Context, obj, uploadID string, first []byte, src io.Reader) (int64, []minio.CompletePart, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		parts    []minio.CompletePart
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, s.threads)
		size     int64
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	upload := func(num int, data []byte) {
		defer wg.Done()
		defer func() { <-sem }()
		p, err := s.core.PutObjectPart(ctx, s.bucket, obj, uploadID, num, bytes.NewReader(data), int64(len(data)), minio.PutObjectPartOptions{DisableContentSha256: true})
		if err != nil {
			fail(fmt.Errorf("part %d: %w", num, err))
			return
		}
		mu.Lock()
		parts = append(parts, minio.CompletePart{PartNumber: num, ETag: p.ETag})
		mu.Unlock()
	}
	dispatch := func(num int, data []byte) {
		size += int64(len(data))
		sem <- struct{}{}
		wg.Add(1)
		go upload(num, data)
	}
	dispatch(1, first)
	for num := 2; ; num++ {
		next := make([]byte, s.partSize)
		n, err := io.ReadFull(src, next)
		if n > 0 {
			dispatch(num, next[:n]) // a short read is the last part
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			fail(fmt.Errorf("read: %w", err))
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	if firstErr != nil {
		return 0, nil, firstErr
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].PartNumber < parts[j].PartNumber })
	return size, parts, nil
}

// PutIfAbsent is a conditional single PUT (If-None-Match: *).
func (s *S3Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	obj, err := s.object(key)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	opts := minio.PutObjectOptions{DisableContentSha256: true, UserMetadata: map[string]string{"sha256": hex.EncodeToString(sum[:])}}
	opts.SetMatchETagExcept("*")
	_, err = s.core.PutObject(ctx, s.bucket, obj, bytes.NewReader(data), int64(len(data)), "", "", opts)
	if err != nil {
		if r := minio.ToErrorResponse(err); r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed" {
			return fmt.Errorf("create %s: %w", key, ErrExists)
		}
		return fmt.Errorf("create %s: %w", key, err)
	}
	return nil
}

// Get opens key for reading.
func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, err
	}
	rc, _, _, err := s.core.GetObject(ctx, s.bucket, obj, minio.GetObjectOptions{})
	if err != nil {
		if notExist(err) {
			return nil, fmt.Errorf("get %s: %w", key, ErrNotExist)
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return rc, nil
}

// Stat describes key.
func (s *S3Store) Stat(ctx context.Context, key string) (Object, error) {
	obj, err := s.object(key)
	if err != nil {
		return Object{}, err
	}
	info, err := s.core.StatObject(ctx, s.bucket, obj, minio.StatObjectOptions{})
	if err != nil {
		if notExist(err) {
			return Object{}, fmt.Errorf("stat %s: %w", key, ErrNotExist)
		}
		return Object{}, fmt.Errorf("stat %s: %w", key, err)
	}
	o := Object{Key: key, Size: info.Size, SHA256: info.UserMetadata["Sha256"]}
	if o.SHA256 == "" {
		o.SHA256 = info.Metadata.Get("X-Amz-Meta-Sha256")
	}
	return o, nil
}

// List returns objects under prefix, sorted.
func (s *S3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	full := prefix
	if s.prefix != "" {
		full = s.prefix + "/" + prefix
	}
	var out []Object
	for info := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if info.Err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, info.Err)
		}
		key := info.Key
		if s.prefix != "" {
			key = strings.TrimPrefix(key, s.prefix+"/")
		}
		out = append(out, Object{Key: key, Size: info.Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes key; S3 answers success for a missing key too.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	obj, err := s.object(key)
	if err != nil {
		return err
	}
	if err := s.core.RemoveObject(ctx, s.bucket, obj, minio.RemoveObjectOptions{}); err != nil && !notExist(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// ErrNoBucket is returned by EnsureBucket on failure to create it.
var ErrNoBucket = errors.New("bucket missing")

// EnsureBucket creates the bucket if it does not exist (tests, first runs).
func (s *S3Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.core.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", s.bucket, err)
	}
	if ok {
		return nil
	}
	if err := s.core.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("create bucket %s: %w: %v", s.bucket, ErrNoBucket, err)
	}
	return nil
}
