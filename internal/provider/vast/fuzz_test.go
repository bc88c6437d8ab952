package vast

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeWire feeds arbitrary bytes to every decoder that reads what
// the API sends: they may reject input, but never panic, and an error body
// always becomes an *APIError with the status it came with.
func FuzzDecodeWire(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "wire", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"instances": {"id": "7", "ports": [22], "ssh_port": null, "start_date": "x"}}`))
	f.Add([]byte("API requests too frequent"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var inst struct {
			Instances *wireInstance `json:"instances"`
		}
		if json.Unmarshal(b, &inst) == nil && inst.Instances != nil {
			got := inst.Instances.domain()
			_ = got.SSHEndpoints()
			_ = got.Running()
		}
		var offers struct {
			Offers []wireOffer `json:"offers"`
		}
		if json.Unmarshal(b, &offers) == nil {
			for _, o := range offers.Offers {
				_ = o.domain().CountryCode()
			}
		}
		e := decodeAPIError("fuzz", 503, b)
		if e == nil || e.Status != 503 || e.Op != "fuzz" {
			t.Fatalf("error body decoded to %+v", e)
		}
		_ = e.Error()
		decodePermissions(b)
	})
}

// FuzzScalarFastPaths holds str's and num's fast paths (plainString,
// isNumber) to what json.Unmarshal gives for the same literal: the fast
// path may decline, but what it takes it reads exactly as json does, and
// it never takes what json rejects.
func FuzzScalarFastPaths(f *testing.F) {
	for _, s := range []string{`"running"`, `"a b"`, `"é"`, `"a\"b"`, `"a\\u0041"`, `"`, `""`, `"a"b"`, "\"a\tb\"",
		`0`, `-0`, `12`, `012`, `1.`, `.5`, `1.5e3`, `1E+2`, `-1e-2`, `1e`, `0x10`, `Inf`, `-Inf`, `+1`, `1e400`, `1_0`, `NaN`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, ok := plainString(b); ok {
			var want string
			if err := json.Unmarshal(b, &want); err != nil || got != want {
				t.Fatalf("plainString(%q) = %q; json: %q, %v", b, got, want, err)
			}
		}
		if isNumber(b) && !json.Valid(b) {
			t.Fatalf("isNumber(%q), but json rejects it", b)
		}
		var n num
		if err := n.UnmarshalJSON(b); err == nil && isNumber(b) {
			var want float64
			if err := json.Unmarshal(b, &want); err != nil || float64(n) != want {
				t.Fatalf("num(%q) = %v; json: %v, %v", b, n, want, err)
			}
		}
	})
}
