package lifecycle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// callCounter counts the API calls that reach the simulator, by method
// and route kind.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			kind := r.Method + " " + r.URL.Path
			switch {
			case strings.HasPrefix(r.URL.Path, "/api/v0/instances/") && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 3:
				kind = r.Method + " one"
			case r.URL.Path == "/api/v1/instances/":
				kind = "list page"
			}
			c.mu.Lock()
			c.n[kind]++
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

func (c *callCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

// confirmRig is a Confirmer on the real client against a simulator whose
// account holds 1,000 instances: 100 labelled "sweep-me", 90 with a label
// of their own, the rest "other".
func confirmRig(t *testing.T) (lifecycle.Confirmer, *sim.Server, *callCounter, []int64) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s, err := sim.New(sim.Config{Clock: clk, DisableSSH: true, Offers: 1100})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.SeedInstances(1000, func(i int) string {
		switch {
		case i%10 == 3:
			return "sweep-me"
		case i < 100:
			return fmt.Sprintf("run-%d", i) // one label each, as reap finds them
		}
		return "other"
	})
	if err != nil {
		t.Fatal(err)
	}
	cc := &callCounter{n: map[string]int{}}
	srv := httptest.NewServer(cc.wrap(s))
	t.Cleanup(func() { srv.Close(); s.Close() })
	raw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: autoClock{clk}})
	client := retry.Wrap(raw, retry.Policy{Clock: autoClock{clk}})
	return lifecycle.Confirmer{Market: client, Clock: autoClock{clk}}, s, cc, ids
}

func liveWith(s *sim.Server, label string) int {
	n := 0
	for _, in := range s.Snapshot().Live {
		if in.Label == label {
			n++
		}
	}
	return n
}

// TestSweepLabelInFewCalls: sweeping a label that 100 of 1,000 instances
// carry destroys them in bulk and confirms them with the next complete
// listing: a handful of calls (4 pages, 2 bulk destroys of at most 64 ids,
// 1 clean page), not a destroy, a show and a listing per instance.
func TestSweepLabelInFewCalls(t *testing.T) {
	c, s, cc, _ := confirmRig(t)
	ids, err := c.SweepLabel(context.Background(), "sweep-me", c.Clock.Now().Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 100 || liveWith(s, "sweep-me") != 0 || len(s.Snapshot().Live) != 900 {
		t.Fatalf("confirmed %d, %d left with the label, %d live", len(ids), liveWith(s, "sweep-me"), len(s.Snapshot().Live))
	}
	if n := cc.total(); n > 8 || cc.n["DELETE /api/v0/instances/"] != 2 {
		t.Fatalf("%d calls: %v", n, cc.n)
	}
}

// TestDestroyConfirmAllInFewCalls: reap's and down --instance's path.
// Instances of 90 labels are destroyed in bulk and confirmed by complete
// listings of their labels (three: 32 labels a filter); only an id without
// a label is read by id.
func TestDestroyConfirmAllInFewCalls(t *testing.T) {
	c, s, cc, seeded := confirmRig(t)
	targets := map[provider.InstanceID]string{}
	for i, id := range seeded[:100] {
		if i%10 != 3 { // 90 labels of their own
			targets[provider.InstanceID(id)] = fmt.Sprintf("run-%d", i)
		}
	}
	targets[30599999] = "" // not the account's: no label, read by id
	vias, fails := c.DestroyConfirmAll(context.Background(), targets, c.Clock.Now().Add(time.Minute))
	if len(fails) != 0 || len(vias) != 91 || len(s.Snapshot().Live) != 910 {
		t.Fatalf("confirmed %d, failed %v, %d live", len(vias), fails, len(s.Snapshot().Live))
	}
	if v := vias[provider.InstanceID(seeded[0])]; len(v) != 1 || v[0] != "label_listing" {
		t.Fatalf("evidence %v", v)
	}
	if v := vias[30599999]; len(v) != 1 || v[0] != "show" {
		t.Fatalf("unknown id's evidence %v", v)
	}
	if n := cc.total(); n != 6 || cc.n["DELETE /api/v0/instances/"] != 2 || cc.n["GET one"] != 1 || cc.n["list page"] != 3 {
		t.Fatalf("%d calls: %v", n, cc.n)
	}
}
