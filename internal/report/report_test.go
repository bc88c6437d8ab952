package report

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/run"
)

func sample() (*run.Receipt, []journal.Record) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	charged := 0.021
	step := int64(200)
	r := &run.Receipt{
		Schema: run.ReceiptSchema, Workflow: "train", RunID: "mx1run", Label: "vastrun-mx1run-x-deadbeef", Outcome: run.OutcomePassed,
		Image: "ghcr.io/acme/t@sha256:" + strings.Repeat("ab", 32), Commit: "0123abcd", StartedAt: t0, FinishedAt: at(300),
		Attempts: []*run.Attempt{
			{OfferID: 1, InstanceID: 101, MachineID: 11, GPUName: "RTX 4090", NumGPUs: 1, DPHTotal: 0.35, Failure: "paused", Confirmed: true,
				IntentAt: at(1), RentedAt: at(2), RunningAt: at(20), DestroySentAt: at(120), ConfirmedAt: at(121)},
			{OfferID: 2, InstanceID: 102, MachineID: 12, GPUName: "RTX 3090", NumGPUs: 1, DPHTotal: 0.20, Confirmed: true,
				IntentAt: at(122), RentedAt: at(123), RunningAt: at(140), DestroySentAt: at(290), ConfirmedAt: at(291)},
		},
		Cost:    run.Receipt{}.Cost,
		Cleanup: run.ReceiptCleanup{Confirmed: true},
		Train: &run.TrainReport{CheckpointURI: "s3://b/p/mx1run", LastCheckpoint: &run.CheckpointRef{Step: 600, ManifestSHA256: strings.Repeat("cd", 32)},
			Resumes: []run.ResumeProof{{Instance: 102, RestoredStep: 200, ReportedStep: &step, Proven: true}}},
	}
	r.Cost.EstimateUSD, r.Cost.ChargedUSD, r.Cost.MaxSpendUSD = 0.0195, &charged, 0.05
	data := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	recs := []journal.Record{
		{Seq: 1, Time: at(60), Step: "checkpoint", Data: data(map[string]any{"step": 100})},
		{Seq: 2, Time: at(100), Step: "checkpoint", Data: data(map[string]any{"step": 200})},
		{Seq: 3, Time: at(119), Step: "failover", Data: data(map[string]any{"reason": "paused"})},
		{Seq: 4, Time: at(250), Step: "checkpoint", Data: data(map[string]any{"step": 600})},
	}
	return r, recs
}

func render(t *testing.T) (string, string) {
	r, recs := sample()
	var buf bytes.Buffer
	if err := HTML(&buf, Build(r, recs)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	os.WriteFile(path, buf.Bytes(), 0o644)
	return buf.String(), path
}

func TestHTMLIsSelfContained(t *testing.T) {
	html, _ := render(t)
	for _, want := range []string{`<svg id="timeline"`, `class="segment running"`, `id="cost-line"`, `id="budget-line"`, "checkpoint 600", "restored 200, workload reported 200", "proven", `class="badge good"`} {
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
