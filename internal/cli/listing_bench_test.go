package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/label"
	"github.com/vastrun/vastrun/internal/provider/sim"
)

// BenchmarkListing1000 measures, in one run, vastrun's listing commands
// (reap, down --label, status)
// over an account of 1,000 simulated instances against the floor: the same
// listing done page by page with plain HTTP requests (decode, follow
// next_token, nothing else). docs/performance.md records the ratio.
//
//	go test ./internal/cli -run '^$' -bench BenchmarkListing1000 -benchtime 20x
func BenchmarkListing1000(b *testing.B) {
	const n, swept = 1000, 100
	// SSH stays on for the one instance `up` rents (status shows it); the
	// seeded ones have none. The clock runs 50x so that boot is quick.
	clk := clock.NewScaled(time.Now(), 50)
	s, err := sim.New(sim.Config{Clock: clk, Offers: n + swept + 50})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(s)
	b.Cleanup(func() { srv.Close(); s.Close() })
	// Half carry expired vastrun labels (reap candidates), half other labels.
	expired := time.Now().Add(-time.Hour)
	if _, err := s.SeedInstances(n, func(i int) string {
		if i%2 == 0 {
			l, _ := label.New("vastrun", fmt.Sprintf("bench%d", i), expired)
			return l.String()
		}
		return fmt.Sprintf("other-%d", i%10)
	}); err != nil {
		b.Fatal(err)
	}
	env := map[string]string{"VAST_URL": srv.URL, "VAST_API_KEY": s.APIKey()}
	home := b.TempDir()
	cli := func(b *testing.B, args ...string) {
		var out, errOut bytes.Buffer
		f := &Factory{IO: &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
			Getenv: func(k string) string { return env[k] }, HomeDir: home, Clock: clk}
		if code := Run(context.Background(), f, args); code != 0 {
			b.Fatalf("vastrun %v: exit %d\n%s", args, code, errOut.String())
		}
	}
	plain := func(b *testing.B, filters string) int {
		rows := 0
		q := url.Values{"limit": {"25"}, "order_by": {`[{"col":"id","dir":"asc"}]`}}
		if filters != "" {
			q.Set("select_filters", filters)
		}
		for {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/instances/?"+q.Encode(), nil)
			req.Header.Set("Authorization", "Bearer "+s.APIKey())
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var page struct {
				Instances []json.RawMessage `json:"instances"`
				NextToken *string           `json:"next_token"`
			}
			err = json.NewDecoder(res.Body).Decode(&page)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 200 {
				b.Fatalf("page: %d %v", res.StatusCode, err)
			}
			rows += len(page.Instances)
			if page.NextToken == nil || *page.NextToken == "" {
				return rows
			}
			q.Set("after_token", *page.NextToken)
		}
	}
	const sweepLabel = "bench-sweep"
	labelFilter := `{"label":{"in":["` + sweepLabel + `"]}}`
	b.Run("reap", func(b *testing.B) {
		for b.Loop() {
			cli(b, "reap", "--json") // a dry run: lists everything, destroys nothing
		}
	})
	b.Run("plain_http_full_listing", func(b *testing.B) {
		for b.Loop() {
			if got := plain(b, ""); got < n {
				b.Fatalf("listed %d of %d", got, n)
			}
		}
	})
	// down --label destroys what it finds, so each round first seeds the
	// label again (untimed); the account keeps 1,000 other instances.
	b.Run("down_label", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if _, err := s.SeedInstances(swept, func(int) string { return sweepLabel }); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			cli(b, "down", "--label", sweepLabel, "--yes", "--settle", "0s", "-f", "none.yaml")
		}
	})
	// status shows the run's own attempts by id: rent one with up first.
	b.Run("status", func(b *testing.B) {
		b.StopTimer()
		b.Chdir(b.TempDir())
		os.WriteFile("vastrun.yaml", []byte(benchUpConfig), 0o644)
		os.WriteFile("gpu-test.sh", []byte("#!/bin/sh\nnvidia-smi -L\n"), 0o755)
		cli(b, "up", "--yes", "--evidence-dir", "ev")
		b.Cleanup(func() { cli(b, "down", "--yes") })
		b.StartTimer()
		for b.Loop() {
			cli(b, "status", "--json")
		}
	})
	b.Run("plain_http_show", func(b *testing.B) {
		id := s.Snapshot().Live[0].ID
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/api/v0/instances/%d/", srv.URL, id), nil)
			req.Header.Set("Authorization", "Bearer "+s.APIKey())
			res, err := http.DefaultClient.Do(req)
			if err != nil || res.StatusCode != 200 {
				b.Fatal(err)
			}
			var one struct {
				Instances json.RawMessage `json:"instances"`
			}
			json.NewDecoder(res.Body).Decode(&one)
			res.Body.Close()
		}
	})
	b.Run("plain_http_label_listing", func(b *testing.B) {
		b.StopTimer()
		if _, err := s.SeedInstances(swept, func(int) string { return sweepLabel }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for b.Loop() {
			if got := plain(b, labelFilter); got != swept {
				b.Fatalf("label listing: %d rows, want %d", got, swept)
			}
		}
	})
}

const benchUpConfig = `image: ghcr.io/acme/gpu-test@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
test: sh gpu-test.sh
upload: [gpu-test.sh]
gpu:
  models: [RTX_4090, RTX_3090]
  min_vram_gb: 20
  max_dph: 1.0
budget:
  max_spend: 5
timeouts:
  ready: 5m
  job: 1m
  teardown: 2m
`
