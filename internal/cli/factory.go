package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/agent"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/preflight"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
)

// SimSpeed is how much faster than the wall clock the embedded simulator
// runs: a 10-second simulated boot takes a third of a second.
const SimSpeed = 30

// Factory builds what commands need, lazily, from the global flags. Tests
// fill it with their own streams and environment.
type Factory struct {
	IO      *IOStreams
	Getenv  func(string) string
	HomeDir string
	// Clock paces API retries; nil means the wall clock.
	Clock clock.Clock

	// Global flags.
	JSON   bool
	Debug  bool
	Quiet  bool
	Sim    bool
	URL    string
	APIKey string
	// SimFaults are JSON faults injected into the embedded simulator.
	SimFaults []string

	logger  *slog.Logger
	market  provider.Marketplace
	apiURL  string // the API host market talks to
	keyUsed string // for masking only; never printed
	simSrv  *sim.Server
	simHTTP *http.Server
	closers []func() // run by Close, last first (team.go)
	stopRun func()   // cancels the command's context

	// simFrom, when later than now, is where the embedded simulator's
	// clock starts: a resumed run's journal goes on from its last record
	// instead of going back to a new process's start (train.go).
	simFrom time.Time

	runMu sync.Mutex
	run   *runWatch // the workflow running now, for the signal handler (interrupt.go)
}

func (f *Factory) onClose(fn func()) { f.closers = append(f.closers, fn) }

// Logger is the developer log: silent unless --debug.
func (f *Factory) Logger() *slog.Logger {
	if f.logger == nil {
		if f.Debug {
			f.logger = slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
		} else {
			f.logger = slog.New(slog.DiscardHandler)
		}
	}
	return f.logger
}

func (f *Factory) clock() clock.Clock {
	if f.Clock != nil {
		return f.Clock
	}
	return clock.Real{}
}

// Simulated reports whether commands run against the embedded simulator.
func (f *Factory) Simulated() bool { return f.Sim }

// Marketplace returns the real Vast client, or with --sim a real client
// talking HTTP to an embedded simulator on 127.0.0.1.
func (f *Factory) Marketplace(ctx context.Context) (provider.Marketplace, error) {
	if f.market != nil {
		return f.market, nil
	}
	if f.Sim {
		url, key, err := f.startSim()
		if err != nil {
			return nil, err
		}
		c, api, err := f.newClient(url, key)
		if err != nil {
			return nil, err
		}
		f.market, f.apiURL, f.keyUsed = c, api, key
		f.IO.Redactor().Add(key)
		return c, nil
	}
	if f.APIKey != "" {
		f.IO.Hintf("--api-key is visible to other users in the process list; prefer VAST_API_KEY or ~/.config/vastai/vast_api_key")
	}
	key, src, err := vast.ResolveAPIKey(f.APIKey, f.Getenv, f.HomeDir)
	if err != nil {
		return nil, err
	}
	f.Logger().Debug("using Vast API key", "source", string(src))
	base := f.URL
	if base == "" {
		base = f.Getenv("VAST_URL")
	}
	c, api, err := f.newClient(base, key)
	if err != nil {
		return nil, &UsageError{Err: err, Hint: "set --url or VAST_URL to an http(s) URL such as https://console.vast.ai"}
	}
	f.market, f.apiURL, f.keyUsed = c, api, key
	f.IO.Redactor().Add(key)
	return c, nil
}

// newClient is the one place a Vast client is built: the client sends
// each request once, and the retry decorator around it decides what is
// sent again (package retry), pacing its waits on the factory's clock
// (the simulator's under --sim) and logging each retry under --debug. It
// also returns the API host the client talks to.
func (f *Factory) newClient(base, key string) (*retry.Client, string, error) {
	c, err := vast.New(vast.Options{BaseURL: base, APIKey: key, Logger: f.Logger(), UserAgent: "vastrun/" + Version, Clock: f.Clock})
	if err != nil {
		return nil, "", err
	}
	log := f.Logger()
	return retry.Wrap(c, retry.Policy{
		Clock: f.Clock,
		Report: func(op string, err error, wait time.Duration) {
			log.Debug("retrying API call", "op", op, "wait", wait, "err", err)
		},
		Success: func(op string, retries int) {
			log.Debug("API call succeeded after retries", "op", op, "retries", retries)
		},
		// A 429 storm is shown above the live line: on the third retry of
		// an endpoint, then every tenth, never once per 429.
		Throttled: func(endpoint string, spent int) {
			if spent == 3 || spent%10 == 0 {
				f.IO.Infof("Vast is rate-limiting %q: %d retries so far, backing off", endpoint, spent)
			}
		},
	}), c.BaseURL(), nil
}

// APIURL is the API host the marketplace talks to (after Marketplace).
func (f *Factory) APIURL() string { return f.apiURL }

func (f *Factory) startSim() (url, key string, err error) {
	// Under --sim everything runs on the simulator's clock, so deadlines,
	// timings and cost estimates agree with what the simulator bills.
	simClock := clock.NewScaled(latest(time.Now(), f.simFrom), SimSpeed)
	if f.Clock == nil {
		f.Clock = simClock
	}
	// VASTRUN_SIM_IMAGES=podman: instances run inside their pinned image.
	images, off, err := sim.ImageEngine(context.Background(), f.Getenv(sim.ImagesEnv))
	if err != nil {
		return "", "", &UsageError{Err: err, Hint: "unset it (the host sandbox) or set it to podman (the pinned image, pulled from its registry)"}
	}
	if f.Getenv(sim.ImagesEnv) == "podman" && images == nil {
		f.IO.Infof("simulated instances run in a host sandbox, not inside the pinned image: %s", off)
	}
	s, err := sim.New(sim.Config{Clock: f.Clock, Logger: f.Logger(), Images: images, ImagesOff: off, SharedClock: f.Clock == simClock})
	if err != nil {
		return "", "", err
	}
	for _, raw := range f.SimFaults {
		var fault sim.Fault
		if err := json.Unmarshal([]byte(raw), &fault); err != nil {
			_ = s.Close() // the fault's error is the one to report; a leftover is the simulator's temporary directory
			return "", "", &UsageError{Err: fmt.Errorf("--sim-fault %s: %w", raw, err), Hint: `write faults as JSON, e.g. '{"kind":"preempt_after","seconds":60}'`}
		}
		if err := s.Inject(fault); err != nil {
			_ = s.Close() // as above
			return "", "", &UsageError{Err: fmt.Errorf("--sim-fault: %w", err)}
		}
		f.IO.Infof("simulator fault armed: %s", raw)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = s.Close() // as above
		return "", "", fmt.Errorf("start embedded simulator: %w", err)
	}
	f.simSrv = s
	f.simHTTP = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := f.simHTTP.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			f.Logger().Error("embedded simulator stopped", "err", err)
		}
	}()
	url = "http://" + ln.Addr().String()
	f.IO.Infof("using the embedded simulator at %s: nothing is rented or billed for real", url)
	return url, s.APIKey(), nil
}

// KeyForMasking is the API key in use (after Marketplace), so that output
// can be masked. It must never be printed.
func (f *Factory) KeyForMasking() string { return f.keyUsed }

// instanceBinary is the vastrun copied to every instance (the dead-man
// switch, training's agent), and whether it must run as on Vast, in any
// image: everywhere but the simulator's host sandbox, which is this
// machine (the test binary, built with cgo, runs there). Judged after
// Marketplace, which says where the instances are.
func (f *Factory) instanceBinary() (path string, anyImage bool, err error) {
	path, err = agent.LocalBinary(f.Getenv)
	switch {
	case f.simSrv != nil:
		anyImage = !f.simSrv.HostSandbox()
	case f.Sim:
		anyImage = f.Getenv(sim.ImagesEnv) == "podman"
	default:
		// A marketplace on a loopback address is a simulator (sim serve),
		// whose instances run on this host unless it runs images (then the
		// arm fails at once, nothing paid); Vast is never on one.
		api := f.apiURL
		if api == "" { // no key yet: the marketplace the command would use
			if api = f.URL; api == "" {
				api = f.Getenv("VAST_URL")
			}
		}
		anyImage = !agent.LoopbackURL(api)
	}
	return path, anyImage, err
}

// agentBinary is the path instanceBinary names ("": this executable).
func (f *Factory) agentBinary() string {
	p, _, _ := f.instanceBinary()
	return p
}

// checkInstanceBinary refuses, before anything is rented, a vastrun that
// an instance could not run (preflight.AgentBinary).
func (f *Factory) checkInstanceBinary() error {
	path, anyImage, err := f.instanceBinary()
	if err != nil || !anyImage {
		return err
	}
	return preflight.AgentBinary(path, f.Getenv(agent.BinaryEnv) != "")
}

// SimServer is the embedded simulator, when --sim started one.
func (f *Factory) SimServer() *sim.Server { return f.simSrv }

// Close stops anything the factory started.
func (f *Factory) Close() {
	f.stopProgress()
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	f.closers = nil
	if f.simHTTP != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := f.simHTTP.Shutdown(ctx); err != nil {
			// Connections still open after 2s: the process ends with them.
			f.Logger().Debug("embedded simulator shutdown", "err", err)
		}
	}
	if f.simSrv != nil {
		// The embedded simulator dies with this command: say what it still
		// held, since nothing can look at it afterwards.
		if live := f.simSrv.Snapshot().Live; len(live) > 0 {
			ids := make([]int64, len(live))
			for i, in := range live {
				ids[i] = in.ID
			}
			f.IO.Infof("embedded simulator: %d instance(s) still live as it stops: %v (on Vast they would still be billing)", len(live), ids)
		}
		if err := f.simSrv.Close(); err != nil {
			f.IO.Infof("warning: embedded simulator: %v", err)
		}
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
