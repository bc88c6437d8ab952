package sim_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

// BenchmarkListV1Page measures one 25-row page of the v1 list as the
// account grows: rows are rendered for the page only, so the cost should
// stay near-flat (what remains is a cheap pass for the totals).
//
//	go test ./internal/provider/sim -run '^$' -bench BenchmarkListV1Page
func BenchmarkListV1Page(b *testing.B) {
	for _, c := range []struct {
		n    int
		cols string
	}{{100, ""}, {1000, ""}, {10000, ""}, {1000, `["id","label","actual_status","intended_status","cur_state","next_state"]`}} {
		n := c.n
		name := fmt.Sprintf("instances=%d", n)
		query := "limit=25"
		if c.cols != "" {
			name += "/brief"
			query += "&select_cols=" + url.QueryEscape(c.cols)
		}
		b.Run(name, func(b *testing.B) {
			s, err := sim.New(sim.Config{DisableSSH: true, Offers: n + 10})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			if _, err := s.SeedInstances(n, func(i int) string { return fmt.Sprintf("seed-%d", i/100) }); err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(s)
			b.Cleanup(srv.Close)
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/instances/?"+query, nil)
			req.Header.Set("Authorization", "Bearer "+s.APIKey())
			for b.Loop() {
				res, err := http.DefaultClient.Do(req)
				if err != nil || res.StatusCode != 200 {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
}
