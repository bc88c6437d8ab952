package storage

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// Receiving a download (docs/performance.md, "How the transfers work").
//
// A stream's goroutine only moves bytes: it reads a chunk from the socket
// into a pooled buffer, writes it to the file at its offset and hands it
// to the hasher of the part it belongs to. Each part has its own hasher
// goroutine, which passes the chunks on to the hashing pool (hashpool.go),
// so consecutive parts of one stream, and other files' chunks, are hashed
// side by side, in pairs where the pool can, while the stream goes on
// receiving; a part's digest is compared when its last chunk is hashed.
// A single-part object is received into two chunks in turn, one hashed
// while the next arrives (downloadOne). Memory is the chunk pool: at
// most maxChunks buffers of chunkSize in the whole process, however many
// files and streams are in flight (a stream waits for a free buffer, which
// also holds it back when the hashers fall behind).
const (
	chunkSize = 256 << 10 // fits a core's L2 between the socket copy, the write and the hash
	maxChunks = 64        // 16 MiB of receive buffers per process
)

// joinRanged decides, after each part the head stream received, whether
// ranged streams should join it: when more than a quarter of its reads came
// back short, the stream waits on the network (a remote store, where each
// connection is bounded by its round trip and window), and more
// connections add bandwidth. When the bytes are already waiting in the
// socket (loopback, a LAN, or a client that is itself the bottleneck, as
// on a busy machine), one stream is left alone: one plain GET lets a
// server send straight from its page cache (versitygw serves a whole
// object with sendfile, a range through a user-space copy), and more
// streams would only add work on both sides. Deliberately not a rate: a
// starved CPU makes any stream look slow. A variable so tests can force
// either path.
var joinRanged = func(reads, short int) bool { return short*4 > reads }

var (
	chunkSem  = semaphore.NewWeighted(maxChunks)
	chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}
)

func getChunk(ctx context.Context) (*[]byte, error) {
	if err := chunkSem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	return chunkPool.Get().(*[]byte), nil
}

func putChunk(b *[]byte) {
	chunkPool.Put(b)
	chunkSem.Release(1)
}

// chunk is a received piece on its way to a part's hasher.
type recvChunk struct {
	buf *[]byte
	n   int
}

// partHasher hashes one part's chunks in order on its own goroutine.
type partHasher struct {
	ch   chan recvChunk
	done bool // set by the receiver before close when every byte arrived
}

// startHasher starts hashing a part on g; check gets the part's digest
// once every chunk has arrived (not when the receiver gave up: its own
// error is the one reported).
func startHasher(g *errgroup.Group, check func(h hash.Hash) error) *partHasher {
	p := &partHasher{ch: make(chan recvChunk, maxChunks)}
	g.Go(func() error {
		s := newHashStream()
		var prev *[]byte // hashing: back to the pool once its successor is submitted
		for c := range p.ch {
			s.submit((*c.buf)[:c.n])
			if prev != nil {
				putChunk(prev)
			}
			prev = c.buf
		}
		s.wait()
		if prev != nil {
			putChunk(prev)
		}
		if !p.done {
			return nil
		}
		return check(s.d)
	})
	return p
}

// receive copies n bytes (n < 0: up to EOF) from r into f at off, feeding
// p. It returns the bytes received; a short stream is ErrSizeMismatch.
func receive(ctx context.Context, key string, r io.Reader, f *os.File, off, n int64, p *partHasher) (int64, error) {
	var w int64
	for n < 0 || w < n {
		bp, err := getChunk(ctx)
		if err != nil {
			return w, fmt.Errorf("get %s: %w", key, err)
		}
		want := int64(chunkSize)
		if n >= 0 {
			want = min(want, n-w)
		}
		m, rerr := io.ReadFull(r, (*bp)[:want])
		if m > 0 {
			if _, err := f.WriteAt((*bp)[:m], off+w); err != nil {
				putChunk(bp)
				return w, fmt.Errorf("get %s: %w", key, err)
			}
			w += int64(m)
			p.ch <- recvChunk{bp, m}
		} else {
			putChunk(bp)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			if n < 0 {
				return w, nil
			}
			return w, fmt.Errorf("get %s: %d bytes short of the expected %d: %w", key, n-w, n, ErrSizeMismatch)
		}
		if rerr != nil {
			return w, fmt.Errorf("get %s: %w", key, rerr)
		}
	}
	return w, nil
}

// shortReads counts the reads of a stream that returned less than asked.
type shortReads struct {
	r            io.Reader
	reads, short int
}

func (c *shortReads) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.reads++
	if n < len(p) {
		c.short++
	}
	return n, err
}

// expectEOF checks that r has nothing after the bytes expected of it.
func expectEOF(key string, r io.Reader, size int64) error {
	var probe [1]byte
	if m, err := io.ReadFull(r, probe[:]); m > 0 {
		return fmt.Errorf("get %s: more than the expected %d bytes: %w", key, size, ErrSizeMismatch)
	} else if err != io.EOF {
		return fmt.Errorf("get %s: %w", key, err)
	}
	return nil
}

// oneETag checks that every request of a download saw one object.
type oneETag struct {
	key  string
	mu   sync.Mutex
	etag string
	have bool
}

func (o *oneETag) check(e string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.have {
		o.etag, o.have = e, true
	} else if e != o.etag {
		return fmt.Errorf("get %s: the object changed during the download (ETag %s, then %s)", o.key, o.etag, e)
	}
	return nil
}

// partQueue hands out parts: the head stream takes them from the front,
// ranged streams from the back, until they meet.
type partQueue struct {
	mu     sync.Mutex
	lo, hi int
}

func (q *partQueue) front() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lo >= q.hi {
		return 0, false
	}
	q.lo++
	return q.lo - 1, true
}

func (q *partQueue) back() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lo >= q.hi {
		return 0, false
	}
	q.hi--
	return q.hi, true
}

func (q *partQueue) left() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.hi - q.lo
}

// downloadParts fetches an object whose part digests are known (a
// checkpoint manifest's) and verifies every part against its digest.
// One plain GET (the head stream) reads the object from the start; when
// it runs slower than soloRate, ranged streams join it in the store's free
// request slots, taking parts from the end, until they meet. Every part is
// hashed on a goroutine of its own, so nothing waits on stream order.
func downloadParts(ctx context.Context, t transferer, key string, f *os.File, size int64, want *PartDigests) (Object, error) {
	if want.Size <= 0 || int64(len(want.SHA256)) != max(1, (size+want.Size-1)/want.Size) {
		return Object{}, fmt.Errorf("get %s: %d part digests of %d bytes do not cover %d bytes: %w", key, len(want.SHA256), want.Size, size, ErrDigestMismatch)
	}
	nparts := len(want.SHA256)
	q := &partQueue{hi: nparts}
	sameObject := (&oneETag{key: key}).check
	g, gctx := errgroup.WithContext(ctx)
	bounds := func(i int) (off, n int64) {
		off = int64(i) * want.Size
		return off, min(want.Size, size-off)
	}
	// part receives part i from r, which is positioned at its start.
	part := func(r io.Reader, i int) error {
		off, n := bounds(i)
		h := startHasher(g, func(h hash.Hash) error {
			if got := hex.EncodeToString(h.Sum(nil)); got != want.SHA256[i] {
				return fmt.Errorf("get %s: part %d (bytes %d-%d) has SHA-256 %s, want %s: %w", key, i+1, off, off+n-1, got, want.SHA256[i], ErrDigestMismatch)
			}
			return nil
		})
		defer close(h.ch)
		if _, err := receive(gctx, key, r, f, off, n, h); err != nil {
			return err
		}
		if i == nparts-1 {
			if err := expectEOF(key, r, size); err != nil {
				return err
			}
		}
		h.done = true
		return nil
	}
	tail := func() error {
		for {
			i, ok := q.back()
			if !ok {
				return nil
			}
			err := func() error {
				release, err := t.slot(gctx)
				if err != nil {
					return fmt.Errorf("get %s: %w", key, err)
				}
				defer release()
				off, n := bounds(i)
				end := off + n
				if i == nparts-1 {
					end = -1 // read to the end, so a longer object shows
				}
				rc, e, err := t.getRange(gctx, key, off, end)
				if err != nil {
					return err
				}
				defer rc.Close() //nolint:errcheck // a body read to its end or given up on: its Close error says nothing the read did not
				if err := sameObject(e); err != nil {
					return err
				}
				if err := part(rc, i); err != nil {
					return err
				}
				if end >= 0 {
					return expectEOF(key, rc, size)
				}
				return nil
			}()
			if err != nil {
				return err
			}
		}
	}
	g.Go(func() error {
		release, err := t.slot(gctx)
		if err != nil {
			return fmt.Errorf("get %s: %w", key, err)
		}
		defer release()
		rc, e, err := t.getRange(gctx, key, 0, -1)
		if err != nil {
			return err
		}
		// Closing the body early (the ranged streams took the rest)
		// drops the connection; versitygw closes it after every GET anyway.
		defer rc.Close() //nolint:errcheck // a body read to its end or given up on: its Close error says nothing the read did not
		if err := sameObject(e); err != nil {
			return err
		}
		cr := &shortReads{r: rc}
		joined := false
		for {
			i, ok := q.front()
			if !ok {
				return nil
			}
			if err := part(cr, i); err != nil {
				return err
			}
			if !joined && q.left() > 0 && joinRanged(cr.reads, cr.short) {
				joined = true
				for range min(t.threads()-1, q.left()) {
					g.Go(tail)
				}
			}
			cr.reads, cr.short = 0, 0
		}
	})
	if err := g.Wait(); err != nil {
		return Object{}, err
	}
	return Object{Key: key, Size: size, Parts: want}, nil
}

// downloadOne fetches an object of one part (or of unknown size) as one
// stream into two chunks in turn: while one is hashed (hashStream, where it
// may be paired with another stream's), the next is received and written.
func downloadOne(ctx context.Context, t transferer, key string, f *os.File, size int64) (Object, error) {
	release, err := t.slot(ctx)
	if err != nil {
		return Object{}, err
	}
	defer release()
	rc, _, err := t.getRange(ctx, key, 0, -1)
	if err != nil {
		return Object{}, err
	}
	defer rc.Close() //nolint:errcheck // a body read to its end or given up on: its Close error says nothing the read did not
	var bufs [2]*[]byte
	for i := range bufs {
		if bufs[i], err = getChunk(ctx); err != nil {
			return Object{}, fmt.Errorf("get %s: %w", key, err)
		}
		defer putChunk(bufs[i])
	}
	h := newHashStream()
	defer h.wait() // before the chunks go back to the pool
	var w int64
	for i := 0; ; i ^= 1 {
		buf := *bufs[i]
		n, rerr := io.ReadFull(rc, buf)
		if n > 0 {
			if size >= 0 && w+int64(n) > size {
				return Object{}, fmt.Errorf("get %s: more than the expected %d bytes: %w", key, size, ErrSizeMismatch)
			}
			if _, err := f.WriteAt(buf[:n], w); err != nil {
				return Object{}, fmt.Errorf("get %s: %w", key, err)
			}
			h.submit(buf[:n])
			w += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return Object{}, fmt.Errorf("get %s: %w", key, rerr)
		}
	}
	if size >= 0 && w != size {
		return Object{}, fmt.Errorf("get %s: %d bytes short of the expected %d: %w", key, size-w, size, ErrSizeMismatch)
	}
	return Object{Key: key, Size: w, SHA256: hex.EncodeToString(h.sum())}, nil
}
