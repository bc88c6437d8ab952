package sim

import (
	"encoding/json"
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

// A brief row is written straight to JSON: it must read byte for byte as
// json.Marshal writes the map of those columns of instanceRow, for any
// label (escapes included) and any choice of brief columns.
func TestBriefRowIsTheMapsJSON(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Config{Clock: clk, DisableSSH: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	labels := []string{"", "vastrun-a-b", `q"uo\te`, "<&>", "é ü", "tab\tnl\n", "\u2028"}
	ids, err := s.SeedInstances(len(labels), func(i int) string { return labels[i] })
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[ids[1]].Actual = ""
	sets := [][]string{{"id"}, {"label"}, {"actual_status", "cur_state", "id", "intended_status", "label", "next_state"}, {"label", "next_state"}}
	for _, id := range ids {
		in := s.instances[id]
		row := s.instanceRow(in)
		for _, cols := range sets {
			kept := map[string]any{}
			for _, c := range cols {
				kept[c] = row[c]
			}
			want, err := json.Marshal(kept)
			if err != nil {
				t.Fatal(err)
			}
			got := briefRow(in, cols)
			if !json.Valid(got) || string(got) != string(want) {
				t.Fatalf("instance %d, %v: briefRow %s, json.Marshal %s", id, cols, got, want)
			}
		}
	}
	if briefRow(s.instances[ids[0]], []string{"id", "gpu_name"}) != nil || briefRow(s.instances[ids[0]], []string{"id", "id"}) != nil {
		t.Fatal("briefRow must decline a column it does not render, and a repeated one")
	}
}

// listPage stands for the map a page was: the same JSON, byte for byte.
func TestListPageIsTheMapsJSON(t *testing.T) {
	rows := []any{json.RawMessage(`{"id":1}`), map[string]any{"id": 2, "label": nil}}
	for _, next := range []any{nil, "aWQ6MQ"} {
		got, err := json.Marshal(listPage{Success: true, InstancesFound: 2, TotalInstances: 7, LabelCounts: map[string]int{"b": 1, "a": 2}, NextToken: next, Instances: rows})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(map[string]any{"success": true, "instances_found": 2, "total_instances": 7,
			"label_counts": map[string]int{"b": 1, "a": 2}, "next_token": next, "instances": rows})
		if string(got) != string(want) {
			t.Fatalf("listPage %s, map %s", got, want)
		}
	}
}
