package retry

import (
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/vastrun/vastrun/internal/clock"
)

// Vast limits each endpoint for each identity as a minimum interval
// between requests, says so in 429 bodies that are often plain text, and
// sends no Retry-After (vast-api.md §12.4). One call backing off is not
// enough: many calls to one endpoint (a poll loop, a listing beside it)
// would each retry their 429s and keep the endpoint over its limit. A
// RateBudget bounds the 429 retries all calls of one endpoint may spend:
// each endpoint holds Burst retries, regained at one per Refill; a 429
// that finds its endpoint's budget empty ends its call at once with the
// 429, and the caller's own pace decides when to ask again.

// Default budget: ten 429 retries per endpoint, regained at one each 6 s.
const (
	DefaultRateBurst  = 10
	DefaultRateRefill = 6 * time.Second
)

// RateBudget is safe for concurrent use; the zero value is not: use
// NewRateBudget.
type RateBudget struct {
	clock  clock.Clock
	burst  float64
	refill time.Duration
	mu     sync.Mutex
	ep     map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
	spent  int // 429 retries taken since the budget last ran dry
}

// NewRateBudget holds burst 429 retries per endpoint, regained at one per
// refill on clk (zero values pick the defaults).
func NewRateBudget(clk clock.Clock, burst int, refill time.Duration) *RateBudget {
	if clk == nil {
		clk = clock.Real{}
	}
	if burst <= 0 {
		burst = DefaultRateBurst
	}
	if refill <= 0 {
		refill = DefaultRateRefill
	}
	return &RateBudget{clock: clk, burst: float64(burst), refill: refill, ep: map[string]*bucket{}}
}

// take spends one 429 retry of endpoint, reporting whether one was left
// and how many this endpoint has spent in the current storm.
func (b *RateBudget) take(endpoint string) (ok bool, spent int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	k := b.ep[endpoint]
	if k == nil {
		k = &bucket{tokens: b.burst, at: now}
		b.ep[endpoint] = k
	}
	if dt := now.Sub(k.at); dt > 0 {
		k.tokens = min(b.burst, k.tokens+float64(dt)/float64(b.refill))
		k.at = now
	}
	if k.tokens >= b.burst {
		k.spent = 0 // a full budget: the last storm is over
	}
	if k.tokens < 1 {
		return false, k.spent
	}
	k.tokens--
	k.spent++
	return true, k.spent
}

// Endpoint names the route an operation calls, without the ids, labels
// or paths that vary between calls: "show instance 42" → "show instance",
// "list instances labelled x" → "list instances".
func Endpoint(op string) string {
	words := strings.Fields(op)
	for i, w := range words {
		if w == "labelled" || strings.ContainsAny(w, ":/[") || strings.IndexFunc(w, unicode.IsDigit) >= 0 {
			words = words[:i]
			break
		}
	}
	return strings.Join(words, " ")
}
