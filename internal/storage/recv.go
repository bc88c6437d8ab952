package storage

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/vastrun/vastrun/internal/sha256x2"
)

// Receiving a download (docs/performance.md, "How the transfers work").
//
// A stream's goroutine only moves bytes: it reads a chunk from the socket
// into a pooled buffer, writes it to the file at its offset and hands it
// to its stream's hasher (streamHasher), a goroutine that passes the
// chunks on to the hashing pool (hashpool.go) while the stream goes on
// receiving. The hasher holds every other part's chunks until the next
// part's arrive and hands them over two by two, one of each part, so even
// a lone stream is hashed in pairs; other streams' and files' chunks pair
// in the pool. A part's digest is compared when its last chunk is hashed.
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
// starved CPU makes any stream look slow. A server on this machine
// (sameHost: a loopback endpoint) never gets ranged streams: over
// loopback the reads come back short whenever the client is the faster
// side, yet there is no round trip or window for more connections to lift,
// and the extra streams' work lands on the CPUs the restore runs on (a
// 256 MiB restore from versitygw on two cores: 0.25 s alone against
// 0.28 s joined, the server's CPU 0.07 s against 0.12 s). A variable so
// tests can force either path.
var joinRanged = func(sameHost bool, reads, short int) bool { return !sameHost && short*4 > reads }

// The chunks are carved from one slab of maxChunks × chunkSize, made on
// first use and kept for the process (chunkSlab: on Linux, mapped with
// transparent huge pages where the kernel allows them). A pool of heap
// buffers faulted every fresh 4 KiB page in on the socket copy, and the
// collector dropped and the heap re-grew them: page faults were 6–9% of a
// restore's CPU in a VM (docs/performance.md). Free chunks are a stack, so
// a small restore keeps reusing the same few, still in cache.
var (
	chunkSem  = semaphore.NewWeighted(maxChunks)
	chunkOnce sync.Once
	chunkMu   sync.Mutex
	chunkFree []*[]byte
)

func initChunks() {
	slab := chunkSlab(maxChunks * chunkSize)
	chunkFree = make([]*[]byte, maxChunks)
	for i := range chunkFree {
		b := slab[i*chunkSize : (i+1)*chunkSize : (i+1)*chunkSize]
		chunkFree[maxChunks-1-i] = &b // the slab's start on top
	}
}

// getChunks takes n chunks at once (all or none, so two takers cannot each
// hold part of what they need while the pool runs dry).
func getChunks(ctx context.Context, n int) ([]*[]byte, error) {
	if err := chunkSem.Acquire(ctx, int64(n)); err != nil {
		return nil, err
	}
	chunkOnce.Do(initChunks)
	out := make([]*[]byte, n)
	chunkMu.Lock()
	for i := range out {
		out[i] = chunkFree[len(chunkFree)-1]
		chunkFree = chunkFree[:len(chunkFree)-1]
	}
	chunkMu.Unlock()
	return out, nil
}

func getChunk(ctx context.Context) (*[]byte, error) {
	if err := chunkSem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	chunkOnce.Do(initChunks)
	chunkMu.Lock()
	b := chunkFree[len(chunkFree)-1]
	chunkFree = chunkFree[:len(chunkFree)-1]
	chunkMu.Unlock()
	return b, nil
}

func putChunk(b *[]byte) {
	*b = (*b)[:chunkSize]
	chunkMu.Lock()
	chunkFree = append(chunkFree, b)
	chunkMu.Unlock()
	chunkSem.Release(1)
}

// recvChunk is a received piece on its way to its part's digest.
type recvChunk struct {
	buf *[]byte
	n   int
}

// Pairing a stream's own parts. A stream receives its parts one after
// another, so a part's chunks, hashed as they arrive, rarely meet another
// digest's in the pool: the one stream of a single large file (the head
// stream on a fast link) was hashed almost wholly alone, at about half the
// paired rate (sha256x2). So a stream holds one whole part's chunks
// unhashed (they are already written to the file) until the next part
// arrives, and hashes each of the next part's chunks together with the held
// part's chunk in the same place: every pair of parts costs little more
// than one. A held part is hashed alone if no partner comes (the stream's
// last part, a failure). Held chunks count against holdBudget, taken for a
// whole part at its start or not at all (the part is then hashed as it
// arrives), so at most half the chunk pool is ever held and the other half
// always moves.
const holdBudget = maxChunks / 2

var (
	holdSem   = semaphore.NewWeighted(holdBudget)
	heldParts atomic.Int64 // parts ever held, for tests
)

// partCheck is a part on its way through a streamHasher: its digest, the
// check its sum gets once every byte arrived, and the chunks it holds.
type partCheck struct {
	d        *sha256x2.Digest
	check    func(sum []byte) error
	size     int64
	holdable bool // the stream may bring another part after it
	hold     bool // its chunks wait for the next part's (budget taken)
	budget   int64
	held     []recvChunk
}

// hashEvent is one message from a stream to its hasher: a part starts
// (part), a chunk of it arrived (chunk), or it ended (end; complete when
// every byte arrived).
type hashEvent struct {
	part     *partCheck
	chunk    recvChunk
	end      bool
	complete bool
}

// streamHasher verifies, on its own goroutine, the parts one stream
// receives, in order, with one job at a time in the hashing pool.
type streamHasher struct {
	g    *errgroup.Group
	ch   chan hashEvent
	job  hashJob
	busy bool
	bufs [2]*[]byte // the chunks the job in the pool reads: back to the pool once it is done
}

// startStreamHasher starts a stream's hasher on g. Its error is the first
// check that failed; a part that did not end complete is not checked (the
// receiver's own error is the one reported).
func startStreamHasher(g *errgroup.Group) *streamHasher {
	s := &streamHasher{g: g, ch: make(chan hashEvent, maxChunks), job: hashJob{done: make(chan struct{}, 1)}}
	g.Go(s.run)
	return s
}

// begin starts a part of n bytes, whose digest check gets; holdable: the
// stream may bring another part after it.
func (s *streamHasher) begin(n int64, check func(sum []byte) error, holdable bool) {
	s.ch <- hashEvent{part: &partCheck{d: sha256x2.New(), check: check, size: n, holdable: holdable}}
}

// end ends the current part; complete: every byte of it arrived.
func (s *streamHasher) end(complete bool) { s.ch <- hashEvent{end: true, complete: complete} }

// close ends the stream (after the last end, or after a failure).
func (s *streamHasher) close() { close(s.ch) }

func (s *streamHasher) run() (err error) {
	var held, cur *partCheck
	closed := false
	defer func() {
		s.wait()
		if cur != nil {
			s.drop(cur)
		}
		if held != nil {
			s.drop(held)
		}
		if !closed {
			// Returning early (an error cancels the download): until
			// the stream stops, its chunks go straight back to the pool
			// so that it never waits on this hasher.
			s.g.Go(func() error {
				for ev := range s.ch {
					if ev.chunk.buf != nil {
						putChunk(ev.chunk.buf)
					}
				}
				return nil
			})
		}
	}()
	for ev := range s.ch {
		switch {
		case ev.part != nil:
			cur = ev.part
			if held == nil && cur.holdable && sha256x2.Interleaved() {
				// receive fills every chunk of a part but its last.
				cur.budget = (cur.size + chunkSize - 1) / chunkSize
				cur.hold = cur.budget <= holdBudget && holdSem.TryAcquire(cur.budget)
				if cur.hold {
					heldParts.Add(1)
				}
			}
		case ev.end && !ev.complete:
			// The stream failed inside cur; its own error is the one
			// reported, and nothing after it will be checked.
			return nil
		case ev.end && cur.hold:
			held, cur = cur, nil
		case ev.end:
			if held != nil {
				if err := s.finish(held); err != nil {
					return err
				}
				held = nil
			}
			s.wait()
			if err := cur.check(cur.d.Sum(nil)); err != nil {
				return err
			}
			s.drop(cur)
			cur = nil
		case cur.hold:
			cur.held = append(cur.held, ev.chunk)
		case held != nil && len(held.held) > 0:
			h := held.held[0]
			held.held = held.held[1:]
			s.submit(held.d, h, cur.d, ev.chunk)
		default:
			s.submit(cur.d, ev.chunk, nil, recvChunk{})
		}
	}
	closed = true
	if held != nil { // the stream's last part, which nothing followed
		return s.finish(held)
	}
	return nil
}

// finish hashes what p still holds, alone, and checks p's digest.
func (s *streamHasher) finish(p *partCheck) error {
	for len(p.held) > 0 {
		c := p.held[0]
		p.held = p.held[1:]
		s.submit(p.d, c, nil, recvChunk{})
	}
	s.wait()
	s.drop(p)
	return p.check(p.d.Sum(nil))
}

// drop gives back what p holds: its unhashed chunks and its budget.
func (s *streamHasher) drop(p *partCheck) {
	for _, c := range p.held {
		putChunk(c.buf)
	}
	p.held = nil
	if p.budget > 0 && p.hold {
		holdSem.Release(p.budget)
	}
	p.hold, p.budget = false, 0
}

// submit hashes a's chunk into da and, when db is not nil, b's into db,
// the two together, after the job before it; the chunks go back to the
// pool once hashed.
func (s *streamHasher) submit(da *sha256x2.Digest, a recvChunk, db *sha256x2.Digest, b recvChunk) {
	s.wait()
	pa := (*a.buf)[:a.n]
	var pb []byte
	if db != nil {
		pb = (*b.buf)[:b.n]
	}
	if !sha256x2.Interleaved() {
		da.Write(pa)
		if db != nil {
			db.Write(pb)
			putChunk(b.buf)
		}
		putChunk(a.buf)
		return
	}
	hashWorkersOnce.Do(startHashWorkers)
	s.job.d, s.job.p, s.job.d2, s.job.p2 = da, pa, db, pb
	s.bufs = [2]*[]byte{a.buf, b.buf}
	s.busy = true
	hashJobs <- &s.job
}

// wait returns when the job in the pool is done, and gives its chunks back.
func (s *streamHasher) wait() {
	if !s.busy {
		return
	}
	<-s.job.done
	s.busy = false
	s.job.p, s.job.p2, s.job.d2 = nil, nil, nil
	for i, b := range s.bufs {
		if b != nil {
			putChunk(b)
		}
		s.bufs[i] = nil
	}
}

// receive copies n bytes (n < 0: up to EOF) from r into f at off, feeding
// the chunks to h. It returns the bytes received; a short stream is
// ErrSizeMismatch.
func receive(ctx context.Context, key string, r io.Reader, f *os.File, off, n int64, h *streamHasher) (int64, error) {
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
			h.ch <- hashEvent{chunk: recvChunk{bp, m}}
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
// its reads come back short (joinRanged), ranged streams join it in the
// store's free request slots, taking parts from the end, until they meet.
// Each stream's parts are verified by a hasher of its own, which pairs them
// (streamHasher), so no stream waits on another's order.
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
	// part receives part i from r, which is positioned at its start, and
	// hands it to its stream's hasher h.
	part := func(r io.Reader, i int, h *streamHasher) (err error) {
		off, n := bounds(i)
		h.begin(n, func(sum []byte) error {
			if got := hex.EncodeToString(sum); got != want.SHA256[i] {
				return fmt.Errorf("get %s: part %d (bytes %d-%d) has SHA-256 %s, want %s: %w", key, i+1, off, off+n-1, got, want.SHA256[i], ErrDigestMismatch)
			}
			return nil
		}, i < nparts-1 && q.left() > 0)
		defer func() { h.end(err == nil) }()
		if _, err := receive(gctx, key, r, f, off, n, h); err != nil {
			return err
		}
		if i == nparts-1 {
			return expectEOF(key, r, size)
		}
		return nil
	}
	tail := func() error {
		h := startStreamHasher(g)
		defer h.close()
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
				if err := part(rc, i, h); err != nil {
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
		h := startStreamHasher(g)
		defer h.close()
		cr := &shortReads{r: rc}
		joined := false
		for {
			i, ok := q.front()
			if !ok {
				return nil
			}
			if err := part(cr, i, h); err != nil {
				return err
			}
			if !joined && q.left() > 0 && joinRanged(t.sameHost(), cr.reads, cr.short) {
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
	bufs, err := getChunks(ctx, 2)
	if err != nil {
		return Object{}, fmt.Errorf("get %s: %w", key, err)
	}
	for _, b := range bufs {
		defer putChunk(b)
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
