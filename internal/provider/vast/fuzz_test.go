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
