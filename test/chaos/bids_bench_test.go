package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/cienv"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider/retry"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/redact"
	trainflow "github.com/vastrun/vastrun/internal/workflow/train"
)

// benchMarket is the seeded market of the bids benchmark: the simulator's
// default moving market (4% per 5 minutes, a spike every few hours).
var benchMarket = sim.DefaultMarket

// BenchmarkBidsTrainExample runs the README training example
// (examples/train/train.yaml) twice on one seeded simulator market, on
// demand and interruptible (on_outbid replace), and reports what each cost
// from the simulator's charges and how many interruptions the bid run had.
// scripts/bench-bids.sh runs it; docs/performance.md has the figure.
func BenchmarkBidsTrainExample(b *testing.B) {
	bin := agentBinary(&testing.T{})
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	example, err := os.ReadFile(filepath.Join(repo, "examples", "train", "train.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		od := benchTrain(b, bin, repo, string(example), false)
		bid := benchTrain(b, bin, repo, string(example), true)
		ic := bid.Cost.Interruptible
		if od.Outcome != lifecycle.OutcomePassed || bid.Outcome != lifecycle.OutcomePassed || ic == nil || od.Cost.ChargedUSD == nil {
			b.Fatalf("outcomes %s / %s (interruptible cost %+v)", od.Outcome, bid.Outcome, ic)
		}
		odUSD := *od.Cost.ChargedUSD
		fmt.Printf("bids: README training example, seed 1 market: on demand $%.4f (%d rental), interruptible $%.4f (%d rentals, %d interruptions, on-demand equivalent of its GPU-seconds $%.4f): %.0f%% less than on demand\n",
			odUSD, len(od.Attempts), ic.ChargedUSD, len(bid.Attempts), ic.Interruptions, ic.OnDemandUSD, 100*(1-ic.ChargedUSD/odUSD))
		b.ReportMetric(odUSD, "usd-on-demand")
		b.ReportMetric(ic.ChargedUSD, "usd-interruptible")
		b.ReportMetric(float64(ic.Interruptions), "interruptions")
	}
}

func benchTrain(b *testing.B, bin, repo, example string, interruptible bool) *receipt.Receipt {
	clk := clock.NewScaled(time.Now(), 60)
	s, err := sim.New(sim.Config{Clock: clk, Seed: 1, Market: benchMarket})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer func() { srv.Close(); s.Close() }()
	// Besides the walk and its spikes, a competing bid outbids the first
	// interruptible rental 2 minutes after it runs, for 10 minutes: at least
	// one interruption whatever the walk does (on demand is not affected).
	if err := s.Inject(sim.Fault{Kind: sim.FaultOutbid, Count: 1, Seconds: 120, For: 600}); err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	y := strings.Replace(example, "file://${PWD}/.vastrun/example-checkpoints", "file://"+filepath.Join(root, "store"), 1)
	if interruptible {
		// max_bid defaults to max_dph; a lively market may take a few rentals.
		y = strings.Replace(y, "  max_dph: 0.60\n", "  max_dph: 0.60\n  interruptible: true\n", 1)
		y = strings.Replace(y, "  poll: 5s\n", "  poll: 5s\n  max_attempts: 8\n", 1)
	}
	cfg, err := config.Parse([]byte(y))
	if err != nil {
		b.Fatal(err)
	}
	clientRaw, _ := vast.New(vast.Options{BaseURL: srv.URL, APIKey: s.APIKey(), Clock: clk})
	client := retry.Wrap(clientRaw, retry.Policy{Clock: clk}) // as vastrun wraps it
	e := lifecycle.New(&lifecycle.Deps{
		Market: client, Clock: clk, Log: slog.New(slog.DiscardHandler), UI: ui{&lockedBuf{}}, Stream: &lockedBuf{},
		Getenv: func(string) string { return "" }, CI: cienv.Env{}, Redactor: redact.New(s.APIKey()),
		Approve: func(lifecycle.Plan) (bool, error) { return true, nil }, Annotations: &lockedBuf{}, Config: cfg,
		RepoDir: repo, StateRoot: filepath.Join(root, "state"), EvidenceDir: filepath.Join(root, "ev"), Simulated: true,
		APIURL: srv.URL, AgentBinary: bin, StorageEnv: map[string]string{}, SSHKeepAlive: sshKeepAlive,
	})
	r, err := trainflow.Run(context.Background(), e)
	if r == nil {
		b.Fatalf("no receipt: %v", err)
	}
	return r
}
