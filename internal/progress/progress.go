// Package progress shows a person what a run is doing while money is being
// spent: on a terminal one status line, redrawn at least once a second
// (spinner, phase, elapsed / deadline, $/h, dollars so far, and for
// training the step, checkpoints, ETA and spend against the budget); off a
// terminal a plain line at each phase change and at most every 30 s while
// waiting, with GitHub Actions groups (::group::) or GitLab collapsible
// sections per phase.
//
// Contract: the engine calls [Observer.Observe] at each phase change and
// whenever a figure changes; the [Display] is safe for concurrent use and
// never blocks the engine on the terminal's pace for longer than one write.
// Lines for people ([Display.Line]) and live workload output
// ([Display.Writer]) go through the display, so the status line is cleared
// before them and redrawn after; nothing else may write to the same stream
// while a status line is shown. All waiting is on the injected clock, so
// tests drive it without sleeping.
package progress

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vastrun/vastrun/internal/clock"
)

// Phases, in the order a run goes through them.
const (
	PhasePrepare  = "prepare"  // gate, paths, manifest: nothing rented
	PhaseSelect   = "select"   // choosing an offer, asking approval
	PhaseRent     = "rent"     // create sent
	PhaseReady    = "ready"    // waiting for the instance (scheduling, loading)
	PhaseVerify   = "verify"   // GPU, CUDA, image, disk checks and uploads
	PhaseTest     = "test"     // the ci test runs
	PhaseTrain    = "train"    // the training workload runs
	PhaseTeardown = "teardown" // destroy and confirm
	PhaseDone     = "done"
)

// Event is the run's state at one moment, as the engine sees it.
type Event struct {
	Phase    string
	Workflow string
	Run      string // the run's id
	Instance int64
	Attempt  int // 1-based; 0 before renting
	// Deadline bounds the phase (zero: none).
	Deadline time.Time
	// DPH is the $/h of the rental now billing (0: nothing billing).
	DPH float64
	// SpentUSD is the estimated spend at At; the display adds DPH × the time
	// since, so dollars keep moving between events.
	SpentUSD  float64
	BudgetUSD float64
	At        time.Time
	// Training: the last committed checkpoint step (-1: none yet), how many
	// were committed, and the workload's own step and total when it reports
	// them through $VASTRUN_METRICS (0: unknown).
	CheckpointStep int64
	Checkpoints    int
	Step, Total    int64
	// Warning is the run's newest warning (a restart that restored
	// nothing, a workload that did not resume), kept on the line.
	Warning string
	// Outcome is set with PhaseDone.
	Outcome string
}

// Observer receives events from the engine.
type Observer interface{ Observe(Event) }

// Mode is how the display writes.
type Mode int

const (
	ModeTerminal Mode = iota // redraw one status line
	ModePlain                // plain lines
	ModeGitHub               // plain lines in ::group:: folds
	ModeGitLab               // plain lines in collapsible sections
	ModeQuiet                // nothing but warnings and errors
)

// Options configure a display.
type Options struct {
	// Out is for people (stderr, a CI log): its writes are not checked, as
	// one the terminal refuses cannot be reported anywhere.
	Out   io.Writer
	Clock clock.Clock
	Mode  Mode
	// Color enables styling on a terminal (off with NO_COLOR).
	Color bool
	// Width is the terminal's width; lines are cut to it (0: 100).
	Width func() int
	// Redact masks secrets in every line.
	Redact func(string) string
	// Redraw is the terminal redraw interval (default 1 s), Every the most
	// time between plain lines while a phase waits (default 30 s).
	Redraw, Every time.Duration
	// Speed, above 1, says Clock is a simulator's running Speed times the
	// wall clock (--sim): times are shown in wall time, the simulated ones
	// beside them labelled "sim".
	Speed float64
}

// Display renders events and lines for people.
type Display struct {
	o Options

	mu        sync.Mutex
	ev        Event
	phaseAt   time.Time
	detail    string // the last line for people, shown on the status line
	shown     bool   // a status line is on screen
	frame     int
	lastPlain time.Time
	group     string // the open fold
	stop      chan struct{}
	stopped   bool
	held      bool // a prompt is on screen: no status line
	// The pace of the current attempt's work (etaLocked): the step it
	// started from and when.
	rateStep int64
	rateAt   time.Time
	wg       sync.WaitGroup
	partial  []byte // workload output up to its next newline
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// New starts a display; Close stops it.
func New(o Options) *Display {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	if o.Redraw <= 0 {
		o.Redraw = time.Second
	}
	if o.Every <= 0 {
		o.Every = 30 * time.Second
	}
	d := &Display{o: o, stop: make(chan struct{})}
	d.wg.Add(1)
	go d.tick()
	return d
}

// tick redraws the status line (terminal) or prints a waiting line (plain)
// on the display's clock.
func (d *Display) tick() {
	defer d.wg.Done()
	for {
		interval := d.o.Redraw
		if d.o.Mode != ModeTerminal {
			interval = d.o.Every
		}
		select {
		case <-d.stop:
			return
		case <-d.o.Clock.After(interval):
		}
		d.mu.Lock()
		switch d.o.Mode {
		case ModeTerminal:
			d.frame++
			d.drawLocked()
		case ModePlain, ModeGitHub, ModeGitLab:
			if d.waitingLocked() && !d.o.Clock.Now().Before(d.lastPlain.Add(d.o.Every)) {
				d.plainLocked()
			}
		}
		d.mu.Unlock()
	}
}

// waitingLocked reports a phase worth a status: one that bills or waits.
func (d *Display) waitingLocked() bool {
	switch d.ev.Phase {
	case "", PhasePrepare, PhaseSelect, PhaseDone:
		return false
	}
	return true
}

// Observe takes a new event from the engine.
func (d *Display) Observe(ev Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := ev.Phase != d.ev.Phase || ev.Attempt != d.ev.Attempt
	if ev.At.IsZero() {
		ev.At = d.o.Clock.Now()
	}
	d.ev = ev
	if !changed && ev.Step > 0 && ev.Step < d.rateStep {
		d.rateStep, d.rateAt = ev.Step, ev.At // the workload restarted below its checkpoint
	}
	if !changed {
		if d.o.Mode == ModeTerminal {
			d.drawLocked()
		}
		return
	}
	d.phaseAt = ev.At
	d.detail = ""
	// A new phase or attempt starts its pace afresh, from the step it
	// resumes at (the last committed checkpoint; 0 without one).
	d.rateStep, d.rateAt = max(0, ev.CheckpointStep), ev.At
	switch d.o.Mode {
	case ModeTerminal:
		d.drawLocked()
	case ModePlain, ModeGitHub, ModeGitLab:
		d.foldLocked(ev)
		if ev.Phase != PhaseDone {
			d.plainLocked()
		}
	}
}

// foldLocked closes the open group or section and opens one per phase.
func (d *Display) foldLocked(ev Event) {
	now := d.o.Clock.Now()
	switch d.o.Mode {
	case ModeGitHub:
		if d.group != "" {
			d.printf("::endgroup::\n")
		}
		d.group = ""
		if ev.Phase != PhaseDone {
			d.group = ev.Phase
			d.printf("::group::vastrun: %s\n", d.o.Redact(Title(ev)))
		}
	case ModeGitLab:
		// https://docs.gitlab.com/ci/jobs/job_logs/#custom-collapsible-sections
		if d.group != "" {
			d.printf("%ssection_end:%d:vastrun_%s\r%s\n", ansi.EraseEntireLine, now.Unix(), d.group, ansi.EraseEntireLine)
		}
		d.group = ""
		if ev.Phase != PhaseDone {
			d.group = strings.ReplaceAll(ev.Phase, " ", "_")
			d.printf("%ssection_start:%d:vastrun_%s[collapsed=true]\r%svastrun: %s\n", ansi.EraseEntireLine, now.Unix(), d.group, ansi.EraseEntireLine, d.o.Redact(Title(ev)))
		}
	}
}

func (d *Display) plainLocked() {
	d.lastPlain = d.o.Clock.Now()
	d.printf("vastrun: %s\n", d.o.Redact(d.statusLocked(false)))
}

// drawLocked redraws the status line in place, cut to the terminal width.
func (d *Display) drawLocked() {
	if d.stopped || d.held || !d.waitingLocked() {
		d.clearLocked()
		return
	}
	line := d.o.Redact(d.statusLocked(true))
	d.printf("%s", "\r"+ansi.Truncate(line, d.width()-1, "…")+ansi.EraseLineRight)
	d.shown = true
}

// printf writes to Out (see Options.Out).
func (d *Display) printf(format string, args ...any) {
	fmt.Fprintf(d.o.Out, format, args...) //nolint:errcheck // Out is for people; a refused write cannot be reported
}

func (d *Display) width() int {
	if d.o.Width != nil {
		if w := d.o.Width(); w > 10 {
			return w
		}
	}
	return 120
}

func (d *Display) clearLocked() {
	if d.shown {
		d.printf("%s", "\r"+ansi.EraseEntireLine)
		d.shown = false
	}
}

// Title is what a phase is doing, in words ("testing on instance 7").
func Title(ev Event) string {
	inst := ""
	if ev.Instance != 0 {
		inst = fmt.Sprintf(" instance %d", ev.Instance)
	}
	att := ""
	if ev.Attempt > 1 {
		att = fmt.Sprintf(" (attempt %d)", ev.Attempt)
	}
	switch ev.Phase {
	case PhasePrepare:
		return "preparing (gate, manifest): nothing rented yet"
	case PhaseSelect:
		return "choosing an offer"
	case PhaseRent:
		return "renting" + att
	case PhaseReady:
		return "waiting for" + inst + att
	case PhaseVerify:
		return "verifying" + inst
	case PhaseTest:
		return "testing on" + inst
	case PhaseTrain:
		return "training on" + inst + att
	case PhaseTeardown:
		return "destroying" + inst + " and confirming"
	case PhaseDone:
		return "done: " + ev.Outcome
	}
	return ev.Phase
}

// statusLocked is the status line: what, how long against what deadline,
// what it costs, and for training how far it got.
func (d *Display) statusLocked(styled bool) string {
	ev := d.ev
	now := d.o.Clock.Now()
	st := styles(styled && d.o.Color)
	var parts []string
	head := Title(ev)
	if styled {
		head = st.spin.Render(spinner[d.frame%len(spinner)]) + " " + st.phase.Render(head)
	}
	parts = append(parts, head)
	elapsed := now.Sub(d.phaseAt)
	clockPart := Duration(d.wall(elapsed))
	simPart := Duration(elapsed)
	if !ev.Deadline.IsZero() {
		clockPart += " / " + Duration(d.wall(ev.Deadline.Sub(d.phaseAt)))
		simPart += " / " + Duration(ev.Deadline.Sub(d.phaseAt))
	}
	if d.simulated() {
		clockPart += fmt.Sprintf(" (sim %s at %g×)", simPart, d.o.Speed)
	}
	parts = append(parts, clockPart)
	if ev.Phase == PhaseTrain {
		var tp []string
		switch {
		case ev.Step > 0 && ev.Total > 0:
			tp = append(tp, fmt.Sprintf("step %d/%d", ev.Step, ev.Total))
		case ev.Step > 0:
			tp = append(tp, fmt.Sprintf("step %d", ev.Step))
		}
		if ev.Checkpoints > 0 {
			tp = append(tp, fmt.Sprintf("%d checkpoints, last %d", ev.Checkpoints, ev.CheckpointStep))
		} else {
			tp = append(tp, "no checkpoint yet")
		}
		if eta, ok := d.etaLocked(); ok {
			e := "ETA " + Duration(d.wall(eta))
			if d.simulated() {
				e += " (sim " + Duration(eta) + ")"
			}
			tp = append(tp, e)
		}
		parts = append(parts, strings.Join(tp, ", "))
	}
	spent := d.spentLocked(now)
	if ev.DPH > 0 {
		money := fmt.Sprintf("$%.4f/h, %s so far", ev.DPH, USD(spent))
		if ev.BudgetUSD > 0 {
			money = fmt.Sprintf("$%.4f/h, %s of %s", ev.DPH, USD(spent), USD(ev.BudgetUSD)) // of the budget
		}
		parts = append(parts, st.money.Render(money))
	} else if spent > 0 {
		parts = append(parts, st.money.Render(USD(spent)+" spent"))
	}
	// A warning and the instance's own status go last: on a narrow
	// terminal they are what gets cut, never the time or the money (the
	// warning was also printed in full above the line).
	if ev.Warning != "" && ev.Phase == PhaseTrain {
		parts = append(parts, "warning: "+ansi.Truncate(ev.Warning, 48, "…"))
	}
	if d.detail != "" && (ev.Phase == PhaseReady || ev.Phase == PhaseTeardown) {
		parts = append(parts, ansi.Truncate(d.detail, 60, "…"))
	}
	return strings.Join(parts, " · ")
}

// etaLocked projects the remaining steps at the current attempt's pace:
// the steps done in this attempt (from the step it resumed at) over the
// time since it began. The run's absolute step over the attempt's time
// made the ETA of a resumed run rise while it progressed; this one falls
// while the steps come at a steady pace.
func (d *Display) etaLocked() (time.Duration, bool) {
	ev := d.ev
	if ev.Total <= 0 || ev.Step <= 0 || ev.Step >= ev.Total {
		return 0, false
	}
	done, el := ev.Step-d.rateStep, ev.At.Sub(d.rateAt)
	if done <= 0 || el <= 0 {
		return 0, false
	}
	perStep := float64(el) / float64(done)
	return time.Duration(perStep * float64(ev.Total-ev.Step)), true
}

// simulated reports a display on a simulator's faster clock (Options.Speed).
func (d *Display) simulated() bool { return d.o.Speed > 1 }

// wall is a span of the display's clock in wall time.
func (d *Display) wall(x time.Duration) time.Duration {
	if !d.simulated() {
		return x
	}
	return time.Duration(float64(x) / d.o.Speed)
}

func (d *Display) spentLocked(now time.Time) float64 {
	ev := d.ev
	s := ev.SpentUSD
	if ev.DPH > 0 && now.After(ev.At) {
		s += ev.DPH * now.Sub(ev.At).Hours()
	}
	return s
}

// Line prints one line for people above the status line. Lines that start
// with "warning: " become warning annotations on GitHub.
func (d *Display) Line(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s = d.o.Redact(s)
	if d.o.Mode == ModeQuiet && !strings.HasPrefix(s, "warning: ") {
		return
	}
	d.clearLocked()
	if d.o.Mode == ModeGitHub && strings.HasPrefix(s, "warning: ") {
		d.printf("::warning title=vastrun::%s\n", escapeGH(strings.TrimPrefix(s, "warning: ")))
	}
	d.printf("vastrun: %s\n", s)
	if !strings.HasPrefix(s, "hint: ") {
		d.detail = strings.TrimSpace(s)
		// "instance 7 loading: Pulling fs layer" -> "loading: Pulling fs
		// layer": the status line names the instance already.
		if f := strings.SplitN(d.detail, " ", 3); len(f) == 3 && f[0] == "instance" {
			d.detail = f[2]
		}
	}
	if d.o.Mode == ModeTerminal {
		d.drawLocked()
	}
}

// Infof is Line with formatting (the engine's Reporter).
func (d *Display) Infof(format string, args ...any) { d.Line(fmt.Sprintf(format, args...)) }

// Annotate prints a failure (level "error") or warning for the CI system:
// a GitHub annotation, or a plain line elsewhere.
func (d *Display) Annotate(level, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clearLocked()
	msg = d.o.Redact(strings.ReplaceAll(msg, "\n", " "))
	if d.o.Mode == ModeGitHub {
		d.printf("::%s title=vastrun::%s\n", level, escapeGH(msg))
	}
}

func escapeGH(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// Writer is where live workload output goes: whole lines, printed above
// the status line (the engine has redacted them already).
func (d *Display) Writer() io.Writer { return outputWriter{d} }

type outputWriter struct{ d *Display }

func (w outputWriter) Write(p []byte) (int, error) {
	d := w.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.o.Mode == ModeQuiet {
		return len(p), nil
	}
	buf := append(d.partial, p...)
	i := strings.LastIndexByte(string(buf), '\n')
	if i < 0 {
		d.partial = buf
		return len(p), nil
	}
	d.clearLocked()
	d.printf("%s", buf[:i+1])
	d.partial = append([]byte(nil), buf[i+1:]...)
	if d.o.Mode == ModeTerminal {
		d.drawLocked()
	}
	return len(p), nil
}

// Hold takes the status line off the screen while a prompt waits for an
// answer (hold true) and lets it return afterwards (false).
func (d *Display) Hold(hold bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = hold
	if hold {
		d.clearLocked()
	} else if d.o.Mode == ModeTerminal {
		d.drawLocked()
	}
}

// Close stops redrawing, clears the status line and closes an open fold.
func (d *Display) Close() {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	d.stopped = true
	close(d.stop)
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.partial) > 0 {
		d.clearLocked()
		d.printf("%s\n", d.partial)
		d.partial = nil
	}
	d.clearLocked()
	if d.group != "" {
		d.foldLocked(Event{Phase: PhaseDone})
	}
}

type styleSet struct{ spin, phase, money lipgloss.Style }

func styles(color bool) styleSet {
	if !color {
		return styleSet{lipgloss.NewStyle(), lipgloss.NewStyle(), lipgloss.NewStyle()}
	}
	return styleSet{
		spin:  lipgloss.NewStyle().Foreground(lipgloss.Color("6")),
		phase: lipgloss.NewStyle().Bold(true),
		money: lipgloss.NewStyle().Foreground(lipgloss.Color("3")),
	}
}

// Duration renders a duration for people: 0:07, 12:05, 1:02:03.
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// USD renders dollars: four decimals below $1 (rentals cost cents), two above.
func USD(x float64) string {
	if math.Abs(x) < 1 {
		return fmt.Sprintf("$%.4f", x)
	}
	return fmt.Sprintf("$%.2f", x)
}
