package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/vastrun/vastrun/internal/s3client"
)

// S3Store keeps objects in an S3-compatible bucket under a prefix.
//
// Configuration, when not given in Options, comes from the standard AWS
// variables and files, read by package s3client.
type S3Store struct {
	core         minio.Core
	bucket       string
	prefix       string
	partOverride int64 // 0: PartSize chooses from the object's size
	nthreads     int
	sem          chan struct{} // request slots shared by every transfer
	endpoint     string
	loopback     bool  // the endpoint is this machine (sameHost)
	recvBuffer   int64 // SO_RCVBUF asked for on each connection; 0: autotuning
}

var _ Store = (*S3Store)(nil)

// NewS3Store opens bucket/prefix.
func NewS3Store(bucket, prefix string, o Options) (*S3Store, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	threads, part := o.Threads, o.PartSize
	var err error
	if threads <= 0 {
		if v := getenv("VASTRUN_S3_THREADS"); v != "" {
			if threads, err = strconv.Atoi(v); err != nil || threads < 1 || threads > 256 {
				return nil, fmt.Errorf("VASTRUN_S3_THREADS=%q: want a whole number from 1 to 256", v)
			}
		}
	}
	if threads <= 0 {
		threads = DefaultThreads
	}
	if part <= 0 {
		if v := getenv("VASTRUN_S3_PART_MIB"); v != "" {
			mib, err := strconv.Atoi(v)
			if err != nil || mib < 5 || mib > 5120 {
				return nil, fmt.Errorf("VASTRUN_S3_PART_MIB=%q: want a whole number of MiB from 5 to 5120", v)
			}
			part = int64(mib) << 20
		}
	}
	if part > 0 {
		part = max(part, minPartSize)
	}
	rbOverride, err := recvBufferSetting(o, getenv)
	if err != nil {
		return nil, err
	}
	recvBuffer := recvBufferFor(rbOverride, rmemMax())
	c, err := s3client.New(s3client.Config{
		Endpoint: o.Endpoint, Region: o.Region, PathStyle: o.PathStyle,
		AccessKey: o.AccessKey, SecretKey: o.SecretKey, SessionToken: o.SessionToken, Getenv: getenv, MaxRetries: o.MaxRetries,
		Tune: func(tr *http.Transport) { tuneTransport(tr, threads, recvBuffer) },
	})
	if err != nil {
		return nil, err
	}
	s := &S3Store{core: minio.Core{Client: c.Client}, bucket: bucket, prefix: strings.Trim(prefix, "/"), partOverride: part,
		nthreads: threads, sem: make(chan struct{}, threads), endpoint: c.Endpoint, loopback: isLoopback(c.Endpoint), recvBuffer: recvBuffer}
	return s, nil
}

// tuneTransport adjusts minio-go's default transport for transfers with
// threads request slots and a receive buffer of recvBuffer bytes per
// connection (0: the kernel's autotuning).
func tuneTransport(tr *http.Transport, threads int, recvBuffer int64) {
	// Keep a warm connection for every request slot (and the files being
	// set up beside them) instead of re-dialling between parts.
	tr.MaxIdleConnsPerHost = 2 * threads
	// A large write buffer sends an upload's body in fewer system calls.
	// The read buffer stays small (net/http's 4 KiB): a body is read
	// straight into the receive chunks past its first buffer-full, and a
	// fresh 64 KiB buffer per connection (versitygw closes every
	// connection after a GET) cost 16 page faults and a copy of 64 KiB
	// each, a fifth of a 64 × 4 MiB restore's page faults.
	tr.WriteBufferSize = 64 << 10
	if recvBuffer > 0 {
		tr.DialContext = recvBufferDialer(recvBuffer).DialContext
	}
}

func (s *S3Store) threads() int              { return s.nthreads }
func (s *S3Store) partSize(size int64) int64 { return PartSize(size, s.partOverride) }
func (s *S3Store) sameHost() bool            { return s.loopback }

// isLoopback reports an endpoint (scheme://host[:port]) on this machine:
// localhost or a loopback address. Names are not resolved (a restore
// should not wait on DNS for a tuning hint); one that points at this
// machine through /etc/hosts counts as remote.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(h, "localhost")
}

func (s *S3Store) slot(ctx context.Context) (func(), error) {
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// URI names the store.
func (s *S3Store) URI() string { return fmt.Sprintf("s3://%s/%s", s.bucket, s.prefix) }

// Endpoint is the S3 server it talks to (scheme://host) and Bucket its
// bucket, for messages that name them.
func (s *S3Store) Endpoint() string { return s.endpoint }
func (s *S3Store) Bucket() string   { return s.bucket }

func (s *S3Store) object(key string) (string, error) {
	k, err := s3client.CleanKey(key)
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

// Put uploads a stream: as one PUT when it fits a part, otherwise as a
// parallel multipart upload with SHA-256 computed in stream order on its
// own goroutine. A stream's digest is known only at its end, after the
// object exists, so a multipart stream gets its digest by an in-place copy
// that replaces the metadata (guarded by the ETag). Files should go through
// PutFile, which knows the digest before it creates the object.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader) (Object, error) {
	obj, err := s.object(key)
	if err != nil {
		return Object{}, err
	}
	part := s.partSize(-1)
	// ReadAll grows with the data, so a small object (a manifest) does not
	// cost a whole part's buffer.
	first, err := io.ReadAll(io.LimitReader(r, part))
	if err != nil {
		return Object{}, fmt.Errorf("put %s: read: %w", key, err)
	}
	if int64(len(first)) < part {
		sum := sha256.Sum256(first)
		o := Object{Key: key, Size: int64(len(first)), SHA256: hex.EncodeToString(sum[:])}
		return o, s.putSingle(ctx, key, obj, bytes.NewReader(first), int64(len(first)), o.SHA256)
	}
	uploadID, err := s.core.NewMultipartUpload(ctx, s.bucket, obj, minio.PutObjectOptions{DisableContentSha256: true})
	if err != nil {
		return Object{}, fmt.Errorf("put %s: start multipart: %w", key, err)
	}
	size, sum, parts, err := s.uploadStream(ctx, obj, uploadID, first, r)
	if err != nil {
		return Object{}, s.abort(ctx, obj, uploadID, fmt.Errorf("put %s: %w", key, err))
	}
	info, err := s.core.CompleteMultipartUpload(ctx, s.bucket, obj, uploadID, parts, minio.PutObjectOptions{DisableContentSha256: true})
	if err != nil {
		return Object{}, s.abort(ctx, obj, uploadID, fmt.Errorf("put %s: complete multipart: %w", key, err))
	}
	if err := s.stampDigest(ctx, obj, info.ETag, size, sum); err != nil {
		return Object{}, fmt.Errorf("put %s: store the digest: %w", key, err)
	}
	return Object{Key: key, Size: size, SHA256: sum}, nil
}

// putSingle is one PUT carrying the digest as metadata.
func (s *S3Store) putSingle(ctx context.Context, key, obj string, r io.Reader, size int64, sum string) error {
	release, err := s.slot(ctx)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	defer release()
	opts := minio.PutObjectOptions{DisableContentSha256: true, UserMetadata: map[string]string{"sha256": sum}}
	if _, err := s.core.PutObject(ctx, s.bucket, obj, r, size, "", "", opts); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// stampDigest replaces obj's metadata with its digest by a server-side
// copy onto itself, only if obj is still the object with etag.
func (s *S3Store) stampDigest(ctx context.Context, obj, etag string, size int64, sum string) error {
	dst := minio.CopyDestOptions{Bucket: s.bucket, Object: obj, ReplaceMetadata: true, UserMetadata: map[string]string{"sha256": sum}}
	src := minio.CopySrcOptions{Bucket: s.bucket, Object: obj, MatchETag: etag}
	var err error
	if size <= maxSinglePartSz {
		_, err = s.core.Client.CopyObject(ctx, dst, src) // Core has a CopyObject of its own
	} else {
		_, err = s.core.Client.ComposeObject(ctx, dst, src)
	}
	return err
}

// uploadStream reads parts in order into at most threads+2 buffers, hashes
// them in order on one goroutine and uploads them on up to threads others.
func (s *S3Store) uploadStream(ctx context.Context, obj, uploadID string, first []byte, src io.Reader) (int64, string, []minio.CompletePart, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type buf struct {
		num  int
		data []byte
		refs atomic.Int32
	}
	limit := s.nthreads + 2
	partLen := len(first)
	free := make(chan []byte, limit)
	allocated := 1
	getBuf := func() ([]byte, error) {
		select {
		case b := <-free:
			return b, nil
		default:
		}
		if allocated < limit {
			allocated++
			return make([]byte, partLen), nil
		}
		select {
		case b := <-free:
			return b, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	release := func(b *buf) {
		if b.refs.Add(-1) == 0 {
			free <- b.data[:partLen]
		}
	}
	hashCh := make(chan *buf, limit)
	workCh := make(chan *buf, limit)
	h := sha256.New()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		parts []minio.CompletePart
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := range hashCh {
			h.Write(b.data)
			release(b)
		}
	}()
	for range s.nthreads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range workCh {
				if ctx.Err() == nil {
					p, err := s.uploadPart(ctx, obj, uploadID, b.num, bytes.NewReader(b.data), int64(len(b.data)))
					if err != nil {
						cancel(err)
					} else {
						mu.Lock()
						parts = append(parts, p)
						mu.Unlock()
					}
				}
				release(b)
			}
		}()
	}
	var size int64
	var readErr error
	data := first
	for num := 1; ; num++ {
		var n int
		var err error
		if num == 1 {
			n = len(first)
		} else {
			if data, err = getBuf(); err != nil {
				break
			}
			n, err = io.ReadFull(src, data)
		}
		if n > 0 {
			b := &buf{num: num, data: data[:n]}
			b.refs.Store(2)
			size += int64(n)
			hashCh <- b
			workCh <- b
		} else if data != nil && num > 1 {
			free <- data
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			readErr = fmt.Errorf("read: %w", err)
			cancel(readErr)
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(hashCh)
	close(workCh)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, "", nil, err
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].PartNumber < parts[j].PartNumber })
	return size, hex.EncodeToString(h.Sum(nil)), parts, nil
}

// uploadPart sends one part in one request slot.
func (s *S3Store) uploadPart(ctx context.Context, obj, uploadID string, num int, r io.Reader, n int64) (minio.CompletePart, error) {
	release, err := s.slot(ctx)
	if err != nil {
		return minio.CompletePart{}, err
	}
	defer release()
	p, err := s.core.PutObjectPart(ctx, s.bucket, obj, uploadID, num, r, n, minio.PutObjectPartOptions{DisableContentSha256: true})
	if err != nil {
		return minio.CompletePart{}, fmt.Errorf("part %d: %w", num, err)
	}
	return minio.CompletePart{PartNumber: num, ETag: p.ETag}, nil
}

// putFile hashes f, then creates the object with its digest: one PUT, or
// a multipart upload whose parts are read in parallel straight from the
// file (no part buffers). The file must not change meanwhile.
func (s *S3Store) putFile(ctx context.Context, key string, f *os.File, fi os.FileInfo) (Object, error) {
	obj, err := s.object(key)
	if err != nil {
		return Object{}, err
	}
	if !fi.Mode().IsRegular() {
		return s.Put(ctx, key, f)
	}
	size := fi.Size()
	part := s.partSize(size)
	// The whole-file digest (object metadata, manifest) and the part
	// digests (manifest, for verifying ranges in parallel on restore) are
	// taken side by side, each on its own core where there are two.
	var sum string
	var pd *PartDigests
	hg, hctx := errgroup.WithContext(ctx)
	hg.Go(func() (err error) { sum, err = hashFile(hctx, f, size); return err })
	hg.Go(func() (err error) { pd, err = hashParts(hctx, f, size, part); return err })
	if err := hg.Wait(); err != nil {
		return Object{}, fmt.Errorf("put %s: hash %s: %w", key, f.Name(), err)
	}
	o := Object{Key: key, Size: size, SHA256: sum, Parts: pd}
	if size <= part {
		if err := s.putSingle(ctx, key, obj, io.NewSectionReader(f, 0, size), size, sum); err != nil {
			return Object{}, err
		}
		if err := unchanged(f, fi); err != nil {
			// The object holds a file that changed while it was read: one
			// left behind would be restored as if it were whole.
			err = fmt.Errorf("put %s: %s: %w", key, f.Name(), err)
			if rerr := s.core.RemoveObject(context.WithoutCancel(ctx), s.bucket, obj, minio.RemoveObjectOptions{}); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove %s: %w", key, rerr))
			}
			return Object{}, err
		}
		return o, nil
	}
	opts := minio.PutObjectOptions{DisableContentSha256: true, UserMetadata: map[string]string{"sha256": sum}}
	uploadID, err := s.core.NewMultipartUpload(ctx, s.bucket, obj, opts)
	if err != nil {
		return Object{}, fmt.Errorf("put %s: start multipart: %w", key, err)
	}
	abort := func(err error) (Object, error) {
		return Object{}, s.abort(ctx, obj, uploadID, fmt.Errorf("put %s: %w", key, err))
	}
	nparts := int((size + part - 1) / part)
	parts := make([]minio.CompletePart, nparts)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.nthreads)
	for i := range nparts {
		off := int64(i) * part
		g.Go(func() error {
			p, err := s.uploadPart(gctx, obj, uploadID, i+1, io.NewSectionReader(f, off, min(part, size-off)), min(part, size-off))
			parts[i] = p
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return abort(err)
	}
	if err := unchanged(f, fi); err != nil {
		return abort(fmt.Errorf("%s: %w", f.Name(), err))
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, obj, uploadID, parts, minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
		return abort(fmt.Errorf("complete multipart: %w", err))
	}
	return o, nil
}

// getRange opens [off, end) of key; end < 0 reads to the end.
func (s *S3Store) getRange(ctx context.Context, key string, off, end int64) (io.ReadCloser, string, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, "", err
	}
	var opts minio.GetObjectOptions
	switch {
	case end >= 0 && end > off:
		err = opts.SetRange(off, end-1)
	case end < 0 && off > 0:
		err = opts.SetRange(off, 0)
	case end >= 0:
		return nil, "", fmt.Errorf("get %s: empty range at %d", key, off)
	}
	if err != nil {
		return nil, "", fmt.Errorf("get %s: %w", key, err)
	}
	rc, info, _, err := s.core.GetObject(ctx, s.bucket, obj, opts)
	if err != nil {
		r := minio.ToErrorResponse(err)
		switch {
		case notExist(err):
			return nil, "", fmt.Errorf("get %s: %w", key, ErrNotExist)
		case r.StatusCode == http.StatusRequestedRangeNotSatisfiable || r.Code == "InvalidRange":
			return nil, "", fmt.Errorf("get %s: nothing at offset %d: %w", key, off, ErrSizeMismatch)
		}
		return nil, "", fmt.Errorf("get %s: %w", key, err)
	}
	return rc, info.ETag, nil
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
		return fmt.Errorf("create bucket %s: %w: %w", s.bucket, ErrNoBucket, err)
	}
	return nil
}

// abort drops an unfinished multipart upload after err. A failed abort is
// reported with err: the parts it leaves stay stored, and billed.
func (s *S3Store) abort(ctx context.Context, obj, uploadID string, err error) error {
	if aerr := s.core.AbortMultipartUpload(context.WithoutCancel(ctx), s.bucket, obj, uploadID); aerr != nil {
		return errors.Join(err, fmt.Errorf("abort multipart upload %s: %w", uploadID, aerr))
	}
	return err
}
