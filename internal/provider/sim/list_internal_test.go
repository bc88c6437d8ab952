package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// TestBriefColumnsMatchInstanceRow holds every brief column to the full
// row, in every state a listing can show, so a brief page carries exactly
// what the full page would for those columns.
func TestBriefColumnsMatchInstanceRow(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Config{Clock: clk, DisableSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids, err := s.SeedInstances(3, func(i int) string { return []string{"", "a-label", "b"}[i] })
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ins []*instance
	for _, id := range ids {
		ins = append(ins, s.instances[id])
	}
	ins[1].setState(clk.Now(), "stopped", "stopped", "stopped", "stopped", "")
	ins[2].Actual, ins[2].Intended = "", "running" // scheduling
	for _, in := range ins {
		row := s.instanceRow(in)
		for col, f := range briefColumns {
			want, ok := row[col]
			if !ok {
				t.Fatalf("briefColumns has %q, which instanceRow does not render", col)
			}
			if got := f(in); !reflect.DeepEqual(got, want) {
				t.Fatalf("instance %d: %s = %#v, the row says %#v", in.ID, col, got, want)
			}
		}
	}
}
