package storage

import (
	"runtime"
	"sync"

	"github.com/vastrun/vastrun/internal/sha256x2"
)

// Hashing a restore (docs/performance.md, "How the transfers work").
//
// One core's SHA-256 is bound by the latency of the SHA instructions, not
// their throughput: two independent messages hashed together, their rounds
// interleaved, cost little more than one (package sha256x2). A restore
// always has several digests to compute at once (files, parts), so every
// chunk it verifies goes to one process-wide pool of hashing workers, and
// a worker that finds a second chunk waiting, necessarily of another
// digest, hashes the two together.
//
// Pairs form only where chunks queue, so the pool has half as many workers
// as there are processors (interleaved, each hashes about as much as two
// did), and a worker that finds no second chunk yields once before hashing
// its chunk alone, which lets a stream about to submit catch it: in a
// 64 × 4 MiB restore on two cores 91% of the chunks were hashed in pairs
// (35% without the yield, 15% with a worker per processor). A stream of
// several parts pairs its own parts and submits them as one job
// (streamHasher, recv.go): a lone stream meets no other digest in the
// pool. A digest has at most one chunk in the pool (hashStream,
// streamHasher), so its chunks are hashed in order, and its stream reads
// the next chunk meanwhile. Without the
// interleaved code (no SHA extensions, or not amd64) a chunk is hashed on
// its stream's goroutine.

type hashJob struct {
	d *sha256x2.Digest
	p []byte
	// d2, when set, is a second digest to hash p2 into together with p:
	// a pair the submitter made itself (a stream's two parts).
	d2   *sha256x2.Digest
	p2   []byte
	done chan struct{} // one value per job; capacity 1, so a worker never waits on it
}

var (
	hashWorkersOnce sync.Once
	hashJobs        chan *hashJob
)

func startHashWorkers() {
	hashJobs = make(chan *hashJob, maxChunks)
	for range max(1, runtime.GOMAXPROCS(0)/2) {
		go hashWorker()
	}
}

// hashWorker hashes jobs, two at a time whenever a second one is waiting.
func hashWorker() {
	for j := range hashJobs {
		if j.d2 != nil {
			sha256x2.Write2(j.d, j.p, j.d2, j.p2)
			j.done <- struct{}{}
			continue
		}
		k := nextJob()
		if k == nil {
			runtime.Gosched()
			k = nextJob()
		}
		switch {
		case k == nil:
			j.d.Write(j.p)
		case k.d2 != nil: // already a pair: j goes alone
			sha256x2.Write2(k.d, k.p, k.d2, k.p2)
			k.done <- struct{}{}
			j.d.Write(j.p)
		default:
			sha256x2.Write2(j.d, j.p, k.d, k.p)
			k.done <- struct{}{}
		}
		j.done <- struct{}{}
	}
}

// nextJob returns a waiting job, or nil.
func nextJob() *hashJob {
	select {
	case k := <-hashJobs:
		return k
	default:
		return nil
	}
}

// hashStream hashes one stream's chunks in order, with at most one chunk
// in the pool: submit waits for the previous chunk's hash before handing
// on the next, so the caller may reuse a chunk's buffer once the chunk
// after it was submitted, or after wait.
type hashStream struct {
	d    *sha256x2.Digest
	job  hashJob
	busy bool
}

func newHashStream() *hashStream {
	return &hashStream{d: sha256x2.New(), job: hashJob{done: make(chan struct{}, 1)}}
}

// submit hashes p after every chunk submitted before it. p must not change
// until the next submit or wait returns.
func (s *hashStream) submit(p []byte) {
	s.wait()
	if !sha256x2.Interleaved() {
		s.d.Write(p)
		return
	}
	hashWorkersOnce.Do(startHashWorkers)
	s.job.d, s.job.p, s.busy = s.d, p, true
	hashJobs <- &s.job
}

// wait returns when every submitted chunk is hashed.
func (s *hashStream) wait() {
	if s.busy {
		<-s.job.done
		s.busy = false
		s.job.p = nil
	}
}

// sum waits for the submitted chunks and returns the digest.
func (s *hashStream) sum() []byte {
	s.wait()
	return s.d.Sum(nil)
}
