package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

// bulkFake is a market whose single destroys can be held (block) and whose
// bulk destroy answers bulkErr; it records every destroy call.
type bulkFake struct {
	provider.Market // nil: only the destroys are called
	block           chan struct{}
	entered         chan provider.InstanceID
	bulkErr         error

	mu     sync.Mutex
	single []provider.InstanceID
	bulk   [][]provider.InstanceID
}

func (f *bulkFake) DestroyInstance(ctx context.Context, id provider.InstanceID) error {
	f.mu.Lock()
	f.single = append(f.single, id)
	f.mu.Unlock()
	if f.entered != nil {
		f.entered <- id
		<-f.block
	}
	return nil
}

func (f *bulkFake) DestroyInstances(ctx context.Context, ids []provider.InstanceID) error {
	f.mu.Lock()
	f.bulk = append(f.bulk, slices.Clone(ids))
	f.mu.Unlock()
	return f.bulkErr
}

// queued waits, without sleeping, until n destroys wait in g.
func queued(g *destroyGroup, n int) {
	for {
		g.mu.Lock()
		l := len(g.queue)
		g.mu.Unlock()
		if l == n {
			return
		}
		runtime.Gosched()
	}
}

// destroyTogether holds the first destroy (id 1) in flight, queues ids
// 2..n behind it, lets it end, and returns each id's answer.
func destroyTogether(t *testing.T, f *bulkFake, n int) map[provider.InstanceID]error {
	t.Helper()
	f.block, f.entered = make(chan struct{}), make(chan provider.InstanceID, 1)
	g := CoalesceDestroys(f).(*destroyGroup)
	errs := make(map[provider.InstanceID]error, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	destroy := func(id provider.InstanceID) {
		defer wg.Done()
		err := g.DestroyInstance(context.Background(), id)
		mu.Lock()
		errs[id] = err
		mu.Unlock()
	}
	wg.Add(1)
	go destroy(1)
	<-f.entered // the first is in flight, alone
	f.entered = nil
	for id := provider.InstanceID(2); id <= provider.InstanceID(n); id++ {
		wg.Add(1)
		go destroy(id)
	}
	queued(g, n-1)
	close(f.block)
	wg.Wait()
	if len(g.queue) != 0 || g.busy {
		t.Fatalf("group not idle after: queue %d, busy %v", len(g.queue), g.busy)
	}
	return errs
}

func TestCoalesceDestroysQueuedGoAsOneBulk(t *testing.T) {
	f := &bulkFake{}
	errs := destroyTogether(t, f, 5)
	for id, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", id, err)
		}
	}
	if len(errs) != 5 || !slices.Equal(f.single, []provider.InstanceID{1}) || len(f.bulk) != 1 {
		t.Fatalf("single %v, bulk %v", f.single, f.bulk)
	}
	got := slices.Sorted(slices.Values(f.bulk[0]))
	if !slices.Equal(got, []provider.InstanceID{2, 3, 4, 5}) {
		t.Fatalf("bulk ids %v", got)
	}
}

// More than provider.MaxBulkIDs queued go in as many bulk calls as chunks.
func TestCoalesceDestroysChunks(t *testing.T) {
	f := &bulkFake{}
	errs := destroyTogether(t, f, 1+provider.MaxBulkIDs+2)
	for id, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", id, err)
		}
	}
	// 66 queued: one bulk of 64, and a chunk of 2.
	if len(f.single) != 1 || len(f.bulk) != 2 || len(f.bulk[0]) != provider.MaxBulkIDs || len(f.bulk[1]) != 2 {
		t.Fatalf("single %v, bulk sizes %d", f.single, len(f.bulk))
	}
}

// A 404 for the bulk call means none of its ids is the account's: gone,
// success for each caller (its show confirms).
func TestCoalesceDestroysBulkNotFoundIsGone(t *testing.T) {
	f := &bulkFake{bulkErr: fmt.Errorf("destroy instances: %w", provider.ErrNotFound)}
	for id, err := range destroyTogether(t, f, 4) {
		if err != nil {
			t.Errorf("instance %d: %v", id, err)
		}
	}
	if len(f.single) != 1 || len(f.bulk) != 1 {
		t.Fatalf("single %v, bulk %v", f.single, f.bulk)
	}
}

// A bulk call that fails otherwise sends each caller's destroy on its own.
func TestCoalesceDestroysFallBackToSingles(t *testing.T) {
	f := &bulkFake{bulkErr: errors.New("500 internal error")}
	for id, err := range destroyTogether(t, f, 4) {
		if err != nil {
			t.Errorf("instance %d: %v", id, err)
		}
	}
	if got := slices.Sorted(slices.Values(f.single)); len(f.bulk) != 1 || !slices.Equal(got, []provider.InstanceID{1, 2, 3, 4}) {
		t.Fatalf("single %v, bulk %v", f.single, f.bulk)
	}
}

// An authentication failure goes to every caller of the bulk call, and
// nothing is sent again.
func TestCoalesceDestroysAuthToEach(t *testing.T) {
	f := &bulkFake{bulkErr: fmt.Errorf("destroy instances: %w", provider.ErrAuth)}
	errs := destroyTogether(t, f, 4)
	if errs[1] != nil {
		t.Errorf("the first, sent alone: %v", errs[1])
	}
	for id := provider.InstanceID(2); id <= 4; id++ {
		if !errors.Is(errs[id], provider.ErrAuth) {
			t.Errorf("instance %d: %v, want ErrAuth", id, errs[id])
		}
	}
	if len(f.single) != 1 || len(f.bulk) != 1 {
		t.Fatalf("single %v, bulk %v", f.single, f.bulk)
	}
}

// A caller whose context ends while it waits leaves the queue; the others
// still go together.
func TestCoalesceDestroysWaiterCancelled(t *testing.T) {
	f := &bulkFake{block: make(chan struct{}), entered: make(chan provider.InstanceID, 1)}
	g := CoalesceDestroys(f).(*destroyGroup)
	done := make(chan error, 4)
	go func() { done <- g.DestroyInstance(context.Background(), 1) }()
	<-f.entered
	f.entered = nil
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- g.DestroyInstance(ctx, 2) }()
	queued(g, 1)
	go func() { done <- g.DestroyInstance(context.Background(), 3) }()
	go func() { done <- g.DestroyInstance(context.Background(), 4) }()
	queued(g, 3)
	cancel()
	queued(g, 2)
	close(f.block)
	var cancelled int
	for range 4 {
		if err := <-done; errors.Is(err, context.Canceled) {
			cancelled++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if cancelled != 1 || len(f.bulk) != 1 || !slices.Equal(slices.Sorted(slices.Values(f.bulk[0])), []provider.InstanceID{3, 4}) {
		t.Fatalf("cancelled %d, single %v, bulk %v", cancelled, f.single, f.bulk)
	}
}

// The optional routes a run finds by type assertion stay exactly as the
// wrapped market has them; a market without a bulk destroy is returned
// as it is.
func TestCoalesceDestroysKeepsOptionalRoutes(t *testing.T) {
	type bidding struct {
		*bulkFake
		provider.BidChanger
	}
	m := CoalesceDestroys(bidding{bulkFake: &bulkFake{}})
	if _, ok := m.(provider.BidChanger); !ok {
		t.Error("BidChanger lost")
	}
	if _, ok := m.(provider.PriceIncreases); ok {
		t.Error("PriceIncreases offered where the market has none")
	}
	if _, ok := m.(BulkDestroyer); !ok {
		t.Error("bulk destroy lost")
	}
	plain := struct{ provider.Market }{}
	if got := CoalesceDestroys(plain); got != provider.Market(plain) {
		t.Error("a market without a bulk destroy was wrapped")
	}
}
