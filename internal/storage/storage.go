// Package storage holds vastrun's durable object stores for checkpoints and
// outputs: file:// (a local or mounted directory) and s3:// (any
// S3-compatible endpoint), behind one small interface. Package storagetest
// is the conformance suite every Store must pass.
//
// Contracts:
//   - Put streams: it hashes SHA-256 while uploading (S3: parallel
//     multipart) and returns the digest; the digest is also stored with the
//     object so Stat can report it. PutFile (transfer.go) does the same for
//     a file, with the digest set when the object is created.
//   - GetFile downloads into a file (S3: parallel ranges) and returns the
//     size and SHA-256 of what it wrote; callers compare them with what
//     they expect (a checkpoint manifest). PutFiles/GetFiles move many
//     files at once within the store's request limit. PutFile also returns
//     per-part digests for a file of several parts; given them back
//     (FileTransfer.Parts), GetFiles verifies every part as it arrives and
//     fails with ErrDigestMismatch instead of returning a whole-file digest.
//   - PutIfAbsent is a conditional create: of two racing writers exactly one
//     succeeds, the other gets ErrExists. Commit markers rely on it.
//   - Get of a missing key, and Stat of one, wrap ErrNotExist. Delete of a
//     missing key succeeds.
//   - Keys are slash-separated and relative to the store's root.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Sentinel errors.
var (
	ErrNotExist = errors.New("object does not exist")
	ErrExists   = errors.New("object already exists")
)

// Object describes a stored object.
type Object struct {
	Key    string
	Size   int64
	SHA256 string // hex; empty when the store does not know it
	// Parts, from PutFile, are the digests of the file's parts when it is
	// larger than one part (nil otherwise). From GetFiles they are the
	// expected digests every part was verified against, and SHA256 is then
	// empty: the whole file was not hashed in one stream.
	Parts *PartDigests
}

// PartDigests are the SHA-256 digests of an object's consecutive Size-byte
// pieces (the last may be shorter). A checkpoint manifest carries them
// beside the whole-file digest, so a restore verifies each part as a
// digest of its own, two parts hashed together and streams side by side,
// instead of hashing the whole file in stream order on one core
// (docs/performance.md).
type PartDigests struct {
	Size   int64    `json:"size"`
	SHA256 []string `json:"sha256"`
}

// ErrDigestMismatch reports downloaded bytes whose SHA-256 is not the
// expected one.
var ErrDigestMismatch = errors.New("downloaded bytes do not match the expected SHA-256")

// Store is a flat object store rooted at a prefix.
type Store interface {
	Put(ctx context.Context, key string, r io.Reader) (Object, error)
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (Object, error)
	// List returns the objects under prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Object, error)
	Delete(ctx context.Context, key string) error
	// URI names the store (without credentials).
	URI() string
}

// Options configure Open.
type Options struct {
	// S3 settings; empty values come from the standard AWS environment
	// variables and files (see s3.go).
	Endpoint  string
	Region    string
	PathStyle *bool
	PartSize  int64 // part and range size (default: PartSize's choice from the object size; minimum 5 MiB; env VASTRUN_S3_PART_MIB)
	Threads   int   // requests in flight per store, across all files (default 8; env VASTRUN_S3_THREADS)
	// RecvBuffer is the socket receive buffer asked for on each S3
	// connection, in bytes (sockbuf.go): 0 is the default (4 MiB where
	// net.core.rmem_max allows it, else the kernel's autotuning), < 0 the
	// kernel's autotuning. Env VASTRUN_S3_RCVBUF_MIB (0: autotuning).
	RecvBuffer int64
	Getenv     func(string) string
	AllowHTTP  bool // plain-HTTP endpoints (local test servers)
	// MaxRetries bounds an S3 request's retries (0: minio-go's default);
	// a probe that must answer soon sets it low.
	MaxRetries   int
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// Open parses a file:// or s3:// URI.
func Open(uri string, o Options) (Store, error) {
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("storage URI %q: %w", uri, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("storage URI %q: file URIs are file:///absolute/path", uri)
		}
		return NewFileStore(u.Path)
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("storage URI %q: want s3://BUCKET/PREFIX", uri)
		}
		return NewS3Store(u.Host, strings.Trim(u.Path, "/"), o)
	}
	return nil, fmt.Errorf("storage URI %q: scheme must be file:// or s3://", uri)
}
