package sim

import (
	"encoding/json"
	"io"
	"reflect"
	"sort"
	"strings"
	"testing"
)

var rowCtxs = []rowCtx{{8, false}, {8, true}, {0, false}, {123.5, true}}

// TestOfferFieldsMatchOfferRow holds every single-field accessor to the row
// the wire carries, so a search filters and sorts on exactly what it sends.
func TestOfferFieldsMatchOfferRow(t *testing.T) {
	offers := generateCatalog(7, 400, 1.7e9)
	offers[3].RentedBy = 42
	for _, rc := range rowCtxs {
		for _, o := range offers {
			row := offerRow(o, rc.storage, rc.bid)
			for field, f := range offerFields {
				want, ok := row[field]
				if !ok {
					t.Fatalf("offerFields has %q, which offerRow does not render", field)
				}
				if got := f(o, rc); !reflect.DeepEqual(got, want) {
					t.Fatalf("offer %d %+v: field %s = %#v, the row says %#v", o.ID, rc, field, got, want)
				}
			}
		}
	}
}

// fullRenderSearch is the reference: render every offer, then filter and
// sort the rows (what search did before it read single fields).
func fullRenderSearch(offers []*offer, q map[string]any) ([]map[string]any, error) {
	_, rc, err := selectOffers(nil, q) // parse the controls alone
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, o := range offers {
		row := offerRow(o, rc.storage, rc.bid)
		ok, err := matches(func(f string) (any, bool) { v, ok := row[f]; return v, ok }, q)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, row)
		}
	}
	order, err := parseOrder(q["order"])
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		for _, o := range order {
			if c := compare(out[i][o.field], out[j][o.field]); c != 0 {
				return (c < 0) != o.desc
			}
		}
		return false
	})
	limit := 64
	if v, ok := q["limit"]; ok {
		f, _ := toFloat(v)
		limit = int(f)
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func TestSearchAgreesWithFullRender(t *testing.T) {
	offers := generateCatalog(11, 2000, 1.7e9)
	offers[5].RentedBy = 9
	queries := []string{
		`{}`,
		`{"limit": 0}`,
		`{"verified": {"eq": true}, "rentable": {"eq": true}, "external": {"eq": false}, "num_gpus": {"gte": 2}, "order": [["dph_total", "asc"]], "limit": 500}`,
		`{"gpu_name": {"in": ["RTX 4090", "h100 sxm"]}, "cuda_max_good": {"gte": 12.2}, "order": [["score", "desc"], ["id", "asc"]]}`,
		`{"type": "bid", "allocated_storage": 50, "order": [["min_bid", "asc"]], "limit": 10000}`,
		`{"datacenter": {"eq": true}, "geolocation": {"eq": "US"}, "order": [["dlperf_per_dphtotal", "desc"]]}`,
		`{"driver_version": {"gte": "535.0.0"}, "disk_bw": {"gt": 1000}, "order": [["geolocode", "asc"]], "limit": 100}`,
		`{"pcie_bw": {"gt": 1}, "mobo_name": {"neq": "x"}, "limit": 30}`,
		`{"no_such_field": {"eq": 1}}`,
		`{"num_gpus": {"between": 1}}`,
		`{"order": "score"}`,
		`{"type": "spot"}`,
	}
	for _, qs := range queries {
		var q map[string]any
		if err := json.Unmarshal([]byte(qs), &q); err != nil {
			t.Fatal(err)
		}
		want, wantErr := fullRenderSearch(offers, q)
		got, gotErr := search(offers, q)
		if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%s: error %v, the full render says %v", qs, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %d rows differ from the full render's %d", qs, len(got), len(want))
		}
		res, err := searchSnapshot(offers, q)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%s: searchSnapshot error %v", qs, err)
		}
		if err != nil {
			continue
		}
		if want == nil {
			want = []map[string]any{}
		}
		wantBody, _ := json.Marshal(map[string]any{"offers": want})
		var body strings.Builder
		if err := res.writeTo(&body); err != nil {
			t.Fatal(err)
		}
		if body.String() != string(wantBody) {
			t.Fatalf("%s: the response body differs from encoding the rows", qs)
		}
	}
}

// BenchmarkSearch10k: one broad search over 10,000 offers returning 20
// rows, as `vastrun offers` asks.
func BenchmarkSearch10k(b *testing.B) {
	offers := generateCatalog(1, 10000, 1.7e9)
	var q map[string]any
	json.Unmarshal([]byte(`{"verified": {"eq": true}, "rentable": {"eq": true}, "external": {"eq": false}, "num_gpus": {"gte": 1}, "order": [["score", "desc"]], "limit": 20}`), &q)
	b.ReportAllocs()
	for b.Loop() {
		res, err := searchSnapshot(offers, q)
		if err != nil {
			b.Fatal(err)
		}
		res.writeTo(io.Discard)
	}
}

func BenchmarkSearch10kFullRender(b *testing.B) {
	offers := generateCatalog(1, 10000, 1.7e9)
	var q map[string]any
	json.Unmarshal([]byte(`{"verified": {"eq": true}, "rentable": {"eq": true}, "external": {"eq": false}, "num_gpus": {"gte": 1}, "order": [["score", "desc"]], "limit": 20}`), &q)
	b.ReportAllocs()
	for b.Loop() {
		rows, err := fullRenderSearch(offers, q)
		if err != nil {
			b.Fatal(err)
		}
		json.Marshal(map[string]any{"offers": rows})
	}
}
