package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/runstate"
)

// ListSchema names the JSON document of `vastrun runs --json` (docs/json.md).
const ListSchema = "vastrun.runs/v1"

// OutcomeUnfinished is a run whose journal has no outcome: its controller
// is still running, or died (vastrun resume / down take it over).
const OutcomeUnfinished = string(receipt.Unfinished)

// Run is one row of the listing.
type Run struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Outcome  string `json:"outcome"`
	Label    string `json:"label"`
	// StartedAt is when the run began (UTC).
	StartedAt time.Time `json:"started_at,omitzero"`
	// WallSeconds is the wall-clock time from start to the last journal
	// record (or to the receipt's finish).
	WallSeconds float64 `json:"wall_s"`
	// CostUSD is what the marketplace charged when known (CostSource
	// "charged"), else vastrun's estimate from the rented time ("estimate").
	CostUSD    float64 `json:"cost_usd"`
	CostSource string  `json:"cost_source"`
	// LiveInstances are instances not confirmed destroyed: they may bill.
	LiveInstances []provider.InstanceID `json:"live_instances"`
	Latest        bool                  `json:"latest"`
	Simulated     bool                  `json:"simulated"`
	EvidenceDir   string                `json:"evidence_dir,omitempty"`
	// Error says why the run could not be read (a damaged journal).
	Error string `json:"error,omitempty"`
}

// List reads every run under stateDir/runs, newest first. now prices the
// rented time of instances still live.
func List(stateDir string, now time.Time) ([]Run, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, "runs"))
	if os.IsNotExist(err) {
		return []Run{}, nil
	}
	if err != nil {
		return nil, err
	}
	latest := ""
	if b, err := os.ReadFile(filepath.Join(stateDir, "current")); err == nil {
		latest = strings.TrimSpace(string(b))
	}
	out := []Run{}
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		r := read(filepath.Join(stateDir, "runs", ent.Name()), now)
		if r.RunID == "" {
			r.RunID = ent.Name()
		}
		r.Latest = r.RunID == latest
		out = append(out, r)
	}
	// Run ids begin with their start time in base 36, so they sort by age
	// even when a journal is damaged and its start time unknown.
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) && !out[i].StartedAt.IsZero() && !out[j].StartedAt.IsZero() {
			return out[i].StartedAt.After(out[j].StartedAt)
		}
		return out[i].RunID > out[j].RunID
	})
	return out, nil
}

type stateFile struct {
	EvidenceDir string `json:"evidence_dir"`
}

func read(dir string, now time.Time) Run {
	recs, err := journal.Read(dir)
	var st *runstate.State
	if err == nil {
		st, err = runstate.Replay(recs)
	}
	if err != nil {
		return Run{Outcome: "damaged", Error: err.Error(), LiveInstances: []provider.InstanceID{}}
	}
	r := Run{RunID: st.RunID, Workflow: st.Workflow, Outcome: string(st.Outcome), Label: st.Label, StartedAt: st.Started.UTC(),
		LiveInstances: st.Unconfirmed()}
	if r.Outcome == "" {
		r.Outcome = OutcomeUnfinished
	}
	r.EvidenceDir = EvidenceDir(dir)
	last := st.Started
	if n := len(recs); n > 0 {
		last = recs[n-1].Time
	}
	r.WallSeconds = seconds(last.Sub(st.Started))
	r.CostUSD, r.CostSource = estimate(st, now), "estimate"
	if rc := readReceipt(r.EvidenceDir); rc != nil && rc.RunID == st.RunID {
		// The receipt's figures are wall-clock even for a scaled simulator.
		r.Simulated = rc.Simulated
		if !rc.StartedAt.IsZero() {
			r.StartedAt = rc.StartedAt.UTC()
		}
		if v, ok := rc.Timings["elapsed"]; ok {
			r.WallSeconds = round(v, 10)
		}
		if rc.Cost.ChargedUSD != nil {
			r.CostUSD, r.CostSource = *rc.Cost.ChargedUSD, "charged"
		} else {
			r.CostUSD = rc.Cost.EstimateUSD
		}
	}
	r.CostUSD = round(r.CostUSD, 1e4)
	return r
}

func readReceipt(evidenceDir string) *receipt.Receipt {
	if evidenceDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(evidenceDir, "receipt.json"))
	if err != nil {
		return nil
	}
	var r receipt.Receipt
	if json.Unmarshal(b, &r) != nil {
		return nil
	}
	return &r
}

// estimate prices each attempt's rented time at its $/h, up to now for an
// instance whose destruction is not yet confirmed, less the GPU part of
// the time an interruptible rental spent stopped (as the run's own
// estimate does).
func estimate(st *runstate.State, now time.Time) float64 {
	total := 0.0
	for _, a := range st.Attempts {
		if a.RentedAt.IsZero() {
			continue
		}
		end := now
		if !a.ConfirmedAt.IsZero() {
			end = a.ConfirmedAt
		}
		if end.After(a.RentedAt) {
			total += a.DPHTotal*end.Sub(a.RentedAt).Hours() - a.StoppedDiscount(end)
		}
	}
	return total
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func seconds(d time.Duration) float64 { return round(max(0, d.Seconds()), 10) }

func round(x, per float64) float64 { return math.Round(x*per) / per }
