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

	listed      []provider.Instance
	listErr     error
	listEntered chan struct{}
	listBlock   chan struct{}

	mu     sync.Mutex
	single []provider.InstanceID
	bulk   [][]provider.InstanceID
	lists  [][]string
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

// ListInstances answers from listed, filtered on the labels, or listErr;
// the first call is held like the first destroy (listEntered, listBlock).
func (f *bulkFake) ListInstances(ctx context.Context, o provider.ListOptions) ([]provider.Instance, error) {
	f.mu.Lock()
	f.lists = append(f.lists, slices.Clone(o.Labels))
	f.mu.Unlock()
	if f.listEntered != nil {
		f.listEntered <- struct{}{}
		<-f.listBlock
	}
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []provider.Instance
	for _, in := range f.listed {
		if slices.Contains(o.Labels, in.Label) {
			out = append(out, in)
		}
	}
	return out, nil
}

func (f *bulkFake) DestroyInstances(ctx context.Context, ids []provider.InstanceID) error {
	f.mu.Lock()
	f.bulk = append(f.bulk, slices.Clone(ids))
	f.mu.Unlock()
	return f.bulkErr
}

// queued waits, without sleeping, until n calls wait in g.
func queued[R, A any](g *group[R, A], n int) {
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
	queued(&g.destroys, n-1)
	close(f.block)
	wg.Wait()
	if len(g.destroys.queue) != 0 || g.destroys.busy {
		t.Fatalf("group not idle after: queue %d, busy %v", len(g.destroys.queue), g.destroys.busy)
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
	queued(&g.destroys, 1)
	go func() { done <- g.DestroyInstance(context.Background(), 3) }()
	go func() { done <- g.DestroyInstance(context.Background(), 4) }()
	queued(&g.destroys, 3)
	cancel()
	queued(&g.destroys, 2)
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

// listTogether holds a first brief listing of label "first" in flight,
// queues the brief listings of labels behind it, lets it end, and returns
// each queued caller's answer, in the order of labels.
func listTogether(t *testing.T, f *bulkFake, labels ...string) ([][]provider.Instance, []error) {
	t.Helper()
	f.listEntered, f.listBlock = make(chan struct{}, 1), make(chan struct{})
	g := CoalesceDestroys(f).(*destroyGroup)
	lists := make([][]provider.Instance, len(labels))
	errs := make([]error, len(labels))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := g.ListInstances(context.Background(), provider.ListOptions{Labels: []string{"first"}, Brief: true}); err != nil && f.listErr == nil {
			t.Error(err)
		}
	}()
	<-f.listEntered
	f.listEntered = nil
	for i, l := range labels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = g.ListInstances(context.Background(), provider.ListOptions{Labels: []string{l}, Brief: true})
		}()
	}
	queued(&g.lists, len(labels))
	close(f.listBlock)
	wg.Wait()
	return lists, errs
}

// Brief listings of one label queued together go as one listing of their
// labels, each caller answered with its own label's instances.
func TestCoalesceListingsSplitPerLabel(t *testing.T) {
	f := &bulkFake{listed: []provider.Instance{{ID: 1, Label: "a"}, {ID: 2, Label: "b"}, {ID: 3, Label: "b"}, {ID: 4, Label: "other"}}}
	lists, errs := listTogether(t, f, "a", "b", "c", "b")
	for i, err := range errs {
		if err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
	}
	ids := func(l []provider.Instance) (out []provider.InstanceID) {
		for _, in := range l {
			out = append(out, in.ID)
		}
		return out
	}
	if !slices.Equal(ids(lists[0]), []provider.InstanceID{1}) || !slices.Equal(ids(lists[1]), []provider.InstanceID{2, 3}) ||
		len(lists[2]) != 0 || !slices.Equal(ids(lists[3]), []provider.InstanceID{2, 3}) {
		t.Fatalf("answers %v", lists)
	}
	if len(f.lists) != 2 || !slices.Equal(slices.Sorted(slices.Values(f.lists[1])), []string{"a", "b", "c"}) {
		t.Fatalf("listings sent %v", f.lists)
	}
}

// A grouped listing that fails fails for each of its callers: none is
// answered as if its label were clean.
func TestCoalesceListingsFailureToEach(t *testing.T) {
	f := &bulkFake{listErr: fmt.Errorf("list instances: %w", provider.ErrIncompleteListing)}
	lists, errs := listTogether(t, f, "a", "b", "c")
	for i, err := range errs {
		if !errors.Is(err, provider.ErrIncompleteListing) || lists[i] != nil {
			t.Fatalf("listing %d: %v %v", i, lists[i], err)
		}
	}
	if len(f.lists) != 2 {
		t.Fatalf("listings sent %v", f.lists)
	}
}

// Listings that are not one label's brief listing pass through.
func TestCoalesceListingsOthersPassThrough(t *testing.T) {
	f := &bulkFake{listed: []provider.Instance{{ID: 1, Label: "a"}, {ID: 2, Label: "b"}}}
	g := CoalesceDestroys(f)
	got, err := g.ListInstances(context.Background(), provider.ListOptions{Labels: []string{"a", "b"}, Brief: true})
	if err != nil || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := g.ListInstances(context.Background(), provider.ListOptions{Labels: []string{"a"}}); err != nil || len(f.lists) != 2 {
		t.Fatalf("%v %v", f.lists, err)
	}
}
