package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// NewCmdSim builds `vastrun sim`.
func NewCmdSim(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the Vast marketplace simulator",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(NewCmdSimServe(f, nil))
	return cmd
}

// SimServeOptions are the inputs of `vastrun sim serve`.
type SimServeOptions struct {
	IO        *IOStreams
	JSON      bool
	Listen    string
	Offers    int
	Seed      uint64
	Speed     float64
	APIKey    string
	ReadyFile string
	Dir       string
	// Instances seeds the account with this many running instances.
	Instances int
	// Images is VASTRUN_SIM_IMAGES: "podman" runs instances inside their image.
	Images string
	// PriceIncrease schedules a host's price increase (--price-increase).
	PriceIncrease string
}

// NewCmdSimServe builds `vastrun sim serve`; runF replaces the run in tests.
func NewCmdSimServe(f *Factory, runF func(context.Context, *SimServeOptions) error) *cobra.Command {
	opts := &SimServeOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the simulator's HTTP API (and per-instance SSH) on loopback",
		Long: `Serve a wire-faithful Vast API on 127.0.0.1 until interrupted. Any Vast
client works against it: set VAST_URL and VAST_API_KEY to what it prints.
Running instances answer SSH on their own 127.0.0.1 ports with a fake
nvidia-smi. Faults are set through POST /_sim/faults; GET /_sim/state lists
live instances.`,
		Example: `  vastrun sim serve --listen 127.0.0.1:8080 --speed 10
  curl -H "Authorization: Bearer $VAST_API_KEY" $VAST_URL/api/v0/users/current/
  curl -X POST $VAST_URL/_sim/faults -d '{"kind":"rate_limit","endpoint":"*","count":5}'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: runCmd(opts, func(cmd *cobra.Command, args []string) error {
			opts.JSON = f.JSON
			opts.Images = f.Getenv(sim.ImagesEnv)
			if opts.Speed <= 0 {
				return &UsageError{Err: fmt.Errorf("--speed must be positive, got %v", opts.Speed), Hint: "simulated seconds per real second: 1 is real time, 10 ten times faster"}
			}
			if opts.PriceIncrease != "" {
				if _, err := ParsePriceIncrease(opts.PriceIncrease); err != nil {
					return &UsageError{Err: fmt.Errorf("--price-increase %q: %w", opts.PriceIncrease, err), Hint: "write PRICE@AFTER[/TERM], e.g. 2.5@90s/10m: the host asks $2.50/h 90 s after the next instance runs; unaccepted, its contract ends 10 m later"}
				}
			}
			if opts.Instances < 0 {
				return &UsageError{Err: fmt.Errorf("--instances must be 0 or more, got %d", opts.Instances), Hint: "leave it out for an empty account, or seed N running instances with --instances N"}
			}
			return nil
		}, runF, runSimServe),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", "127.0.0.1:0", "loopback address to listen on (port 0 picks a free one)")
	fl.IntVar(&opts.Offers, "offers", 200, "number of offers in the catalog")
	fl.Uint64Var(&opts.Seed, "seed", 1, "catalog seed (the same seed gives the same offers)")
	fl.Float64Var(&opts.Speed, "speed", 1, "simulated seconds per real second (10 makes a 10 s boot take 1 s)")
	fl.StringVar(&opts.APIKey, "sim-key", "", "the account key to accept (default: random, printed)")
	fl.StringVar(&opts.ReadyFile, "ready-file", "", "write {url, api_key} as JSON to this file once listening")
	fl.StringVar(&opts.Dir, "dir", "", "directory for instance sandboxes (default: a temporary one)")
	fl.StringVar(&opts.PriceIncrease, "price-increase", "", "PRICE@AFTER[/TERM]: the next instance's host asks PRICE $/h AFTER it starts running; unaccepted, the contract ends TERM later (default 1h)")
	fl.IntVar(&opts.Instances, "instances", 0, "seed the account with N running instances (labelled sim-seed-<i/100>, no SSH; they rent N extra offers)")
	return cmd
}

type simServeJSON struct {
	Schema string `json:"schema"`
	URL    string `json:"url"`
	APIKey string `json:"api_key"`
}

func runSimServe(ctx context.Context, opts *SimServeOptions) error {
	host, _, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return &UsageError{Err: fmt.Errorf("--listen %q: %w", opts.Listen, err), Hint: "use HOST:PORT, e.g. 127.0.0.1:8080"}
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return &UsageError{Err: fmt.Errorf("--listen %q is not a loopback address", opts.Listen), Hint: "the simulator serves loopback only: use 127.0.0.1:PORT"}
	}
	images, off, err := sim.ImageEngine(ctx, opts.Images)
	if err != nil {
		return &UsageError{Err: err, Hint: "unset it (the host sandbox) or set it to podman (the pinned image, pulled from its registry)"}
	}
	if opts.Images == "podman" && images == nil {
		opts.IO.Infof("instances run in a host sandbox, not inside their image: %s", off)
	}
	s, err := sim.New(sim.Config{Clock: clock.NewScaled(time.Now(), opts.Speed), Seed: opts.Seed, Offers: opts.Offers + opts.Instances, APIKey: opts.APIKey, Dir: opts.Dir,
		Images: images, ImagesOff: off})
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			opts.IO.Infof("warning: simulator: %v", err)
		}
	}()
	if opts.PriceIncrease != "" {
		f, err := ParsePriceIncrease(opts.PriceIncrease)
		if err == nil {
			err = s.Inject(f)
		}
		if err != nil {
			return &UsageError{Err: fmt.Errorf("--price-increase: %w", err)}
		}
	}
	if opts.Instances > 0 {
		if _, err := s.SeedInstances(opts.Instances, func(i int) string { return fmt.Sprintf("sim-seed-%d", i/100) }); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("simulator listen on %s: %w", opts.Listen, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	info := simServeJSON{Schema: "vastrun.sim/v1", URL: "http://" + ln.Addr().String(), APIKey: s.APIKey()}
	if opts.JSON {
		if err := json.NewEncoder(opts.IO.Out).Encode(info); err != nil {
			return err
		}
	} else {
		if _, err := fmt.Fprintf(opts.IO.Out, "export VAST_URL=%s\nexport VAST_API_KEY=%s\n", info.URL, info.APIKey); err != nil {
			return err
		}
		opts.IO.Infof("simulator listening on %s (%d offers, %d seeded instances, seed %d, speed %gx); Ctrl-C stops it", info.URL, opts.Offers, opts.Instances, opts.Seed, opts.Speed)
	}
	if opts.ReadyFile != "" {
		b, _ := json.Marshal(info)
		tmp := opts.ReadyFile + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return fmt.Errorf("write ready file: %w", err)
		}
		if err := os.Rename(tmp, opts.ReadyFile); err != nil {
			return fmt.Errorf("write ready file: %w", err)
		}
	}
	select {
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
		if err := srv.Shutdown(shut); err != nil {
			opts.IO.Infof("warning: the simulator's connections did not close in 3s: %v", err)
		}
		opts.IO.Infof("simulator stopped; %d instances were still live", len(s.Snapshot().Live))
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("simulator: %w", err)
	}
}

// ParsePriceIncrease reads --price-increase PRICE@AFTER[/TERM] (durations
// as Go writes them, 90s, 10m) into the simulator's price_increase fault
// for the next instance to run.
func ParsePriceIncrease(v string) (sim.Fault, error) {
	price, rest, ok := strings.Cut(v, "@")
	if !ok {
		return sim.Fault{}, errors.New("want PRICE@AFTER[/TERM]")
	}
	after, term, _ := strings.Cut(rest, "/")
	p, err := strconv.ParseFloat(price, 64)
	if err != nil || p <= 0 {
		return sim.Fault{}, fmt.Errorf("price %q is not a positive $/h", price)
	}
	f := sim.Fault{Kind: sim.FaultPriceIncrease, Price: p, Count: 1}
	for _, d := range []struct {
		text string
		to   *float64
	}{{after, &f.Seconds}, {term, &f.For}} {
		if d.text == "" && d.to == &f.For {
			continue
		}
		dur, err := time.ParseDuration(d.text)
		if err != nil || dur < 0 {
			return sim.Fault{}, fmt.Errorf("%q is not a duration such as 90s or 10m", d.text)
		}
		*d.to = dur.Seconds()
	}
	return f, nil
}
