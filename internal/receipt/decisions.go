package receipt

import (
	"fmt"
	"io"
	"strings"

	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
)

// DecisionRow is one offer's verdict, as selection.json and
// `offers --explain --json` show it.
type DecisionRow struct {
	OfferID   provider.OfferID `json:"offer_id"`
	MachineID int64            `json:"machine_id"`
	GPU       string           `json:"gpu"`
	NumGPUs   int              `json:"num_gpus"`
	TotalDPH  float64          `json:"total_dph"`
	Chosen    bool             `json:"chosen"`
	Eligible  bool             `json:"eligible"`
	Reasons   []string         `json:"reasons"`
}

// DecisionRows turns policy decisions into rows.
func DecisionRows(ds []policy.Decision) []DecisionRow {
	rows := make([]DecisionRow, 0, len(ds))
	for _, d := range ds {
		rows = append(rows, DecisionRow{d.Offer.ID, d.Offer.MachineID, d.Offer.GPUName, d.Offer.NumGPUs, round6(d.TotalDPH), d.Chosen, d.Eligible, d.Reasons})
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
