package sim

import (
	"reflect"
	"testing"
)

// The listing filters on filterRow, and shows instanceRow: they must value
// every filterable column alike, or a filter would disagree with the rows.
func TestFilterRowAgreesWithInstanceRow(t *testing.T) {
	s, err := New(Config{DisableSSH: true, Offers: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.SeedInstances(4, func(i int) string { return []string{"", "a", "b", ""}[i] }); err != nil {
		t.Fatal(err)
	}
	all := map[string]map[string]any{}
	for col := range listFilterable {
		all[col] = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[s.order[3]].Actual = "" // a contract without a container yet
	for _, id := range s.order {
		in := s.instances[id]
		full, cut := s.instanceRow(in), s.filterRow(in, all)
		for col := range listFilterable {
			if !reflect.DeepEqual(full[col], cut[col]) {
				t.Errorf("instance %d column %s: listed %#v, filtered on %#v", id, col, full[col], cut[col])
			}
		}
	}
}
