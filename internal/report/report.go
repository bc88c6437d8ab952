// Package report renders a run's receipt and journal for people: one
// self-contained HTML page (no network: inline CSS and SVG) with a state
// timeline per attempt, spend accumulating against the budget, checkpoints,
// the test result and the receipt itself.
package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/run"
)

// Segment is one phase of an attempt on the timeline.
type Segment struct {
	Phase      string
	Start, End time.Time
	X, W       float64 // SVG coordinates
}

// Lane is one attempt's row on the timeline.
type Lane struct {
	Title    string
	Y        float64
	Segments []Segment
}

// Mark is a point event (a checkpoint, an interruption).
type Mark struct {
	Label string
	At    time.Time
	X, Y  float64
	Kind  string
}

// Page is the data behind the HTML.
type Page struct {
	Receipt     *run.Receipt
	ReceiptJSON string
	Lanes       []Lane
	Marks       []Mark
	CostPath    string // SVG polyline points
	BudgetY     float64
	CostMax     float64
	Width       float64
	Height      float64
	Span        string
	Checkpoints []Mark
	Outcome     string
	Good        bool
}

const (
	width      = 960.0
	laneHeight = 34.0
	left       = 150.0
)

// Build turns a receipt and its journal into page data.
func Build(r *run.Receipt, recs []journal.Record) *Page {
	p := &Page{Receipt: r, Width: width, Outcome: string(r.Outcome)}
	p.Good = r.Cleanup.Confirmed && r.Outcome.Succeeded()
	b, _ := json.MarshalIndent(r, "", "  ")
	p.ReceiptJSON = string(b)
	start, end := r.StartedAt, r.FinishedAt
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	span := end.Sub(start).Seconds()
	p.Span = (time.Duration(span * float64(time.Second))).Round(time.Millisecond).String()
	x := func(t time.Time) float64 {
		if t.IsZero() {
			return left
		}
		return left + (width-left-20)*math.Max(0, math.Min(1, t.Sub(start).Seconds()/span))
	}
	for i, a := range r.Attempts {
		lane := Lane{Title: fmt.Sprintf("attempt %d · %d", i+1, a.InstanceID), Y: 30 + float64(i)*laneHeight}
		add := func(phase string, from, to time.Time) {
			if from.IsZero() {
				return
			}
			if to.IsZero() || to.Before(from) {
				to = end
			}
			lane.Segments = append(lane.Segments, Segment{Phase: phase, Start: from, End: to, X: x(from), W: math.Max(2, x(to)-x(from))})
		}
		add("renting", a.IntentAt, a.RentedAt)
		add("booting", a.RentedAt, a.RunningAt)
		add("running", a.RunningAt, a.DestroySentAt)
		add("destroying", a.DestroySentAt, a.ConfirmedAt)
		p.Lanes = append(p.Lanes, lane)
	}
	p.Height = 40 + float64(len(p.Lanes))*laneHeight
	for _, rec := range recs {
		switch rec.Step {
		case "checkpoint":
			var d struct {
				Step int64 `json:"step"`
			}
			rec.Decode(&d)
			m := Mark{Label: fmt.Sprintf("checkpoint %d", d.Step), At: rec.Time, X: x(rec.Time), Y: p.Height - 12, Kind: "checkpoint"}
			p.Marks = append(p.Marks, m)
			p.Checkpoints = append(p.Checkpoints, m)
		case "failover":
			var d struct {
				Reason string `json:"reason"`
			}
			rec.Decode(&d)
			p.Marks = append(p.Marks, Mark{Label: "interrupted: " + d.Reason, At: rec.Time, X: x(rec.Time), Y: p.Height - 12, Kind: "interruption"})
		}
	}
	// Spend: every attempt bills its total $/h from rented to confirmed gone.
	type ev struct {
		t    time.Time
		rate float64
	}
	var evs []ev
	for _, a := range r.Attempts {
		if a.RentedAt.IsZero() {
			continue
		}
		stop := a.ConfirmedAt
		if stop.IsZero() {
			stop = end
		}
		evs = append(evs, ev{a.RentedAt, a.DPHTotal}, ev{stop, -a.DPHTotal})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t.Before(evs[j].t) })
	budget := r.Cost.MaxSpendUSD
	total, rate, last := 0.0, 0.0, start
	type pt struct {
		t time.Time
		c float64
	}
	pts := []pt{{start, 0}}
	for _, e := range evs {
		total += rate * e.t.Sub(last).Hours()
		pts = append(pts, pt{e.t, total})
		rate += e.rate
		last = e.t
	}
	total += rate * end.Sub(last).Hours()
	pts = append(pts, pt{end, total})
	p.CostMax = math.Max(total, budget) * 1.1
	if p.CostMax == 0 {
		p.CostMax = 1
	}
	y := func(c float64) float64 { return 150 - 130*c/p.CostMax }
	var sb strings.Builder
	for _, q := range pts {
		fmt.Fprintf(&sb, "%.1f,%.1f ", x(q.t), y(q.c))
	}
	p.CostPath = strings.TrimSpace(sb.String())
	p.BudgetY = y(budget)
	return p
}

// HTML writes the self-contained page.
func HTML(w io.Writer, p *Page) error { return page.Execute(w, p) }

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"usd": func(f float64) string { return fmt.Sprintf("$%.4f", f) },
	"ptr": func(f *float64) string {
		if f == nil {
			return "n/a"
		}
		return fmt.Sprintf("$%.4f", *f)
	},
	"color": func(phase string) string {
		return map[string]string{"renting": "#8aa4d6", "booting": "#e0b341", "running": "#4caf6a", "destroying": "#c45b5b"}[phase]
	},
	"sub": func(a, b float64) float64 { return a - b },
	"add": func(a, b float64) float64 { return a + b },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>vastrun {{.Receipt.Workflow}} {{.Receipt.RunID}}: {{.Outcome}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600}
.good{background:#2e8b57}.bad{background:#b03a2e}
table{border-collapse:collapse}td,th{border:1px solid #d8dde6;padding:4px 8px;text-align:left;vertical-align:top}
svg{background:#fff;border:1px solid #d8dde6} pre{background:#fff;border:1px solid #d8dde6;padding:8px;overflow:auto;max-height:420px}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
</style></head><body>
<h1>vastrun {{.Receipt.Workflow}} · run <code>{{.Receipt.RunID}}</code></h1>
<div id="outcome" class="badge {{if .Good}}good{{else}}bad{{end}}">{{.Outcome}}</div>
{{if .Receipt.Simulated}}<p><em>Simulated run: nothing was rented or billed for real.</em></p>{{end}}
{{if .Receipt.Error}}<p id="error"><strong>Error:</strong> {{.Receipt.Error}}</p>{{end}}
<table id="facts">
<tr><th>label</th><td><code>{{.Receipt.Label}}</code></td></tr>
<tr><th>commit</th><td><code>{{.Receipt.Commit}}</code></td></tr>
<tr><th>image</th><td><code>{{.Receipt.Image}}</code></td></tr>
<tr><th>elapsed</th><td>{{.Span}}</td></tr>
<tr><th>cleanup</th><td id="cleanup">{{if .Receipt.Cleanup.Confirmed}}every instance confirmed destroyed{{else}}NOT CONFIRMED: {{.Receipt.Cleanup.Unconfirmed}}{{end}}</td></tr>
</table>

<h2>Timeline</h2>
<div class="legend"><span style="background:#8aa4d6"></span>renting<span style="background:#e0b341"></span>booting<span style="background:#4caf6a"></span>running<span style="background:#c45b5b"></span>destroying</div>
<svg id="timeline" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="state timeline per attempt">
{{range $lane := .Lanes}}<g class="lane"><text x="8" y="{{add $lane.Y 17}}" font-size="12">{{$lane.Title}}</text>
{{range $lane.Segments}}<rect class="segment {{.Phase}}" x="{{.X}}" y="{{$lane.Y}}" width="{{.W}}" height="24" fill="{{color .Phase}}"><title>{{.Phase}}: {{.Start.Format "15:04:05.000"}} – {{.End.Format "15:04:05.000"}}</title></rect>
{{end}}</g>{{end}}
{{range .Marks}}<g class="mark {{.Kind}}"><line x1="{{.X}}" x2="{{.X}}" y1="8" y2="{{.Y}}" stroke="{{if eq .Kind "checkpoint"}}#3b6fd6{{else}}#b03a2e{{end}}" stroke-dasharray="3,3"/><title>{{.Label}} at {{.At.Format "15:04:05"}}</title></g>
{{end}}</svg>

<h2>Spend against the budget</h2>
<svg id="cost" width="{{.Width}}" height="170" viewBox="0 0 {{.Width}} 170" role="img" aria-label="spend over time">
<line id="budget-line" x1="150" x2="{{sub .Width 20}}" y1="{{.BudgetY}}" y2="{{.BudgetY}}" stroke="#b03a2e" stroke-dasharray="6,4"/>
<text x="8" y="{{.BudgetY}}" font-size="12" fill="#b03a2e">budget {{usd .Receipt.Cost.MaxSpendUSD}}</text>
<polyline id="cost-line" points="{{.CostPath}}" fill="none" stroke="#1d2330" stroke-width="2"/>
<text x="8" y="160" font-size="12">estimate {{usd .Receipt.Cost.EstimateUSD}} · charged {{ptr .Receipt.Cost.ChargedUSD}}</text>
</svg>

{{if .Checkpoints}}<h2>Checkpoints</h2><ul id="checkpoints">{{range .Checkpoints}}<li>{{.Label}} at {{.At.Format "15:04:05"}}</li>{{end}}</ul>{{end}}
{{with .Receipt.Train}}<h2>Training</h2><table id="train"><tr><th>checkpoint store</th><td><code>{{.CheckpointURI}}</code></td></tr>
{{with .LastCheckpoint}}<tr><th>last committed</th><td>step {{.Step}} · <code>{{.ManifestSHA256}}</code></td></tr>{{end}}
{{range .Resumes}}<tr><th>resume on {{.Instance}}</th><td>restored {{.RestoredStep}}, workload reported {{if .ReportedStep}}{{.ReportedStep}}{{else}}nothing{{end}} — {{if .Proven}}proven{{else}}NOT proven{{end}}</td></tr>{{end}}
</table>{{end}}
{{with .Receipt.Test}}<h2>Test</h2><p id="test">exit status {{.ExitCode}}{{if .TimedOut}} (timed out){{end}}</p>{{end}}
{{with .Receipt.Canary}}<h2>Canary</h2><p id="canary">comparison: <strong>{{.Comparison}}</strong></p>{{if .Delta}}<table>{{range .Delta}}<tr><th>{{.Field}}</th><td>cpu: {{.Local}}</td><td>gpu: {{.GPU}}</td></tr>{{end}}</table>{{end}}{{end}}

<h2>Attempts</h2>
<table id="attempts"><tr><th>#</th><th>offer</th><th>instance</th><th>machine</th><th>GPU</th><th>$/h</th><th>failure</th><th>destroyed</th></tr>
{{range $i, $a := .Receipt.Attempts}}<tr class="attempt"><td>{{$i}}</td><td>{{$a.OfferID}}</td><td>{{$a.InstanceID}}</td><td>{{$a.MachineID}}</td><td>{{$a.GPUName}} x{{$a.NumGPUs}}</td><td>{{usd $a.DPHTotal}}</td><td>{{$a.Failure}}</td><td>{{if $a.Confirmed}}confirmed{{else}}NOT CONFIRMED{{end}}</td></tr>
{{end}}
</table>

<h2>Receipt</h2>
<pre id="receipt">{{.ReceiptJSON}}</pre>
</body></html>
`))
