package report

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/receipt"
)

func sample() (*receipt.Receipt, []journal.Record) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	charged := 0.021
	step := int64(200)
	r := &receipt.Receipt{
		Schema: receipt.Schema, Workflow: "train", RunID: "mx1run", Label: "vastrun-mx1run-x-deadbeef", Outcome: receipt.Passed,
		Image: "ghcr.io/acme/t@sha256:" + strings.Repeat("ab", 32), Commit: "0123abcd", StartedAt: t0, FinishedAt: at(300),
		Attempts: []*receipt.Attempt{
			{OfferID: 1, InstanceID: 101, MachineID: 11, GPUName: "RTX 4090", NumGPUs: 1, DPHTotal: 0.35, Failure: "paused", Confirmed: true,
				IntentAt: at(1), RentedAt: at(2), RunningAt: at(20), DestroySentAt: at(120), ConfirmedAt: at(121)},
			{OfferID: 2, InstanceID: 102, MachineID: 12, GPUName: "RTX 3090", NumGPUs: 1, DPHTotal: 0.20, Confirmed: true,
				IntentAt: at(122), RentedAt: at(123), RunningAt: at(140), DestroySentAt: at(290), ConfirmedAt: at(291)},
		},
		Cost:    receipt.Receipt{}.Cost,
		Cleanup: receipt.Cleanup{Confirmed: true},
		Sections: receipt.Sections{Train: &receipt.TrainReport{CheckpointURI: "s3://b/p/mx1run", LastCheckpoint: &receipt.CheckpointRef{Step: 600, ManifestSHA256: strings.Repeat("cd", 32)},
			Resumes: []receipt.ResumeProof{{Instance: 102, RestoredStep: 200, ReportedStep: &step, Proven: true}}}},
	}
	r.Cost.EstimateUSD, r.Cost.ChargedUSD, r.Cost.MaxSpendUSD = 0.0195, &charged, 0.05
	data := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	recs := []journal.Record{
		{Seq: 1, Time: at(60), Step: "checkpoint", Data: data(map[string]any{"step": 100})},
		{Seq: 2, Time: at(100), Step: "checkpoint", Data: data(map[string]any{"step": 200})},
		{Seq: 3, Time: at(119), Step: "failover", Data: data(map[string]any{"reason": "paused (cur/intended/next state stopped): outbid or stopped"})},
		{Seq: 4, Time: at(145), Step: "restore", Data: data(map[string]any{"step": 200})},
		{Seq: 5, Time: at(250), Step: "checkpoint", Data: data(map[string]any{"step": 500})},
	}
	return r, recs
}

// metrics are the workload's loss over steps: attempt 1 to step 250, then
// attempt 2 from the restored step 200 to 600.
func metrics() []map[string]any {
	var ms []map[string]any
	for s := 20; s <= 250; s += 20 {
		ms = append(ms, map[string]any{"step": float64(s), "loss": 1 / float64(s), "attempt": 1.0})
	}
	for s := 220; s <= 600; s += 20 {
		ms = append(ms, map[string]any{"step": float64(s), "loss": 1 / float64(s), "attempt": 2.0})
	}
	return ms
}

func render(t *testing.T) (string, string) {
	r, recs := sample()
	var buf bytes.Buffer
	if err := HTML(&buf, BuildWith(r, recs, Extras{Metrics: metrics(), LogName: "train.attempt-2.log", LogTail: "step 600 loss 0.0016\nfinal loss 0.0016"})); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	os.WriteFile(path, buf.Bytes(), 0o644)
	return buf.String(), path
}

func TestHTMLIsSelfContained(t *testing.T) {
	html, _ := render(t)
	for _, want := range []string{`<svg id="timeline"`, `class="segment running"`, `id="cost-line"`, `id="budget-line"`, "ckpt 600", "restored 200, workload reported 200", "proven", `class="badge good"`} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %s", want)
		}
	}
	for _, external := range []string{"http://", "https://", "<script src", "<link "} {
		if strings.Contains(html, external) {
			t.Errorf("report refers to something outside itself: %s", external)
		}
	}
}

func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("VASTRUN_TEST_CHROMIUM_REQUIRED") != "" {
		t.Fatal("VASTRUN_TEST_CHROMIUM_REQUIRED is set but no chromium is installed")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

func headless(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir()}
	out, err := exec.Command(bin, append(base, args...)...).Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return out
}

// TestRendersInChromium loads the page in headless Chromium: the DOM it
// builds must hold the timeline with one bar per phase of each attempt,
// the cost line and the outcome, and a screenshot must show a real page.
func TestRendersInChromium(t *testing.T) {
	bin := chromium(t)
	_, path := render(t)
	dom := string(headless(t, bin, "--dump-dom", "file://"+path))
	if n := strings.Count(dom, `class="segment `); n != 8 {
		t.Errorf("timeline has %d phase bars, want 8 (4 per attempt)", n)
	}
	for _, want := range []string{`id="cost-line"`, `id="outcome"`, ">passed<", `class="mark checkpoint"`, `class="mark interruption"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %s", want)
		}
	}
	checkDOM(t, dom)
	shot := filepath.Join(t.TempDir(), "report.png")
	headless(t, bin, "--screenshot="+shot, "--window-size=1100,1400", "file://"+path)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	colors := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bb, _ := img.At(x, y).RGBA()
			colors[r>>12<<8|g>>12<<4|bb>>12] = true
		}
	}
	if b.Dx() != 1100 || len(colors) < 8 {
		t.Fatalf("screenshot %dx%d with %d distinct colours: not a rendered report", b.Dx(), b.Dy(), len(colors))
	}
}

// checkDOM asserts what makes the page readable at a glance, on the DOM
// Chromium built: a labelled time axis, named markers, the metric curve
// per attempt with the resume point, spend on a dollar axis with each
// attempt's cost, the total in the header, attempts numbered from 1, and
// SVGs that scale with the window.
func checkDOM(t *testing.T, dom string) {
	t.Helper()
	re := func(p string) *regexp.Regexp { return regexp.MustCompile(p) }
	// Time axis: ticks at round offsets of the 5-minute run, labelled m:ss.
	axis := re(`(?s)<g id="time-axis".*?</g>\s*<g class="mark`).FindString(dom)
	ticks := re(`<text[^>]*>(\d+:\d\d)</text>`).FindAllStringSubmatch(axis, -1)
	if len(ticks) < 4 || ticks[0][1] != "0:00" || ticks[len(ticks)-1][1] != "5:00" {
		t.Errorf("time axis ticks %v, want 0:00 … 5:00", ticks)
	}
	// Markers carry their labels in the picture, not only in tooltips.
	for _, want := range []string{
		`<g class="mark checkpoint">.*?<text class="mark-label"[^>]*>ckpt 100</text>`,
		`<g class="mark checkpoint">.*?<text class="mark-label"[^>]*>ckpt 500</text>`,
		`<g class="mark interruption">.*?<text class="mark-label"[^>]*>interrupted: the host stopped the instance \(outbid or preempted\)</text>`,
		`<g class="mark resume">.*?<text class="mark-label"[^>]*>resumed from 200</text>`,
	} {
		if !re(want).MatchString(dom) {
			t.Errorf("timeline lacks the labelled marker %s", want)
		}
	}
	// The loss over steps: one curve per attempt, and the resume point at
	// the restored step, between the ticks for steps 0 and 600.
	if n := len(re(`<polyline class="metric-line" data-attempt="[12]"`).FindAllString(dom, -1)); n != 2 {
		t.Errorf("%d metric curves, want one per attempt (2)", n)
	}
	resume := re(`<g id="resume-point"><line x1="([0-9.]+)"[^>]*>.*?resumed from 200</text>`).FindStringSubmatch(dom)
	if resume == nil {
		t.Fatal("the metric chart does not mark the resume point")
	}
	x, _ := strconv.ParseFloat(resume[1], 64)
	if want := 170 + (1000-170-20)*200.0/600; math.Abs(x-want) > 0.5 {
		t.Errorf("resume point at x=%.1f, want %.1f (step 200 of 0–600)", x, want)
	}
	if !re(`<text x="[0-9.]+" y="166" text-anchor="middle">600</text>`).MatchString(dom) {
		t.Error("the metric chart has no step axis up to 600")
	}
	// Spend: a dollar axis from $0 up past the budget, and each attempt's cost.
	costAxis := re(`(?s)<g id="cost-axis".*?</g>\s*<line id="budget-line"`).FindString(dom)
	dollars := re(`text-anchor="end">(\$[0-9.]+)</text>`).FindAllStringSubmatch(costAxis, -1)
	if len(dollars) != 5 || dollars[0][1] != "$0.0000" {
		t.Errorf("spend axis labels %v, want five from $0.0000", dollars)
	}
	// Attempt 1: 0.35 $/h for 119 s; attempt 2: 0.20 $/h for 168 s.
	for _, want := range []string{`class="attempt-cost"[^>]*>attempt 1: \$0\.0116</text>`, `class="attempt-cost"[^>]*>attempt 2: \$0\.0093</text>`} {
		if !re(want).MatchString(dom) {
			t.Errorf("spend chart lacks %s", want)
		}
	}
	if !re(`<span id="total"[^>]*>\$0\.0210 charged</span>`).MatchString(dom) {
		t.Error("the header lacks the total cost")
	}
	rows := re(`<tr class="attempt"><td>(\d+)</td>`).FindAllStringSubmatch(dom, -1)
	if len(rows) != 2 || rows[0][1] != "1" || rows[1][1] != "2" || !strings.Contains(dom, "attempt 1 · 101") {
		t.Errorf("attempts numbered %v; want 1 and 2, as on the timeline", rows)
	}
	if !strings.Contains(dom, "the host stopped the instance (outbid or preempted)</td>") {
		t.Error("the attempts table does not say in words why attempt 1 ended")
	}
	if !strings.Contains(dom, "<li>ckpt 600 at") {
		t.Error("the checkpoint list stops before the last committed checkpoint (600)")
	}
	if strings.Contains(dom, `<svg id="timeline" width=`) || !strings.Contains(dom, `preserveAspectRatio`) {
		t.Error("SVGs have a fixed width: the page scrolls sideways on a narrow window")
	}
}

// TestNarrowWindowDoesNotScrollSideways lays the page out at phone width
// in Chromium: its scroll width must not exceed the window's (a probe
// script, added to a copy of the page for this test only, reads it).
func TestNarrowWindowDoesNotScrollSideways(t *testing.T) {
	bin := chromium(t)
	html, _ := render(t)
	probe := `<script>document.body.setAttribute("data-scroll-width", document.documentElement.scrollWidth);document.body.setAttribute("data-client-width", document.documentElement.clientWidth)</script></body>`
	path := filepath.Join(t.TempDir(), "narrow.html")
	os.WriteFile(path, []byte(strings.Replace(html, "</body>", probe, 1)), 0o644)
	dom := string(headless(t, bin, "--window-size=420,1400", "--dump-dom", "file://"+path))
	m := regexp.MustCompile(`data-scroll-width="(\d+)" data-client-width="(\d+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatal("the probe did not run")
	}
	sw, _ := strconv.Atoi(m[1])
	cw, _ := strconv.Atoi(m[2])
	if cw == 0 || cw > 600 || sw > cw { // headless Chromium keeps a viewport of a little under 500 px at least
		t.Fatalf("at a 420 px window the page is %d px wide in a %d px viewport: it scrolls sideways", sw, cw)
	}
}

// After a resume the timeline is drawn per attempt: each mark on the lane
// of the attempt whose journal records hold it and within its span, and a
// checkpoint the resumed controller journals again is drawn once.
func TestTimelinePerAttempt(t *testing.T) {
	r, _ := sample()
	t0 := r.StartedAt
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	data := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	recs := []journal.Record{
		{Seq: 1, Time: at(1), Type: "intent", Step: "rent", Data: data(map[string]any{"offer_id": 1})},
		{Seq: 2, Time: at(60), Type: "event", Step: "checkpoint", Data: data(map[string]any{"step": 100})},
		{Seq: 3, Time: at(100), Type: "event", Step: "checkpoint", Data: data(map[string]any{"step": 200})},
		{Seq: 4, Time: at(119), Type: "event", Step: "failover", Data: data(map[string]any{"reason": "paused"})},
		{Seq: 5, Time: at(122), Type: "intent", Step: "rent", Data: data(map[string]any{"offer_id": 2})},
		// A record whose time lies before its attempt (another process's
		// clock) is drawn at its attempt's start, not among attempt 1's.
		{Seq: 6, Time: at(50), Type: "event", Step: "restore", Data: data(map[string]any{"step": 200})},
		{Seq: 7, Time: at(150), Type: "event", Step: "checkpoint", Data: data(map[string]any{"step": 200})},
		{Seq: 8, Time: at(250), Type: "event", Step: "checkpoint", Data: data(map[string]any{"step": 300})},
	}
	p := Build(r, recs)
	byLabel := map[string][]Mark{}
	for _, m := range p.Marks {
		key := m.Label
		if m.Kind == "interruption" {
			key = "interruption"
		}
		byLabel[key] = append(byLabel[key], m)
	}
	if n := len(byLabel["ckpt 200"]); n != 1 {
		t.Fatalf("ckpt 200 drawn %d times", n)
	}
	lane1, lane2 := p.Lanes[0], p.Lanes[1]
	for label, lane := range map[string]Lane{"ckpt 100": lane1, "ckpt 200": lane1, "interruption": lane1, "resumed from 200": lane2, "ckpt 300": lane2} {
		ms := byLabel[label]
		if len(ms) != 1 {
			t.Fatalf("%s: %d marks", label, len(ms))
		}
		first, last := lane.Segments[0], lane.Segments[len(lane.Segments)-1]
		if m := ms[0]; m.Y1 != lane.Y || m.X < first.X || m.X > last.X+last.W {
			t.Errorf("%s at x %.1f y1 %.0f, want on %s (y %.0f, x %.1f–%.1f)", label, m.X, m.Y1, lane.Title, lane.Y, first.X, last.X+last.W)
		}
	}
}
