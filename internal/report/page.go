package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/text"
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

// Mark is a point event (a checkpoint, an interruption, a resume), drawn
// on the lane of the attempt whose journal records hold it, down to the
// time axis.
type Mark struct {
	Label string
	At    time.Time
	X, Y  float64
	Y1    float64 // the top of its attempt's lane
	// LabelY is where the label sits, staggered so neighbours stay legible.
	LabelY float64
	Anchor string // text-anchor of the label
	Kind   string
}

// Tick is one labelled position on an axis.
type Tick struct {
	Pos   float64
	Label string
}

// AttemptRow is one attempt in the attempts table and the spend chart.
type AttemptRow struct {
	N       int
	A       *receipt.Attempt
	CostUSD float64
	// Charged says CostUSD is what the marketplace billed (else estimated).
	Charged bool
	Ended   string // why it ended early, in words
	LabelX  float64
	LabelY  float64
}

// Series is one attempt's metric curve.
type Series struct {
	Attempt int
	Points  string // SVG polyline points
	Color   string
}

// Chart is the metric over steps.
type Chart struct {
	Name           string
	Series         []Series
	XTicks, YTicks []Tick
	// ResumeX is where the run resumed (restored step); 0 when it did not.
	ResumeX    float64
	ResumeStep int64
}

// Extras are what the evidence adds to the receipt and journal.
type Extras struct {
	// Metrics are the workload's $VASTRUN_METRICS lines (metrics.jsonl).
	Metrics []map[string]any
	// LogName and LogTail are the workload log's name and last lines.
	LogName, LogTail string
}

// Page is the data behind the HTML.
type Page struct {
	Receipt     *receipt.Receipt
	ReceiptJSON string
	Lanes       []Lane
	Marks       []Mark
	Ticks       []Tick
	AxisY       float64
	CostPath    string // SVG polyline points
	BudgetY     float64
	CostMax     float64
	CostTicks   []Tick
	// BudgetOff is set when the budget is far above the spend (see buildCost).
	BudgetOff   string
	Width       float64
	Height      float64
	Span        string
	Total       string
	Checkpoints []Mark
	Attempts    []AttemptRow
	Metric      *Chart
	LogName     string
	LogTail     string
	Outcome     string
	Good        bool
}

const (
	width      = 1000.0
	laneHeight = 34.0
	left       = 170.0
	right      = 20.0
	costTop    = 16.0
	costBottom = 150.0
)

var attemptColors = []string{"#3b6fd6", "#d2691e", "#2e8b57", "#8e44ad", "#b03a2e"}

// Build turns a receipt and its journal into page data.
func Build(r *receipt.Receipt, recs []journal.Record) *Page { return BuildWith(r, recs, Extras{}) }

// BuildWith is Build with what the evidence adds.
func BuildWith(r *receipt.Receipt, recs []journal.Record, x Extras) *Page {
	p := &Page{Receipt: r, Width: width, Outcome: string(r.Outcome), LogName: x.LogName, LogTail: x.LogTail}
	p.Good = r.Cleanup.Confirmed && r.Outcome.Succeeded()
	b, _ := json.MarshalIndent(r, "", "  ")
	p.ReceiptJSON = string(b)
	start, end := r.StartedAt, r.FinishedAt
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	span := end.Sub(start).Seconds()
	p.Span = (time.Duration(span * float64(time.Second))).Round(time.Millisecond).String()
	xOf := func(t time.Time) float64 {
		if t.IsZero() {
			return left
		}
		return left + (width-left-right)*math.Max(0, math.Min(1, t.Sub(start).Seconds()/span))
	}
	// The journal's times are on the run's clock; a scaled simulator's
	// receipt is in wall-clock time, so journal times are mapped to it.
	journalTime := func(t time.Time) time.Time {
		if s := r.SimTime; s != nil && s.Speed > 0 {
			return r.StartedAt.Add(time.Duration(float64(t.Sub(s.StartedAt)) / s.Speed))
		}
		return t
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
			lane.Segments = append(lane.Segments, Segment{Phase: phase, Start: from, End: to, X: xOf(from), W: math.Max(2, xOf(to)-xOf(from))})
		}
		add("renting", a.IntentAt, a.RentedAt)
		add("booting", a.RentedAt, a.RunningAt)
		add("running", a.RunningAt, a.DestroySentAt)
		add("destroying", a.DestroySentAt, a.ConfirmedAt)
		p.Lanes = append(p.Lanes, lane)
	}
	laneBottom := 30 + float64(len(p.Lanes))*laneHeight
	p.AxisY = laneBottom + 4
	p.Height = laneBottom + 84 // axis labels, then four rows of marker labels
	for _, t := range timeTicks(span) {
		p.Ticks = append(p.Ticks, Tick{Pos: xOf(start.Add(time.Duration(t * float64(time.Second)))), Label: clockLabel(t)})
	}
	seen := map[int64]bool{}
	// Each mark belongs to the attempt whose records hold it, in journal
	// order (each rent intent starts the next attempt), and is drawn
	// within that attempt's span: an attempt's marks never land on
	// another's time, and a checkpoint a resumed controller journals again
	// is drawn once.
	lane, byOrder := -1, false
	for _, rec := range recs {
		byOrder = byOrder || rec.Step == "rent" && rec.Type == "intent"
	}
	mark := func(m Mark) {
		l := lane
		if !byOrder { // a journal without rent records (a test's): the attempt under way then
			for i, a := range r.Attempts {
				if !a.IntentAt.IsZero() && !a.IntentAt.After(m.At) {
					l = i
				}
			}
		}
		l = max(0, min(l, len(p.Lanes)-1))
		if len(p.Lanes) > 0 {
			ln := p.Lanes[l]
			m.Y1 = ln.Y
			if n := len(ln.Segments); n > 0 {
				m.X = math.Max(ln.Segments[0].X, math.Min(m.X, ln.Segments[n-1].X+ln.Segments[n-1].W))
			}
		}
		p.Marks = append(p.Marks, m)
	}
	for _, rec := range recs {
		at := journalTime(rec.Time)
		if rec.Step == "rent" && rec.Type == "intent" {
			lane++
		}
		switch rec.Step {
		case "checkpoint":
			var d struct {
				Step int64 `json:"step"`
			}
			if rec.Decode(&d) != nil || seen[d.Step] {
				continue // a damaged record marks nothing, rather than step 0; a repeat nothing more
			}
			seen[d.Step] = true
			m := Mark{Label: fmt.Sprintf("ckpt %d", d.Step), At: at, X: xOf(at), Kind: "checkpoint"}
			mark(m)
			p.Checkpoints = append(p.Checkpoints, m)
		case "failover":
			var d struct {
				Reason string `json:"reason"`
			}
			if rec.Decode(&d) != nil {
				continue // a damaged record marks nothing, rather than step 0
			}
			mark(Mark{Label: "interrupted: " + receipt.InWords(d.Reason), At: at, X: xOf(at), Kind: "interruption"})
		case "restore":
			var d struct {
				Step int64 `json:"step"`
			}
			if rec.Decode(&d) != nil {
				continue // a damaged record marks nothing, rather than step 0
			}
			mark(Mark{Label: fmt.Sprintf("resumed from %d", d.Step), At: at, X: xOf(at), Kind: "resume"})
		}
	}
	// The last commit can land after the last poll that journaled one
	// (the agent's final pass): the receipt knows it, so the list does too.
	if t := r.Train; t != nil && t.LastCheckpoint != nil && !seen[t.LastCheckpoint.Step] {
		p.Checkpoints = append(p.Checkpoints, Mark{Label: fmt.Sprintf("ckpt %d", t.LastCheckpoint.Step), At: r.FinishedAt, Kind: "checkpoint"})
	}
	// Labels take turns over three rows so neighbours do not overlap.
	sort.SliceStable(p.Marks, func(i, j int) bool { return p.Marks[i].At.Before(p.Marks[j].At) })
	// Labels: interruptions on the first row, resumes on the second,
	// checkpoints alternating on the next two, anchored away from the edges.
	nc := 0
	for i := range p.Marks {
		m := &p.Marks[i]
		m.Y = laneBottom
		row := 0 // interruptions
		switch m.Kind {
		case "resume":
			row = 1
		case "checkpoint":
			row = 2 + nc%2
			nc++
		}
		m.LabelY = laneBottom + 34 + float64(row)*13
		switch {
		case m.X > width-right-160:
			m.Anchor = "end"
		case m.X < left+60:
			m.Anchor = "start"
		default:
			m.Anchor = "middle"
		}
	}
	p.buildCost(r, start, end, xOf)
	p.Metric = buildMetric(r, x.Metrics)
	return p
}

// buildCost draws spend over time: every attempt bills its $/h from rented
// to confirmed gone.
func (p *Page) buildCost(r *receipt.Receipt, start, end time.Time, xOf func(time.Time) float64) {
	type ev struct {
		t    time.Time
		rate float64
	}
	var evs []ev
	total := 0.0
	// A scaled simulator's receipt times are wall-clock while it billed in
	// simulated time: the spend is priced in simulated hours.
	hours := func(d time.Duration) float64 { return d.Hours() }
	if sm := r.SimTime; sm != nil && sm.Speed > 0 {
		hours = func(d time.Duration) float64 { return d.Hours() * sm.Speed }
	}
	for i, a := range r.Attempts {
		stop := a.ConfirmedAt
		if stop.IsZero() {
			stop = end
		}
		row := AttemptRow{N: i + 1, A: a, Ended: receipt.InWords(a.Failure)}
		if !a.RentedAt.IsZero() {
			evs = append(evs, ev{a.RentedAt, a.DPHTotal}, ev{stop, -a.DPHTotal})
			row.CostUSD = a.DPHTotal * hours(stop.Sub(a.RentedAt))
		}
		if a.Charged != nil {
			row.CostUSD, row.Charged = *a.Charged, true
		}
		total += row.CostUSD
		p.Attempts = append(p.Attempts, row)
	}
	p.Total = usd(total)
	if r.Cost.ChargedUSD != nil {
		p.Total = usd(*r.Cost.ChargedUSD) + " charged"
	} else {
		p.Total = usd(r.Cost.EstimateUSD) + " estimated"
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t.Before(evs[j].t) })
	budget := r.Cost.MaxSpendUSD
	spent, rate, last := 0.0, 0.0, start
	type pt struct {
		t time.Time
		c float64
	}
	pts := []pt{{start, 0}}
	for _, e := range evs {
		spent += rate * hours(e.t.Sub(last))
		pts = append(pts, pt{e.t, spent})
		rate += e.rate
		last = e.t
	}
	spent += rate * hours(end.Sub(last))
	pts = append(pts, pt{end, spent})
	// The axis reaches the budget when the spend is a fair part of it;
	// otherwise a line pressed flat at $0 would say nothing, so the chart
	// is scaled to the spend and says where the budget is.
	top := niceCeil(math.Max(spent, budget) * 1.05)
	if budget > 4*spent && spent > 0 {
		top = niceCeil(spent * 1.25)
		p.BudgetOff = fmt.Sprintf("budget %s: %.0f× this spend, above the chart", usd(budget), budget/spent)
	}
	if top == 0 {
		top = 1
	}
	p.CostMax = top
	y := func(c float64) float64 { return costBottom - (costBottom-costTop)*c/top }
	var sb strings.Builder
	for _, q := range pts {
		fmt.Fprintf(&sb, "%.1f,%.1f ", xOf(q.t), y(q.c))
	}
	p.CostPath = strings.TrimSpace(sb.String())
	p.BudgetY = y(budget)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		p.CostTicks = append(p.CostTicks, Tick{Pos: y(v), Label: usd(v)})
	}
	// Each attempt's cost sits over the middle of its billed stretch.
	for i := range p.Attempts {
		a := p.Attempts[i].A
		if a.RentedAt.IsZero() {
			continue
		}
		stop := a.ConfirmedAt
		if stop.IsZero() {
			stop = end
		}
		mid := a.RentedAt.Add(stop.Sub(a.RentedAt) / 2)
		p.Attempts[i].LabelX = xOf(mid)
		p.Attempts[i].LabelY = costBottom - 6 - float64(i%2)*14
	}
}

// buildMetric draws the workload's loss (or its first numeric field) over
// steps, one curve per attempt, with the resume point.
func buildMetric(r *receipt.Receipt, ms []map[string]any) *Chart {
	if len(ms) == 0 {
		return nil
	}
	name := ""
	for _, cand := range []string{"loss", "train_loss", "val_loss"} {
		for _, m := range ms {
			if _, ok := m[cand].(float64); ok {
				name = cand
				break
			}
		}
		if name != "" {
			break
		}
	}
	if name == "" {
		keys := map[string]bool{}
		for _, m := range ms {
			for k, v := range m {
				if _, ok := v.(float64); ok && k != "step" && k != "attempt" && k != "total_steps" && k != "total" {
					keys[k] = true
				}
			}
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		if len(ks) == 0 {
			return nil
		}
		name = ks[0]
	}
	type pt struct {
		step, v float64
		att     int
	}
	var pts []pt
	minS, maxS, minV, maxV := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, m := range ms {
		s, ok1 := m["step"].(float64)
		v, ok2 := m[name].(float64)
		if !ok1 || !ok2 || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		att := 1
		if a, ok := m["attempt"].(float64); ok {
			att = int(a)
		}
		pts = append(pts, pt{s, v, att})
		minS, maxS, minV, maxV = math.Min(minS, s), math.Max(maxS, s), math.Min(minV, v), math.Max(maxV, v)
	}
	if len(pts) == 0 {
		return nil
	}
	minS = math.Min(minS, 0)
	if maxS == minS {
		maxS = minS + 1
	}
	lo, hi := 0.0, niceCeil(maxV*1.05)
	if minV < 0 {
		lo = -niceCeil(-minV * 1.05)
	}
	if hi == lo {
		hi = lo + 1
	}
	const top, bottom = 16.0, 150.0
	x := func(s float64) float64 { return left + (width-left-right)*(s-minS)/(maxS-minS) }
	y := func(v float64) float64 { return bottom - (bottom-top)*(v-lo)/(hi-lo) }
	c := &Chart{Name: name}
	// A loss falls by orders of magnitude: on a linear axis all but the
	// first steps lie flat on zero, so such a curve gets a log axis.
	logScale := minV > 0 && maxV/minV > 50
	if logScale {
		lo, hi = math.Floor(math.Log10(minV)), math.Ceil(math.Log10(maxV))
		y = func(v float64) float64 { return bottom - (bottom-top)*(math.Log10(v)-lo)/(hi-lo) }
		c.Name += " (log scale)"
	}
	by := map[int][]pt{}
	var order []int
	for _, q := range pts {
		if _, ok := by[q.att]; !ok {
			order = append(order, q.att)
		}
		by[q.att] = append(by[q.att], q)
	}
	sort.Ints(order)
	for i, att := range order {
		var sb strings.Builder
		for _, q := range by[att] {
			fmt.Fprintf(&sb, "%.1f,%.1f ", x(q.step), y(q.v))
		}
		c.Series = append(c.Series, Series{Attempt: att, Points: strings.TrimSpace(sb.String()), Color: attemptColors[i%len(attemptColors)]})
	}
	for i := 0; i <= 4; i++ {
		s := minS + (maxS-minS)*float64(i)/4
		c.XTicks = append(c.XTicks, Tick{Pos: x(s), Label: fmt.Sprintf("%.0f", s)})
		if !logScale {
			v := lo + (hi-lo)*float64(i)/4
			c.YTicks = append(c.YTicks, Tick{Pos: y(v), Label: fmt.Sprintf("%.3g", v)})
		}
	}
	for e := lo; logScale && e <= hi; e++ {
		v := math.Pow(10, e)
		c.YTicks = append(c.YTicks, Tick{Pos: y(v), Label: fmt.Sprintf("%g", v)})
	}
	if t := r.Train; t != nil {
		for _, rs := range t.Resumes {
			if rs.RestoredStep > 0 {
				c.ResumeStep, c.ResumeX = rs.RestoredStep, x(float64(rs.RestoredStep))
			}
		}
	}
	return c
}

// timeTicks are round offsets (seconds) from the start across span.
func timeTicks(span float64) []float64 {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400} {
		step = s
		if span/s <= 8 {
			break
		}
	}
	var out []float64
	for t := 0.0; t <= span+1e-9; t += step {
		out = append(out, t)
	}
	return out
}

func clockLabel(sec float64) string {
	d := time.Duration(sec * float64(time.Second)).Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}

// niceCeil rounds x up to 1, 2 or 5 times a power of ten.
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func usd(f float64) string {
	if math.Abs(f) < 1 {
		return fmt.Sprintf("$%.4f", f)
	}
	return fmt.Sprintf("$%.2f", f)
}

// HTML writes the self-contained page.
func HTML(w io.Writer, p *Page) error { return page().Execute(w, p) }

// page is parsed on first use, not at start-up: every vastrun command
// would otherwise pay for it (1.1 ms of a --version's 37 ms), and only
// report writes HTML.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"usd": usd,
		// JSON values as people read them: no exponent, no Go notation.
		"value": text.Value,
		"ptr": func(f *float64) string {
			if f == nil {
				return "n/a"
			}
			return usd(*f)
		},
		"color": func(phase string) string {
			return map[string]string{"renting": "#8aa4d6", "booting": "#e0b341", "running": "#4caf6a", "destroying": "#7d8796"}[phase]
		},
		"markColor": func(kind string) string {
			return map[string]string{"checkpoint": "#3b6fd6", "interruption": "#b03a2e", "resume": "#2e8b57"}[kind]
		},
		"sub": func(a, b float64) float64 { return a - b },
		"add": func(a, b float64) float64 { return a + b },
	}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>vastrun {{.Receipt.Workflow}} {{.Receipt.RunID}}: {{.Outcome}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
main{max-width:1100px;margin:0 auto;padding:20px}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:26px 0 8px}
header .facts{display:flex;flex-wrap:wrap;gap:8px 18px;align-items:center}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600}
.good{background:#2e8b57}.bad{background:#b03a2e}
#total{font-size:18px;font-weight:600}
table{border-collapse:collapse;max-width:100%}td,th{border:1px solid #d8dde6;padding:4px 8px;text-align:left;vertical-align:top}
.wide{overflow-x:auto}
svg{display:block;width:100%;height:auto;background:#fff;border:1px solid #d8dde6}
svg text{font-size:12px;fill:#1d2330} svg .axis text{fill:#5b6475}
pre{background:#fff;border:1px solid #d8dde6;padding:8px;overflow:auto;max-height:420px;white-space:pre-wrap;word-break:break-all}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.ok{color:#2e8b57}.notok{color:#b03a2e;font-weight:600}
</style></head><body><main>
<header>
<h1>vastrun {{.Receipt.Workflow}} · run <code>{{.Receipt.RunID}}</code></h1>
<div class="facts"><span id="outcome" class="badge {{if .Good}}good{{else}}bad{{end}}">{{.Outcome}}</span>
<span id="total" title="total cost of every attempt">{{.Total}}</span>
<span>budget {{usd .Receipt.Cost.MaxSpendUSD}}</span><span>{{len .Attempts}} attempt(s)</span><span>elapsed {{.Span}}</span></div>
{{if .Receipt.Simulated}}<p><em>Simulated run: nothing was rented or billed for real.</em></p>{{end}}
{{if .Receipt.Error}}<p id="error"><strong>Error:</strong> {{.Receipt.Error}}</p>{{end}}
</header>
<div class="wide"><table id="facts">
<tr><th>label</th><td><code>{{.Receipt.Label}}</code></td></tr>
<tr><th>commit</th><td><code>{{.Receipt.Commit}}</code></td></tr>
<tr><th>image</th><td><code>{{.Receipt.Image}}</code></td></tr>
<tr><th>cleanup</th><td id="cleanup">{{if .Receipt.Cleanup.Confirmed}}every instance confirmed destroyed{{else}}NOT CONFIRMED: {{.Receipt.Cleanup.Unconfirmed}}{{end}}</td></tr>
</table></div>

<h2>Timeline</h2>
<div class="legend"><span style="background:#8aa4d6"></span>renting<span style="background:#e0b341"></span>booting<span style="background:#4caf6a"></span>running<span style="background:#7d8796"></span>destroying<span style="background:#3b6fd6"></span>checkpoint<span style="background:#b03a2e"></span>interruption<span style="background:#2e8b57"></span>resume</div>
<svg id="timeline" viewBox="0 0 {{.Width}} {{.Height}}" preserveAspectRatio="xMinYMin meet" role="img" aria-label="state timeline per attempt">
{{range $lane := .Lanes}}<g class="lane"><text x="8" y="{{add $lane.Y 17}}">{{$lane.Title}}</text>
{{range $lane.Segments}}<rect class="segment {{.Phase}}" x="{{.X}}" y="{{$lane.Y}}" width="{{.W}}" height="24" fill="{{color .Phase}}"><title>{{.Phase}}: {{.Start.Format "15:04:05.000"}} – {{.End.Format "15:04:05.000"}}</title></rect>
{{end}}</g>{{end}}
<g id="time-axis" class="axis"><line x1="170" x2="{{sub .Width 20}}" y1="{{.AxisY}}" y2="{{.AxisY}}" stroke="#5b6475"/>
{{range .Ticks}}<g class="tick"><line x1="{{.Pos}}" x2="{{.Pos}}" y1="{{$.AxisY}}" y2="{{add $.AxisY 5}}" stroke="#5b6475"/><text x="{{.Pos}}" y="{{add $.AxisY 17}}" text-anchor="middle">{{.Label}}</text></g>
{{end}}<text x="8" y="{{add .AxisY 17}}">time (m:ss)</text></g>
{{range .Marks}}<g class="mark {{.Kind}}"><line x1="{{.X}}" x2="{{.X}}" y1="{{.Y1}}" y2="{{.Y}}" stroke="{{markColor .Kind}}" stroke-width="{{if eq .Kind "checkpoint"}}1{{else}}2.5{{end}}" stroke-dasharray="{{if eq .Kind "checkpoint"}}3,3{{else}}none{{end}}"/><text class="mark-label" x="{{.X}}" y="{{.LabelY}}" text-anchor="{{.Anchor}}" fill="{{markColor .Kind}}">{{.Label}}</text><title>{{.Label}} at {{.At.Format "15:04:05"}}</title></g>
{{end}}</svg>

{{with .Metric}}<h2>{{.Name}} over steps</h2>
<div class="legend">{{range .Series}}<span style="background:{{.Color}}"></span>attempt {{.Attempt}}{{end}}{{if .ResumeStep}}<span style="background:#2e8b57"></span>resumed from step {{.ResumeStep}}{{end}}</div>
<svg id="metric" viewBox="0 0 1000 180" preserveAspectRatio="xMinYMin meet" role="img" aria-label="{{.Name}} over steps">
<g class="axis"><line x1="170" x2="980" y1="150" y2="150" stroke="#5b6475"/><line x1="170" x2="170" y1="16" y2="150" stroke="#5b6475"/>
{{range .XTicks}}<text x="{{.Pos}}" y="166" text-anchor="middle">{{.Label}}</text>{{end}}
{{range .YTicks}}<text x="162" y="{{add .Pos 4}}" text-anchor="end">{{.Label}}</text><line x1="170" x2="980" y1="{{.Pos}}" y2="{{.Pos}}" stroke="#eef0f4"/>{{end}}
<text x="8" y="84">{{.Name}}</text><text x="980" y="178" text-anchor="end">step</text></g>
{{range .Series}}<polyline class="metric-line" data-attempt="{{.Attempt}}" points="{{.Points}}" fill="none" stroke="{{.Color}}" stroke-width="2"/>
{{end}}{{if .ResumeStep}}<g id="resume-point"><line x1="{{.ResumeX}}" x2="{{.ResumeX}}" y1="16" y2="150" stroke="#2e8b57" stroke-width="2" stroke-dasharray="5,3"/><text x="{{add .ResumeX 4}}" y="28" fill="#2e8b57">resumed from {{.ResumeStep}}</text></g>{{end}}
</svg>{{end}}

<h2>Spend against the budget</h2>
<svg id="cost" viewBox="0 0 {{.Width}} 180" preserveAspectRatio="xMinYMin meet" role="img" aria-label="spend over time">
<g id="cost-axis" class="axis"><line x1="170" x2="170" y1="16" y2="150" stroke="#5b6475"/><line x1="170" x2="{{sub .Width 20}}" y1="150" y2="150" stroke="#5b6475"/>
{{range .CostTicks}}<g class="tick"><text x="162" y="{{add .Pos 4}}" text-anchor="end">{{.Label}}</text><line x1="170" x2="{{sub $.Width 20}}" y1="{{.Pos}}" y2="{{.Pos}}" stroke="#eef0f4"/></g>{{end}}
{{range .Ticks}}<text x="{{.Pos}}" y="166" text-anchor="middle">{{.Label}}</text>{{end}}</g>
{{if .BudgetOff}}<text id="budget-line" x="{{sub .Width 24}}" y="12" text-anchor="end" fill="#b03a2e">↑ {{.BudgetOff}}</text>{{else}}<line id="budget-line" x1="170" x2="{{sub .Width 20}}" y1="{{.BudgetY}}" y2="{{.BudgetY}}" stroke="#b03a2e" stroke-dasharray="6,4"/>
<text x="{{sub .Width 24}}" y="{{sub .BudgetY 4}}" text-anchor="end" fill="#b03a2e">budget {{usd .Receipt.Cost.MaxSpendUSD}}</text>{{end}}
<polyline id="cost-line" points="{{.CostPath}}" fill="none" stroke="#1d2330" stroke-width="2"/>
{{range .Attempts}}{{if .LabelX}}<text class="attempt-cost" x="{{.LabelX}}" y="{{.LabelY}}" text-anchor="middle">attempt {{.N}}: {{usd .CostUSD}}</text>{{end}}{{end}}
<text x="8" y="176">estimate {{usd .Receipt.Cost.EstimateUSD}} · charged {{ptr .Receipt.Cost.ChargedUSD}}</text>
</svg>

<h2>Attempts</h2>
<div class="wide"><table id="attempts"><tr><th>attempt</th><th>offer</th><th>instance</th><th>machine</th><th>GPU</th><th>$/h</th><th>cost</th><th>ended early</th><th>destroyed</th></tr>
{{range .Attempts}}<tr class="attempt"><td>{{.N}}</td><td>{{.A.OfferID}}</td><td>{{.A.InstanceID}}</td><td>{{.A.MachineID}}</td><td>{{.A.GPUName}} x{{.A.NumGPUs}}</td><td>{{usd .A.DPHTotal}}</td><td class="cost">{{usd .CostUSD}}{{if not .Charged}} (est.){{end}}</td><td>{{.Ended}}</td><td>{{if .A.Confirmed}}confirmed{{else}}NOT CONFIRMED{{end}}</td></tr>
{{end}}</table></div>

{{with .Receipt.Train}}<h2>Training</h2><div class="wide"><table id="train"><tr><th>checkpoint store</th><td><code>{{.CheckpointURI}}</code></td></tr>
{{with .LastCheckpoint}}<tr><th>last committed</th><td>step {{.Step}} · <code>{{.ManifestSHA256}}</code></td></tr>{{end}}
{{range .Resumes}}<tr><th>resume on {{.Instance}}</th><td>{{if eq .Restored "none"}}nothing restored (nothing was committed): started from the beginning{{else}}restored {{.RestoredStep}}, workload reported {{if .ReportedStep}}{{.ReportedStep}}{{else if .Interrupted}}nothing before the instance was interrupted ({{.Interrupted}}){{else}}nothing{{end}} — {{if .RegressedFrom}}started at step {{.FirstStep}}: did NOT resume{{else if .Proven}}proven{{if eq .ProvenBy "observed"}} by observation (read {{.Read}}){{end}}{{else}}NOT proven{{end}}{{end}}</td></tr>{{end}}
{{range $k, $v := .Result}}<tr><th>result: {{$k}}</th><td>{{value $v}}</td></tr>{{end}}
</table></div>{{end}}
{{if .Checkpoints}}<h2>Checkpoints</h2><ul id="checkpoints">{{range .Checkpoints}}<li>{{.Label}} at {{.At.Format "15:04:05"}}</li>{{end}}</ul>{{end}}
{{with .Receipt.Verify}}<h2>Verify checks</h2><div class="wide"><table id="verify">{{range .Checks}}<tr><th>{{.Name}}</th><td class="{{if .OK}}ok{{else}}notok{{end}}">{{if .OK}}ok{{else}}FAILED{{end}}</td><td>{{.Detail}}</td></tr>{{end}}</table></div>{{end}}
{{with .Receipt.Test}}<h2>Test</h2><p id="test">{{.Status}}</p>{{end}}
{{if .LogTail}}<h2>Last lines of {{.LogName}}</h2><pre id="log-tail">{{.LogTail}}</pre>{{end}}
{{with .Receipt.Canary}}<h2>Canary</h2><p id="canary">comparison: <strong>{{.Comparison}}</strong></p>{{if .Delta}}<table>{{range .Delta}}<tr><th>{{.Field}}</th><td>cpu: {{value .Local}}</td><td>gpu: {{value .GPU}}</td></tr>{{end}}</table>{{end}}{{end}}

<h2>Receipt</h2>
<pre id="receipt">{{.ReceiptJSON}}</pre>
</main></body></html>
`))
})
