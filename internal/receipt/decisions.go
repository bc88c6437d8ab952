package receipt

import (
	"fmt"
	"io"
	"strings"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
)

// ExplainSchema is `offers --explain --json`'s document. v2 names an
// offer's GPU and price as every other document does (gpu_name,
// dph_total); v1's gpu and total_dph stay beside them, with the same
// values, because docs/json.md promised them.
const ExplainSchema = "vastrun.explain/v2"

// DecisionRow is one offer's verdict, as selection.json and
// `offers --explain --json` show it.
type DecisionRow struct {
	OfferID   provider.OfferID `json:"offer_id"`
	MachineID int64            `json:"machine_id"`
	GPUName   string           `json:"gpu_name"`
	NumGPUs   int              `json:"num_gpus"`
	DPHTotal  float64          `json:"dph_total"`
	Chosen    bool             `json:"chosen"`
	Eligible  bool             `json:"eligible"`
	Reasons   []string         `json:"reasons"`
	// Deprecated: v1's names for GPUName and DPHTotal.
	GPU      string  `json:"gpu"`
	TotalDPH float64 `json:"total_dph"`
}

// DecisionRows turns policy decisions into rows.
func DecisionRows(ds []policy.Decision) []DecisionRow {
	rows := make([]DecisionRow, 0, len(ds))
	for _, d := range ds {
		reasons := d.Reasons
		if reasons == nil {
			reasons = []string{}
		}
		dph := round6(d.TotalDPH)
		rows = append(rows, DecisionRow{OfferID: d.Offer.ID, MachineID: d.Offer.MachineID, GPUName: d.Offer.GPUName, NumGPUs: d.Offer.NumGPUs,
			DPHTotal: dph, Chosen: d.Chosen, Eligible: d.Eligible, Reasons: reasons, GPU: d.Offer.GPUName, TotalDPH: dph})
	}
	return rows
}

// WriteExplanation prints decisions as a table for people.
func WriteExplanation(w io.Writer, ds []policy.Decision) {
	for _, d := range ds {
		mark := "  "
		if d.Chosen {
			mark = "=>"
		}
		fmt.Fprintf(w, "%s %d  %s x%d  $%.4f/h  %s\n", mark, d.Offer.ID, d.Offer.GPUName, d.Offer.NumGPUs, d.TotalDPH, strings.Join(d.Reasons, "; ")) //nolint:errcheck // w is for people: a refused write cannot be reported
	}
}

func round6(x float64) float64 { return float64(int64(x*1e6+0.5)) / 1e6 }
