package vast

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

const defaults = `"verified":{"eq":true},"external":{"eq":false},"rentable":{"eq":true},"rented":{"eq":false}`
const tail = `"order":[["score","desc"]],"type":"on-demand","allocated_storage":5`

func TestParseQueryTable(t *testing.T) {
	cases := []struct {
		name string
		text string
		opts QueryOptions
		want string
	}{
		{"vendor example", "gpu_name=RTX_4090 num_gpus>=2 reliability>0.98 dph<1.0 verified=true gpu_ram>=24", QueryOptions{},
			`{` + defaults + `,"gpu_name":{"eq":"RTX 4090"},"num_gpus":{"gte":"2"},"reliability":{"gt":"0.98"},"dph_total":{"lt":"1.0"},"gpu_ram":{"gte":24000},` + tail + `}`},
		{"empty", "", QueryOptions{}, `{` + defaults + `,` + tail + `}`},
		{"geolocation list", "geolocation in [US,CA]", QueryOptions{},
			`{` + defaults + `,"geolocation":{"in":["US","CA"]},` + tail + `}`},
		{"notin words", "gpu_name not in [RTX_3090, Tesla_T4]", QueryOptions{},
			`{` + defaults + `,"gpu_name":{"notin":["RTX 3090","Tesla T4"]},` + tail + `}`},
		{"spaces around symbolic op", "reliability > 0.98", QueryOptions{},
			`{` + defaults + `,"reliability":{"gt":"0.98"},` + tail + `}`},
		{"merge ops on one field", "num_gpus>=2 num_gpus<=8", QueryOptions{},
			`{` + defaults + `,"num_gpus":{"gte":"2","lte":"8"},` + tail + `}`},
		{"wildcard cancels default", "verified=any rented=*", QueryOptions{},
			`{"external":{"eq":false},"rentable":{"eq":true},` + tail + `}`},
		{"override default", "verified=false", QueryOptions{},
			`{"verified":{"eq":false},"external":{"eq":false},"rentable":{"eq":true},"rented":{"eq":false},` + tail + `}`},
		{"aliases", "cuda_vers>=12.1 dlperf_usd>10 display_active=false", QueryOptions{},
			`{` + defaults + `,"cuda_max_good":{"gte":"12.1"},"dlperf_per_dphtotal":{"gt":"10"},"gpu_display_active":{"eq":false},` + tail + `}`},
		{"multipliers", "cpu_ram>=64 gpu_total_ram>80 duration>=3", QueryOptions{},
			`{` + defaults + `,"cpu_ram":{"gte":64000},"gpu_total_ram":{"gt":80000},"duration":{"gte":259200},` + tail + `}`},
		{"driver version", "driver_version>=535.86.05", QueryOptions{},
			`{` + defaults + `,"driver_version":{"gte":535086005},` + tail + `}`},
		{"quoted value", `gpu_name="A100 SXM4"`, QueryOptions{},
			`{` + defaults + `,"gpu_name":{"eq":"A100 SXM4"},` + tail + `}`},
		{"null value", "cluster_id=null", QueryOptions{},
			`{` + defaults + `,"cluster_id":{"eq":null},` + tail + `}`},
		{"word operators", "num_gpus gte 2 dph lt 0.5 gpu_name neq RTX_3090", QueryOptions{},
			`{` + defaults + `,"num_gpus":{"gte":"2"},"dph_total":{"lt":"0.5"},"gpu_name":{"neq":"RTX 3090"},` + tail + `}`},
		{"order, type, storage, limit", "num_gpus=1", QueryOptions{Order: "num_gpus-,dph", Type: "interruptible", StorageGB: 20, Limit: 10},
			`{` + defaults + `,"num_gpus":{"eq":"1"},"order":[["num_gpus","desc"],["dph_total","asc"]],"type":"bid","allocated_storage":20,"limit":10}`},
		{"no defaults", "num_gpus=1", QueryOptions{NoDefaults: true},
			`{"num_gpus":{"eq":"1"},` + tail + `}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseQuery(c.text, c.opts)
			if err != nil {
				t.Fatalf("ParseQuery(%q): %v", c.text, err)
			}
			assertJSONEqual(t, got, c.want)
		})
	}
}

func TestParseQueryErrorsNameTheToken(t *testing.T) {
	cases := []struct {
		text, wantToken, wantInMsg string
	}{
		{"gpu_nme=RTX_4090", "gpu_nme", "did you mean gpu_name?"},
		{"num_gpus=>2", "num_gpus=>", "operators:"},
		{"num_gpus", "num_gpus", "operators:"},
		{"num_gpus bogus 2", "num_gpus bogus", "operators:"},
		{"geolocation in [US,CA", "[US,CA", "unterminated"},
		{"gpu_ram>=lots", "gpu_ram gte lots", "needs a number"},
		{"num_gpus>=", "num_gpus", "missing value"},
		{">=2", ">=2", "field name"},
	}
	for _, c := range cases {
		_, err := ParseQuery(c.text, QueryOptions{})
		var qe *QueryError
		if !errors.As(err, &qe) {
			t.Errorf("ParseQuery(%q) err = %v, want *QueryError", c.text, err)
			continue
		}
		if !strings.Contains(qe.Token, c.wantToken) || !strings.Contains(err.Error(), c.wantInMsg) {
			t.Errorf("ParseQuery(%q) = %v; want token containing %q and message containing %q", c.text, err, c.wantToken, c.wantInMsg)
		}
	}
	if _, err := ParseQuery("", QueryOptions{Order: "price-"}); err == nil || !strings.Contains(err.Error(), "price") {
		t.Errorf("bad order field not reported: %v", err)
	}
	if _, err := ParseQuery("", QueryOptions{Type: "spot"}); err == nil || !strings.Contains(err.Error(), "spot") {
		t.Errorf("bad type not reported: %v", err)
	}
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"gpu_name=RTX_4090 num_gpus>=2", "geolocation in [US,CA]", `gpu_name="A 100"`, "x", "[", "a!=b c<=d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := ParseQuery(s, QueryOptions{})
		if err != nil {
			var qe *QueryError
			if !errors.As(err, &qe) {
				t.Fatalf("non-QueryError %T: %v", err, err)
			}
			return
		}
		if _, err := json.Marshal(q); err != nil {
			t.Fatalf("query does not marshal: %v", err)
		}
	})
}

func assertJSONEqual(t *testing.T, got any, want string) {
	t.Helper()
	gb, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(gb, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want JSON %s: %v", want, err)
	}
	g2, _ := json.Marshal(g)
	w2, _ := json.Marshal(w)
	if string(g2) != string(w2) {
		t.Errorf("JSON mismatch\n got: %s\nwant: %s", g2, w2)
	}
}
