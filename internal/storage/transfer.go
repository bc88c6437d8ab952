package storage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// Transfer tuning (docs/performance.md, "Checkpoint storage", explains the
// choices and how they were measured).
//
//   - Part size, for uploads and for ranged downloads alike: 8 MiB, grown in
//     whole MiB when an object would need more than S3's 10,000 parts.
//     Options.PartSize (or VASTRUN_S3_PART_MIB) overrides it.
//   - Requests in flight per store: 8. Options.Threads (or
//     VASTRUN_S3_THREADS) overrides it. Every bulk request (a part, a range,
//     a single PUT) takes one of these slots, whichever file it belongs to,
//     so whole-checkpoint parallelism never multiplies the limit.
//   - Files in flight in PutFiles/GetFiles: twice the requests in flight, so
//     the next file is hashed or opened while the slots are busy.
//   - Socket receive buffer per S3 connection: 4 MiB where net.core.rmem_max
//     allows it, else the kernel's autotuning (sockbuf.go).
//     Options.RecvBuffer (or VASTRUN_S3_RCVBUF_MIB) overrides it.
//
// Memory: file uploads read parts straight from the file (no part buffers).
// A download verified against part digests (a checkpoint manifest's) and a
// single-part download receive into 256 KiB chunks from one process-wide
// pool of 64 (recv.go): 16 MiB however many files and streams are in
// flight. Without part digests, a ranged download receives each part into
// a buffer of its own, taken from one process-wide budget of 64 MiB
// (recvBudget) before the part starts. Peak heap is therefore at most
// 16 MiB + 64 MiB (the second only for manifests written before part
// digests), plus the HTTP transport's per-connection buffers. Only Put of
// a plain stream (not a file) buffers parts: at most Threads+2 parts of
// 16 MiB.
const (
	DefaultThreads  = 8
	basePartSize    = 8 << 20
	streamPartSize  = 16 << 20 // Put of a stream of unknown size: 156 GiB at most
	maxParts        = 10000
	minPartSize     = 5 << 20 // S3's minimum for every part but the last
	copyBufSize     = 1 << 20
	hashBufSize     = 256 << 10
	maxSinglePartSz = 5 << 30 // S3's limit for one PUT or one CopyObject
)

// ErrSizeMismatch reports an object whose size is not the expected one.
var ErrSizeMismatch = errors.New("object size differs from the expected size")

// ErrChanged reports a local file that changed while it was being uploaded.
var ErrChanged = errors.New("file changed while it was uploaded")

// PartSize returns the part size for an object of size bytes (size < 0:
// unknown), given an override (0: none); see the tuning notes above.
func PartSize(size, override int64) int64 {
	p := int64(basePartSize)
	if size < 0 {
		p = streamPartSize
	}
	if override > 0 {
		p = max(override, minPartSize)
	}
	if size > p*maxParts {
		p = (size + maxParts - 1) / maxParts
		p = (p + 1<<20 - 1) &^ (1<<20 - 1)
	}
	return p
}

// FileTransfer is one file of a PutFiles or GetFiles batch.
type FileTransfer struct {
	Key  string
	Path string
	// Size is the expected size for GetFiles (from a manifest); a
	// different object fails with ErrSizeMismatch. -1: unknown. PutFiles
	// ignores it.
	Size int64
	// Parts, for GetFiles, are the expected part digests (from a
	// manifest, as PutFile returned them). The ranges then follow
	// Parts.Size and each is verified as it arrives (ErrDigestMismatch);
	// the Object returned has Parts set and no whole-file SHA256. Stores
	// without ranges ignore them and return the whole-file digest. PutFiles
	// ignores them.
	Parts *PartDigests
}

// transferer is what the S3 and file stores offer beyond Store for fast
// file transfers. A Store without it (a decorator, a test double) still
// works through Put and Get, in one stream per file.
type transferer interface {
	// putFile uploads f (whose Stat was fi) and returns its digest.
	putFile(ctx context.Context, key string, f *os.File, fi os.FileInfo) (Object, error)
	// getRange opens [off, end) of key (end < 0: to the end of the object)
	// and returns the object's ETag ("" when the store has none).
	getRange(ctx context.Context, key string, off, end int64) (io.ReadCloser, string, error)
	// slot takes one of the store's request slots; release returns it.
	slot(ctx context.Context) (release func(), err error)
	threads() int
	partSize(size int64) int64
	// sameHost reports a server on this machine (a loopback endpoint, a
	// directory): its transfers share this machine's CPUs.
	sameHost() bool
}

// PutFile uploads the regular file at path as key and returns its size and
// SHA-256, which the object also carries. Stores that can (S3) hash the file
// first, so the digest is stored when the object is created, then upload its
// parts in parallel straight from the file; a file modified meanwhile fails
// with ErrChanged rather than leaving an object that does not match its
// digest.
func PutFile(ctx context.Context, s Store, key, path string) (Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	defer f.Close() //nolint:errcheck // read-only file
	fi, err := f.Stat()
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	if t, ok := s.(transferer); ok {
		return t.putFile(ctx, key, f, fi)
	}
	return s.Put(ctx, key, bufio.NewReaderSize(f, copyBufSize))
}

// PutFiles uploads files concurrently and returns their objects in the
// order given. The first failure cancels the rest.
func PutFiles(ctx context.Context, s Store, files []FileTransfer) ([]Object, error) {
	out := make([]Object, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(filesInFlight(s))
	for i, ft := range files {
		g.Go(func() error {
			o, err := PutFile(gctx, s, ft.Key, ft.Path)
			out[i] = o
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// GetFiles downloads files concurrently (see GetFile) and returns what was
// written, in the order given. The first failure cancels the rest.
func GetFiles(ctx context.Context, s Store, files []FileTransfer) ([]Object, error) {
	out := make([]Object, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(filesInFlight(s))
	for i, ft := range files {
		g.Go(func() error {
			o, err := getFile(gctx, s, ft)
			out[i] = o
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func filesInFlight(s Store) int {
	if t, ok := s.(transferer); ok {
		return 2 * t.threads()
	}
	return 4
}

// GetFile downloads key into the file at path (created or truncated) and
// returns what it wrote: the size and the SHA-256 of the bytes in the file.
// Objects larger than one part are fetched as parallel ranged requests
// (all of one ETag, so a concurrent overwrite cannot be mixed in), written
// in place from per-part receive buffers and hashed from them in stream
// order as the parts arrive, so hashing overlaps the transfer. A
// single-part object is hashed chunk by chunk right after each chunk is
// written. size is the expected size: any other object size fails with
// ErrSizeMismatch (size < 0: unknown, one stream). GetFiles given part
// digests verifies each part instead (recv.go, downloadParts). The file is
// not synced: callers that need it durable sync it themselves.
func GetFile(ctx context.Context, s Store, key, path string, size int64) (Object, error) {
	return getFile(ctx, s, FileTransfer{Key: key, Path: path, Size: size})
}

func getFile(ctx context.Context, s Store, ft FileTransfer) (o Object, err error) {
	f, err := os.OpenFile(ft.Path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return Object{}, fmt.Errorf("get %s: %w", ft.Key, err)
	}
	defer func() {
		// A write error may surface only at Close.
		if cerr := f.Close(); cerr != nil && err == nil {
			o, err = Object{}, fmt.Errorf("get %s: %w", ft.Key, cerr)
		}
	}()
	t, ok := s.(transferer)
	if !ok {
		t = plainGetter{s}
	}
	if ft.Size > 0 {
		preallocate(f, ft.Size)
	}
	if ft.Parts != nil && t.partSize(ft.Size) > 0 && ft.Size >= 0 {
		return downloadParts(ctx, t, ft.Key, f, ft.Size, ft.Parts)
	}
	return download(ctx, t, ft.Key, f, ft.Size)
}

// plainGetter adapts a Store without ranges: one stream per file.
type plainGetter struct{ Store }

func (p plainGetter) putFile(ctx context.Context, key string, f *os.File, _ os.FileInfo) (Object, error) {
	return p.Put(ctx, key, f)
}
func (p plainGetter) getRange(ctx context.Context, key string, off, end int64) (io.ReadCloser, string, error) {
	if off != 0 || end >= 0 {
		return nil, "", fmt.Errorf("get %s: ranges are not supported by this store", key)
	}
	rc, err := p.Get(ctx, key)
	return rc, "", err
}
func (plainGetter) slot(context.Context) (func(), error) { return func() {}, nil }
func (plainGetter) threads() int                         { return 1 }
func (plainGetter) partSize(int64) int64                 { return -1 }
func (plainGetter) sameHost() bool                       { return false }

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// progress tracks, per chunk, how many bytes are on disk, so the hasher can
// follow the contiguous prefix.
type progress struct {
	mu    sync.Mutex
	cond  sync.Cond
	done  []int64
	final []bool
	err   error
}

func (p *progress) set(i int, n int64, final bool) {
	p.mu.Lock()
	p.done[i] = n
	p.final[i] = p.final[i] || final
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *progress) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.cond.Broadcast()
}

// wait blocks until chunk i has more than have bytes, is final, or the
// transfer failed.
func (p *progress) wait(i int, have int64) (int64, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.err == nil && p.done[i] <= have && !p.final[i] {
		p.cond.Wait()
	}
	return p.done[i], p.final[i], p.err
}

type chunk struct{ off, n int64 } // n < 0: to the end, length unknown

// Restore receive buffers. A ranged part is received into a buffer of its
// own, written from it with WriteAt and hashed from it in stream order, so
// nothing is read back and the hasher consumes part k as soon as parts
// 0..k are in. Every buffer of every file in the process is taken from one
// budget before its part is started, so the parts in flight stay within
// recvBudget/part parts of the oldest unhashed one (the window) and memory
// stays bounded however many files are in flight. A part larger than
// maxRecvPart (objects over 80 GiB, or an override) is instead written
// through a 1 MiB buffer and read back by the hasher.
const (
	recvBudget  = 64 << 20
	maxRecvPart = 16 << 20
)

var (
	recvMem  = semaphore.NewWeighted(recvBudget)
	partBufs = sync.Pool{New: func() any { b := make([]byte, basePartSize); return &b }}
)

func getPartBuf(n int64) *[]byte {
	if n == basePartSize {
		return partBufs.Get().(*[]byte)
	}
	b := make([]byte, n)
	return &b
}

func putPartBuf(b *[]byte) {
	if int64(len(*b)) == basePartSize {
		partBufs.Put(b)
	}
}

func download(ctx context.Context, t transferer, key string, f *os.File, size int64) (Object, error) {
	part := t.partSize(size)
	if size < 0 || part <= 0 || size <= part {
		return downloadOne(ctx, t, key, f, size)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var chunks []chunk
	for off := int64(0); off < size; off += part {
		chunks = append(chunks, chunk{off, min(part, size-off)})
	}
	inMem := part <= maxRecvPart
	p := &progress{done: make([]int64, len(chunks)), final: make([]bool, len(chunks))}
	p.cond.L = &p.mu
	fail := func(err error) { p.fail(err); cancel() }
	// bufs[i]: part i's receive buffer while it holds budget (inMem only).
	bufs := make([]*[]byte, len(chunks))
	release := func(i int) {
		p.mu.Lock()
		b := bufs[i]
		bufs[i] = nil
		p.mu.Unlock()
		if b != nil {
			putPartBuf(b)
			recvMem.Release(part)
		}
	}

	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	sameObject := (&oneETag{key: key}).check
	fetch := func(i int, buf []byte) error {
		c := chunks[i]
		end := c.off + c.n
		last := i == len(chunks)-1
		if last {
			end = -1 // read to the end, so a longer object shows
		}
		release, err := t.slot(ctx)
		if err != nil {
			return err
		}
		defer release()
		rc, e, err := t.getRange(ctx, key, c.off, end)
		if err != nil {
			return err
		}
		defer rc.Close() //nolint:errcheck // a body read to its end or given up on: its Close error says nothing the read did not
		if err := sameObject(e); err != nil {
			return err
		}
		var w int64
		for w < c.n {
			var dst []byte
			if inMem {
				dst = buf[w:min(w+copyBufSize, c.n)]
			} else {
				dst = buf[:min(int64(len(buf)), c.n-w)]
			}
			n, rerr := io.ReadFull(rc, dst)
			if n > 0 {
				if _, err := f.WriteAt(dst[:n], c.off+w); err != nil {
					return fmt.Errorf("get %s: %w", key, err)
				}
				w += int64(n)
				p.set(i, w, false)
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return fmt.Errorf("get %s: %d bytes short of the expected %d: %w", key, c.n-w, size, ErrSizeMismatch)
			}
			if rerr != nil {
				return fmt.Errorf("get %s: %w", key, rerr)
			}
		}
		// The range (or, for the last one, the object) must end here.
		var probe [1]byte
		if n, err := io.ReadFull(rc, probe[:]); n > 0 {
			return fmt.Errorf("get %s: more than the expected %d bytes: %w", key, size, ErrSizeMismatch)
		} else if err != io.EOF {
			return fmt.Errorf("get %s: %w", key, err)
		}
		p.set(i, w, true)
		return nil
	}
	workers := min(max(t.threads(), 1), len(chunks))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var copyBuf *[]byte
			if !inMem {
				copyBuf = copyBufs.Get().(*[]byte)
				defer copyBufs.Put(copyBuf)
			}
			for {
				// Budget first, then the index: the lowest part not yet
				// started always gets the next buffer, so the part the
				// hasher waits for never waits for memory.
				if inMem {
					if err := recvMem.Acquire(ctx, part); err != nil {
						fail(fmt.Errorf("get %s: %w", key, err))
						return
					}
				}
				i := int(next.Add(1) - 1)
				if i >= len(chunks) {
					if inMem {
						recvMem.Release(part)
					}
					return
				}
				var buf []byte
				if inMem {
					b := getPartBuf(part)
					p.mu.Lock()
					bufs[i] = b
					p.mu.Unlock()
					buf = *b
				} else {
					buf = *copyBuf
				}
				if err := ctx.Err(); err != nil {
					fail(fmt.Errorf("get %s: %w", key, err))
					return
				}
				if err := fetch(i, buf); err != nil {
					fail(err)
					return
				}
			}
		}()
	}

	// Hash in stream order on this goroutine while the workers write.
	h := sha256.New()
	var rbuf []byte
	if !inMem {
		rbuf = make([]byte, hashBufSize)
	}
	var total int64
	var herr error
hash:
	for i, c := range chunks {
		var hashed int64
		for {
			avail, final, err := p.wait(i, hashed)
			if err != nil {
				herr = err
				break hash
			}
			if inMem && hashed < avail {
				p.mu.Lock()
				b := *bufs[i]
				p.mu.Unlock()
				h.Write(b[hashed:avail])
				hashed = avail
			}
			for hashed < avail {
				n := int(min(avail-hashed, int64(len(rbuf))))
				if _, err := f.ReadAt(rbuf[:n], c.off+hashed); err != nil {
					herr = fmt.Errorf("get %s: read back: %w", key, err)
					fail(herr)
					break hash
				}
				h.Write(rbuf[:n])
				hashed += int64(n)
			}
			if final && hashed == avail {
				break
			}
		}
		if inMem {
			release(i)
		}
		total += hashed
	}
	wg.Wait()
	for i := range bufs {
		release(i) // parts left by a failure
	}
	if herr == nil {
		p.mu.Lock()
		herr = p.err
		p.mu.Unlock()
	}
	if herr != nil {
		return Object{}, herr
	}
	return Object{Key: key, Size: total, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// hashFile hashes f from the start, reading at offsets (f's own offset is
// left alone).
func hashFile(ctx context.Context, f *os.File, size int64) (string, error) {
	h := sha256.New()
	buf := make([]byte, hashBufSize)
	var off int64
	for off < size {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		h.Write(buf[:n])
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	if off != size {
		return "", ErrChanged
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashParts hashes f's consecutive part-byte pieces, several at a time
// (one core is left to the whole-file hash that runs beside it). It
// returns nil when f fits one part: its whole-file digest says it all.
func hashParts(ctx context.Context, f *os.File, size, part int64) (*PartDigests, error) {
	if part <= 0 || size <= part {
		return nil, nil
	}
	d := &PartDigests{Size: part, SHA256: make([]string, (size+part-1)/part)}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, runtime.GOMAXPROCS(0)-1))
	for i := range d.SHA256 {
		g.Go(func() error {
			off := int64(i) * part
			n := min(part, size-off)
			h := sha256.New()
			buf := make([]byte, hashBufSize)
			for done := int64(0); done < n; {
				if err := gctx.Err(); err != nil {
					return err
				}
				m, err := f.ReadAt(buf[:min(int64(len(buf)), n-done)], off+done)
				h.Write(buf[:m])
				done += int64(m)
				if err == io.EOF && done < n {
					return ErrChanged
				}
				if err != nil && err != io.EOF {
					return err
				}
			}
			d.SHA256[i] = hex.EncodeToString(h.Sum(nil))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return d, nil
}

// beforeChangeCheck is a test hook (export_test.go).
var beforeChangeCheck func()

// unchanged reports ErrChanged when f's size or modification time moved
// since fi.
func unchanged(f *os.File, fi os.FileInfo) error {
	if beforeChangeCheck != nil {
		beforeChangeCheck()
	}
	now, err := f.Stat()
	if err != nil {
		return err
	}
	if now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
		return ErrChanged
	}
	return nil
}

var (
	_ transferer = (*S3Store)(nil)
	_ transferer = (*FileStore)(nil)
)
