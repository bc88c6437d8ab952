package sim

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// logLine is one container log line, stamped in simulated time; it is
// shown with the reported (wall-clock) time.
type logLine struct {
	at   time.Time
	text string
}

// instance is one rented contract and its simulated container.
type instance struct {
	ID    int64
	Offer *offer
	Label string
	Image string
	// ImageUUID is what the host reports it runs (normally Image).
	ImageUUID string
	Disk      float64
	Env       [][2]string
	Onstart   string
	Runtype   string
	Args      []string
	IsBid     bool
	Bid       float64
	APIKey    string
	Created   time.Time
	Template  *template // nil: created from an image alone

	Actual, Intended, Cur, Next string
	StatusMsg                   string
	RunningSince                time.Time // when the container last started running
	nextAt                      time.Time // next automatic transition; zero = none
	nextState                   string
	loadFor                     time.Duration
	pullFails                   bool
	pullBytes                   int64         // the image's compressed size (0: unknown)
	pullStalls                  bool          // the pull never progresses (pull_stall)
	loadingSince                time.Time     // when the pull began
	pullMsg                     string        // the docker error when pullFails; default "manifest unknown"
	preemptAfter                time.Duration // >0: pause this long after running starts
	killPending                 bool          // processes must die (paused by a scheduled fault)
	mkt                         *market
	marketAt                    time.Time // market moves are applied up to here
	outbid                      bool      // stopped by the market, resumes when the bid is above it
	Outbids                     int       // times the market stopped it
	destroyedBy                 string    // the kind of key whose call destroyed it
	outbidAfter                 Fault     // a scheduled outbid, armed when it first runs
	Destroyed                   bool

	// The contract (priceincrease.go): its on-demand GPU price once its
	// host raised the ask (0: the offer's), when it ends short of its
	// host's end date (a price increase not accepted), a scheduled
	// increase armed when it first runs, and whether it has expired.
	gpuPrice     float64
	endAt        time.Time
	priceAfter   Fault
	hostEndAfter Fault // its host leaves Seconds after it first runs
	expired      bool

	// Billing, accrued lazily up to billedTo.
	billedTo   time.Time
	GPUCost    float64
	DiskCost   float64
	RunSeconds float64

	AttachedKeys []string
	logLines     []logLine
	readLag      int // show/list reads for which the instance is still invisible

	sshRefuseUntil time.Time
	sshRefuseConns int
	// stopAtSSH: the first SSH connection once running stops the instance.
	stopAtSSH bool
	// hiddenUntil: a late create, not there for anyone until then (landed
	// says its arrival has been counted).
	hiddenUntil time.Time
	landed      bool

	sandbox  string
	box      *imageBox // image path (Config.Images): the instance's container; nil: the host sandbox
	awaitBox bool      // due to run, waiting for the image pull
	sshMu    sync.Mutex
	sshPort  int
	ln       net.Listener
	closeFn  func()
	sessions *sshState
}

// storageDPH and totalDPH are the instance's prices in $/h.
func (in *instance) storageDPH() float64 { return in.Offer.storageDPH(in.Disk) }

func (in *instance) gpuDPH() float64 {
	switch {
	case in.IsBid:
		return in.Bid
	case in.gpuPrice > 0:
		return in.gpuPrice
	}
	return in.Offer.DPHBase
}

// rates returns the $/h billed in the current state: GPU only while
// running; storage whenever the instance exists and the host is not offline.
func (in *instance) rates() (gpu, disk float64) {
	switch in.Actual {
	case "offline":
		return 0, 0
	case "running":
		return in.gpuDPH(), in.storageDPH()
	default:
		return 0, in.storageDPH()
	}
}

func (in *instance) accrue(to time.Time) {
	if !to.After(in.billedTo) {
		return
	}
	secs := to.Sub(in.billedTo).Seconds()
	gpu, disk := in.rates()
	in.GPUCost += gpu * secs / 3600
	in.DiskCost += disk * secs / 3600
	if in.Actual == "running" {
		in.RunSeconds += secs
	}
	in.billedTo = to
}

// advance runs due transitions, billing each interval at its own rate.
// A contract that ends by now expires at its end, the time before it
// billed as it ran.
func (in *instance) advance(now time.Time) {
	if in.Destroyed {
		return
	}
	in.askIncreases(now)
	if end := in.contractEnd(); !in.expired && !end.IsZero() && !now.Before(end) {
		in.marketTo(end)
		in.expire(end)
	}
	in.marketTo(now)
	in.pullProgress(now)
}

// runTo runs the boot sequence's transitions due by now, billing each
// interval at its own rate.
func (in *instance) runTo(now time.Time) {
	for !in.nextAt.IsZero() && !in.nextAt.After(now) {
		at := in.nextAt
		in.accrue(at)
		in.nextAt = time.Time{}
		in.enter(in.nextState, at)
	}
	if in.awaitBox {
		if st, _ := in.box.status(); st != boxPulling {
			in.accrue(now)
			in.awaitBox = false
			in.enter("running", now)
		}
	}
	in.accrue(now)
}

func (in *instance) logf(at time.Time, format string, args ...any) {
	in.logLines = append(in.logLines, logLine{at: at, text: fmt.Sprintf(format, args...)})
}

// enter performs the automatic transitions of the boot sequence.
func (in *instance) enter(state string, at time.Time) {
	switch state {
	case "loading":
		if in.pullFails {
			in.Actual = "created"
			in.StatusMsg = fmt.Sprintf("Error response from daemon: manifest for %s not found: manifest unknown: manifest unknown", in.Image)
			if in.pullMsg != "" {
				in.StatusMsg = in.pullMsg
			}
			in.logf(at, "%s", in.StatusMsg)
			return
		}
		in.Actual = "loading"
		in.StatusMsg = "a1b2c3d4e5f6: Pulling fs layer"
		in.logf(at, "Pulling image %s", in.Image)
		in.loadingSince = at
		if in.pullStalls { // never done, never a new message
			return
		}
		in.nextAt, in.nextState = at.Add(in.loadFor), "running"
	case "preempted":
		in.Actual, in.Intended, in.Cur, in.Next, in.StatusMsg = "stopped", "stopped", "stopped", "stopped", ""
		in.IsBid = true
		in.killPending = true
		in.logf(at, "instance paused: outbid")
	case "running":
		if in.box != nil {
			switch st, msg := in.box.status(); st {
			case boxPulling: // loading lasts as long as the pull (runTo checks again)
				in.awaitBox = true
				return
			case boxFailed:
				in.Actual, in.StatusMsg = "created", msg
				in.logf(at, "%s", msg)
				return
			}
		}
		in.RunningSince = at
		if f := in.priceAfter; f.Kind != "" && in.mkt != nil {
			in.priceAfter = Fault{}
			in.mkt.newIncrease(in, f, at)
		}
		if f := in.hostEndAfter; f.Kind != "" {
			in.hostEndAfter = Fault{}
			in.Offer.EndDate = unix(at) + f.Seconds
		}
		if f := in.outbidAfter; f.Seconds > 0 && in.mkt != nil {
			in.outbidAfter = Fault{}
			ev := marketEvent{offer: in.Offer.ID, from: at.Add(time.Duration(f.Seconds * float64(time.Second))), price: f.Price}
			if ev.price <= 0 {
				ev.price = round(in.Bid*1.25+0.001, 4)
			}
			if f.For > 0 {
				ev.to = ev.from.Add(time.Duration(f.For * float64(time.Second)))
			}
			in.mkt.events = append(in.mkt.events, ev)
		}
		if in.preemptAfter > 0 {
			in.nextAt, in.nextState = at.Add(in.preemptAfter), "preempted"
			in.preemptAfter = 0
		}
		in.Actual = "running"
		in.StatusMsg = fmt.Sprintf("success, running %s/ssh", strings.ReplaceAll(in.Image, ":", "_"))
		in.logf(at, "Status: Downloaded newer image for %s", in.Image)
		in.logf(at, "container started; sshd listening")
	}
}

// pullTime is how long a host with inetDown Mb/s takes to pull bytes.
func pullTime(bytes int64, inetDown float64) time.Duration {
	if inetDown <= 0 {
		inetDown = 100
	}
	return time.Duration(float64(bytes) * 8 / (inetDown * 1e6) * float64(time.Second))
}

// pullProgress writes docker's pull progress as the status message of a
// loading instance, as Vast shows it: bytes of the image's size when it is
// known, else a share of the pull. A stalled pull keeps its first message.
func (in *instance) pullProgress(now time.Time) {
	if in.Actual != "loading" || in.pullStalls || in.loadFor <= 0 || in.loadingSince.IsZero() {
		return
	}
	frac := min(float64(now.Sub(in.loadingSince))/float64(in.loadFor), 1)
	if frac <= 0 {
		return
	}
	if in.pullBytes > 0 {
		in.StatusMsg = fmt.Sprintf("a1b2c3d4e5f6: Downloading %.2fGB/%.2fGB", frac*float64(in.pullBytes)/1e9, float64(in.pullBytes)/1e9)
		return
	}
	in.StatusMsg = fmt.Sprintf("a1b2c3d4e5f6: Downloading %.1f%%", 100*frac)
}

// setState applies a user or fault state change at time now.
func (in *instance) setState(now time.Time, actual, intended, cur, next, msg string) {
	in.advance(now)
	in.nextAt = time.Time{}
	in.awaitBox = false
	in.loadingSince = time.Time{} // a restart's loading is no pull
	in.Actual, in.Intended, in.Cur, in.Next, in.StatusMsg = actual, intended, cur, next, msg
	in.logf(now, "state: actual=%s intended=%s", actual, intended)
}

func (in *instance) running() bool { return !in.Destroyed && in.Actual == "running" }

// makeSandbox lays out the instance's private directories.
func (in *instance) makeSandbox(root string) error {
	in.sandbox = filepath.Join(root, fmt.Sprintf("instance-%d", in.ID))
	for _, d := range []string{"workspace", "root", ".sim/bin", ".sim/run"} {
		if err := os.MkdirAll(filepath.Join(in.sandbox, d), 0o700); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(in.sandbox, ".sim/bin/nvidia-smi"), []byte(nvidiaSMIScript(in)), 0o755)
}

func (in *instance) workspace() string { return filepath.Join(in.sandbox, "workspace") }

func (in *instance) stopSSH() {
	in.sshMu.Lock()
	fn := in.closeFn
	in.closeFn = nil
	in.sshMu.Unlock()
	if fn != nil {
		fn()
	}
}
