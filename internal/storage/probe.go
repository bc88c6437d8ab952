package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"syscall"

	"github.com/minio/minio-go/v7"
)

// Why a store refused a probe (Classify). Each names a different fix, so
// the preflight's hint can name the right one.
var (
	// ErrDenied: the store answered, and the credentials may not do this.
	ErrDenied = errors.New("access denied")
	// ErrBadCredentials: the store does not accept the credentials at all
	// (unknown key, wrong secret, expired token).
	ErrBadCredentials = errors.New("credentials refused")
	// ErrUnreachable: no store answered (DNS, refused or dropped
	// connections, timeouts).
	ErrUnreachable = errors.New("store unreachable")
	// ErrNotWritable: a file store's directory cannot be created or written.
	ErrNotWritable = errors.New("directory not writable")
	// ErrReadBack: the object read back is not the one written.
	ErrReadBack = errors.New("the object read back differs from the one written")
)

// ProbeError is a failed probe: which operation on which object, and why.
type ProbeError struct {
	URI string // the store
	Key string
	Op  string // "write", "read back" or "delete"
	Err error
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("%s %s/%s: %v", e.Op, e.URI, e.Key, e.Err)
}

// Unwrap gives the cause and its class (Classify), so errors.Is finds
// either.
func (e *ProbeError) Unwrap() []error {
	if c := Classify(e.Err); c != nil {
		return []error{c, e.Err}
	}
	return []error{e.Err}
}

// ProbePrefix starts the names of probe objects, at a store's root (not in
// a directory of their own, which a file store would leave behind).
const ProbePrefix = ".vastrun-preflight-"

// Probe proves that s takes what a run will write: it writes a small
// object at its root named ProbePrefix and random hex (concurrent probes
// never meet), reads it back, compares it and deletes it. A failure is a
// *ProbeError; the probe object is deleted on every path it was written.
func Probe(ctx context.Context, s Store) (err error) {
	var id [8]byte
	rand.Read(id[:]) // never fails (Go 1.24+)
	key := ProbePrefix + hex.EncodeToString(id[:])
	body := []byte("vastrun preflight probe " + key + "\n")
	fail := func(op string, err error) error { return &ProbeError{URI: s.URI(), Key: key, Op: op, Err: err} }
	if _, err := s.Put(ctx, key, bytes.NewReader(body)); err != nil {
		return fail("write", err)
	}
	defer func() {
		if derr := s.Delete(context.WithoutCancel(ctx), key); derr != nil && err == nil {
			err = fail("delete", derr)
		}
	}()
	got, err := readAll(ctx, s, key, int64(len(body))+1)
	if err != nil {
		return fail("read back", err)
	}
	if !bytes.Equal(got, body) {
		return fail("read back", ErrReadBack)
	}
	return nil
}

// readAll reads at most limit bytes of key.
func readAll(ctx context.Context, s Store, key string, limit int64) ([]byte, error) {
	r, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close() //nolint:errcheck // a body read to its end or given up on: its Close error says nothing the read did not
	return io.ReadAll(io.LimitReader(r, limit))
}

// Classify names why a store operation failed: ErrDenied,
// ErrBadCredentials, ErrNoBucket, ErrUnreachable, ErrNotWritable, or nil
// when it is none of them. It reads the S3 error code and the error types
// of the network and the file system, never the message.
func Classify(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch resp.Code {
		case "NoSuchBucket":
			return ErrNoBucket
		case "AccessDenied", "AllAccessDisabled", "AccountProblem":
			return ErrDenied
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "TokenRefreshRequired", "InvalidSecurity":
			return ErrBadCredentials
		}
		return nil
	}
	var dns *net.DNSError
	var op *net.OpError
	var ue *url.Error
	switch {
	case errors.Is(err, ErrNoBucket):
		return ErrNoBucket
	// A *url.Error is a request that got no HTTP answer at all (the
	// connection failed or was dropped; minio-go rewrites a dropped one's
	// io.EOF into text of its own).
	case errors.As(err, &dns), errors.As(err, &op), errors.As(err, &ue), errors.Is(err, context.DeadlineExceeded):
		return ErrUnreachable
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EROFS),
		errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EEXIST):
		return ErrNotWritable
	}
	return nil
}
