package vast

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/provider"
)

// BenchmarkListInstancesBrief1000 times the client's side of a brief
// listing of 1,000 instances (40 pages of 25 rows, served from memory), the
// listing `vastrun reap` makes: the request, the read and the decode.
//
//	go test ./internal/provider/vast -run '^$' -bench ListInstancesBrief
func BenchmarkListInstancesBrief1000(b *testing.B) {
	const n, per = 1000, 25
	pages := map[string][]byte{}
	for p := 0; p*per < n; p++ {
		var sb strings.Builder
		sb.WriteString(`{"instances":[`)
		for i := p * per; i < (p+1)*per; i++ {
			if i > p*per {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"actual_status":"running","cur_state":"running","id":%d,"intended_status":"running","label":"sim-seed-%d","next_state":"running"}`, 30511000+i, i/100)
		}
		next := "null"
		if (p+1)*per < n {
			next = strconv.Quote(base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "id:%d", 30511000+(p+1)*per-1)))
		}
		fmt.Fprintf(&sb, `],"instances_found":%d,"label_counts":{},"next_token":%s,"success":true,"total_instances":%d}`, per, next, n)
		tok := ""
		if p > 0 {
			tok = base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "id:%d", 30511000+p*per-1))
		}
		pages[tok] = []byte(sb.String())
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := pages[r.URL.Query().Get("after_token")]
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}))
	b.Cleanup(srv.Close)
	c, err := New(Options{BaseURL: srv.URL, APIKey: "k"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		list, err := c.ListInstances(context.Background(), provider.ListOptions{Brief: true})
		if err != nil || len(list) != n {
			b.Fatal(len(list), err)
		}
	}
}
