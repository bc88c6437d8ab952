package smoke

import (
	"encoding/json"
	"reflect"
	"testing"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name       string
		local, gpu string
		o          CompareOptions
		want       []FieldDelta
	}{
		{"reordered keys", `{"a":1,"b":{"x":"y","z":[1,2]}}`, `{"b":{"z":[1,2],"x":"y"},"a":1}`, CompareOptions{}, nil},
		{"objects listed in another order", `{"data":[{"id":"tts-1"},{"id":"tts-1-hd"}]}`, `{"data":[{"id":"tts-1-hd"},{"id":"tts-1"}]}`, CompareOptions{}, nil},
		{"a scalar list keeps its order", `{"tokens":[1,2]}`, `{"tokens":[2,1]}`, CompareOptions{},
			[]FieldDelta{{"tokens[0]", 1.0, 2.0}, {"tokens[1]", 2.0, 1.0}}},
		{"float within tolerance", `{"score":0.5,"emb":[0.1,0.2]}`, `{"score":0.50001,"emb":[0.1000001,0.2]}`, CompareOptions{Tolerance: 1e-3}, nil},
		{"float beyond tolerance", `{"score":0.5}`, `{"score":0.6}`, CompareOptions{Tolerance: 1e-3}, []FieldDelta{{"score", 0.5, 0.6}}},
		{"relative tolerance for large numbers", `{"n":1000000}`, `{"n":1000100}`, CompareOptions{Tolerance: 1e-3}, nil},
		{"exact without tolerance", `{"score":0.5}`, `{"score":0.5000001}`, CompareOptions{}, []FieldDelta{{"score", 0.5, 0.5000001}}},
		{"ignored field and all under it", `{"t":{"ms":1},"d":"cpu","k":1}`, `{"t":{"ms":9},"d":"gpu","k":1}`, CompareOptions{Ignore: []string{"t", "d"}}, nil},
		{"ignored field inside listed objects", `{"m":[{"id":"a","created":1}]}`, `{"m":[{"id":"a","created":2}]}`, CompareOptions{Ignore: []string{"m.created"}}, nil},
		{"a missing field", `{"a":1,"b":2}`, `{"a":1}`, CompareOptions{}, []FieldDelta{{"b", 2.0, nil}}},
		{"an unmatched listed object", `{"m":[{"id":"a"},{"id":"b"}]}`, `{"m":[{"id":"a"},{"id":"c"}]}`, CompareOptions{},
			[]FieldDelta{{"m[]", []any{map[string]any{"id": "b"}}, []any{map[string]any{"id": "c"}}}}},
		{"type differs", `{"a":"1"}`, `{"a":1}`, CompareOptions{Tolerance: 1}, []FieldDelta{{"a", "1", 1.0}}},
		{"nil results", `{}`, `{}`, CompareOptions{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compare(obj(t, tc.local), obj(t, tc.gpu), tc.o)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
	if d := Compare(nil, map[string]any{"a": 1.0}, CompareOptions{}); len(d) != 1 || d[0].Field != "a" {
		t.Fatalf("nil local: %v", d)
	}
}
