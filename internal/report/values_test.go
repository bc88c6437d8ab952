package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/receipt"
)

// The page shows a workload's results and a canary's differing fields as
// people read them: exact integers, JSON lists, never 3.338335e+08 or Go's
// map[…] notation.
func TestPageShowsValuesAsWritten(t *testing.T) {
	r, recs := sample()
	r.Train.Result = map[string]any{"checksum": 333833500.0, "per_class": map[string]any{"a": 0.5}}
	r.Canary = &receipt.CanaryReport{Comparison: receipt.CanaryOutputDelta,
		Delta: []receipt.FieldDelta{{Field: "checksum", Local: 333833500.0, GPU: 333833501.0}}}
	var buf bytes.Buffer
	if err := HTML(&buf, BuildWith(r, recs, Extras{})); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{"<td>333833500</td>", "cpu: 333833500", "gpu: 333833501", "{&#34;a&#34;:0.5}"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, bad := range []string{"e+08", "map["} {
		if strings.Contains(page, bad) {
			t.Errorf("the page shows %q", bad)
		}
	}
}
