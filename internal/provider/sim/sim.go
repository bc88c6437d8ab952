package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/container"
)

// Config sets up a simulator. Zero values pick the defaults noted.
type Config struct {
	Clock clock.Clock // default the wall clock
	Seed  uint64      // catalog seed (default 1)
	// Offers is the catalog size (default 200).
	Offers int
	// APIKey is the account's full-access key (default: random 64 hex).
	APIKey string
	// Credit is the starting account credit in $ (default 500).
	Credit float64
	// Dir holds per-instance sandboxes (default: a temporary directory,
	// removed by Close).
	Dir string
	// ScheduleDelay is created → loading (default 2s); LoadDuration is
	// loading → running (default 8s). Both in simulated time.
	ScheduleDelay, LoadDuration time.Duration
	// DisableSSH skips the per-instance SSH servers (pure API tests).
	DisableSSH bool
	Logger     *slog.Logger
	// Market sets the interruptible market's competing bidders (zero: a
	// still market; see MarketConfig).
	Market MarketConfig
	// Images, when set, runs each instance's commands inside its image
	// with this engine (podman), pulled from the registry the reference
	// names; nil: in a host sandbox (see image.go).
	Images *container.Engine
	// ImagesOff says why Images is nil, for the receipts' note (e.g.
	// "VASTRUN_SIM_IMAGES is not set").
	ImagesOff string
	// SharedClock says the client runs on Clock too (vastrun --sim):
	// instants still to come (end dates) are then shown on it. Otherwise,
	// under a scaled clock, they are shown as the wall-clock moment the
	// simulator will reach them, as past instants are (see "Time").
	SharedClock bool
}

// Server is the simulator. Use it as an http.Handler; call Close when done.
type Server struct {
	cfg     Config
	clock   clock.Clock
	log     *slog.Logger
	dir     string
	ownsDir bool

	mu          sync.Mutex
	offers      []*offer
	instances   map[int64]*instance
	order       []int64 // creation order, for listings
	nextID      int64
	keys        map[string]*apiKey
	nextKeyID   int64
	acctSSHKeys []*acctSSHKey
	nextSSHKey  int64
	faults      faults
	results     map[string]*logResult
	startCredit float64
	// maxLive is, per label, the most live contracts it ever had at once.
	maxLive map[string]int
	// private holds the repositories only one login may pull (SetPrivateImage).
	private map[string]privateRepo
	// imageSizes are images' compressed sizes (image_size): their pulls
	// last as long as their bytes take at their host's inet_down.
	imageSizes map[string]int64
	// sshFaultsFired counts ssh_drop and ssh_stall actions.
	sshFaultsFired int
	clouds         []*cloudIntegration // fixed at New: read without s.mu
	mkt            *market

	// The image path: token names this server's containers; boxCtx ends
	// pulls in flight at Close; boxes counts the goroutines that start and
	// remove containers.
	token     string
	boxCtx    context.Context
	boxCancel context.CancelFunc
	boxes     sync.WaitGroup
}

type apiKey struct {
	ID    int64
	Name  string
	Key   string
	Perms map[string]any // nil = full access
	// Instance > 0 marks a CONTAINER_API_KEY scoped to that instance.
	Instance int64
	Deleted  bool
}

type acctSSHKey struct {
	ID        int64
	PublicKey string
	Created   time.Time
}

// New builds a simulator.
func New(cfg Config) (*Server, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Offers <= 0 {
		cfg.Offers = 200
	}
	if cfg.Credit == 0 {
		cfg.Credit = 500
	}
	if cfg.ScheduleDelay <= 0 {
		cfg.ScheduleDelay = 2 * time.Second
	}
	if cfg.LoadDuration <= 0 {
		cfg.LoadDuration = 8 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger,
		instances: map[int64]*instance{}, nextID: 30_511_000, keys: map[string]*apiKey{},
		nextKeyID: 998_800, nextSSHKey: 5_000, results: map[string]*logResult{},
		startCredit: cfg.Credit, maxLive: map[string]int{},
	}
	s.faults.v0ListStatus = http.StatusGone
	s.token = randomHex(4)
	s.boxCtx, s.boxCancel = context.WithCancel(context.Background())
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "vastrun-sim-")
		if err != nil {
			return nil, fmt.Errorf("simulator sandbox: %w", err)
		}
		s.dir, s.ownsDir = d, true
	} else {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("simulator sandbox: %w", err)
		}
		s.dir = cfg.Dir
	}
	key := cfg.APIKey
	if key == "" {
		key = randomHex(32)
	}
	s.addKey(&apiKey{Name: "default", Key: key})
	s.offers = generateCatalog(cfg.Seed, cfg.Offers, unix(s.clock.Now()))
	s.mkt = newMarket(cfg.Market, cfg.Seed, s.clock.Now(), cfg.ScheduleDelay)
	// One cloud integration, a directory standing in for a bucket.
	s.clouds = []*cloudIntegration{{ID: 1, Name: "vastrun-sim-bucket", CloudType: "s3"}}
	if err := os.MkdirAll(s.cloudDir(1), 0o700); err != nil {
		return nil, fmt.Errorf("simulator cloud: %w", err)
	}
	return s, nil
}

// APIKey returns the account's full-access key.
func (s *Server) APIKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k.Name == "default" {
			return k.Key
		}
	}
	return ""
}

// NewRestrictedKey adds an API key limited to the given permission
// categories (e.g. {"instance_read": {}}) and returns it.
func (s *Server) NewRestrictedKey(name string, perms map[string]any) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := &apiKey{Name: name, Key: randomHex(32), Perms: perms}
	s.addKey(k)
	return k.Key
}

func (s *Server) addKey(k *apiKey) {
	s.nextKeyID++
	k.ID = s.nextKeyID
	s.keys[k.Key] = k
}

// Close destroys every SSH server and removes sandboxes the simulator made.
func (s *Server) Close() error {
	s.mu.Lock()
	insts := make([]*instance, 0, len(s.instances))
	for _, in := range s.instances {
		insts = append(insts, in)
	}
	s.mu.Unlock()
	for _, in := range insts {
		in.stopSSH()
	}
	s.closeBoxes(insts)
	if s.ownsDir {
		return os.RemoveAll(s.dir)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// reported is the instant the API shows for simulated instant t: under a
// scaled clock, the wall-clock moment it happened (see the package doc,
// "Time"); under any other clock, t itself.
func (s *Server) reported(t time.Time) time.Time {
	if sc, ok := s.clock.(*clock.Scaled); ok && !t.IsZero() {
		return sc.Wall(t)
	}
	return t
}

// reportedFuture is the instant the API shows for simulated instant t
// that may still lie ahead (an end date): on the simulator's clock when the
// client shares it (Config.SharedClock), else as reported shows any
// instant, so that t − the client's now is the time left on its clock.
func (s *Server) reportedFuture(t time.Time) time.Time {
	if s.cfg.SharedClock {
		return t
	}
	return s.reported(t)
}

// futureUnix is reportedFuture for an instant in Unix seconds (0: none).
func (s *Server) futureUnix(u float64) float64 {
	if u <= 0 {
		return u
	}
	sec, frac := math.Modf(u)
	return unix(s.reportedFuture(time.Unix(int64(sec), int64(frac*1e9))))
}

// authenticate reads the key from the Bearer header or ?api_key=, as the
// real API does, and answers the real API's failures itself.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, optional bool) (*apiKey, bool) {
	raw := ""
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		raw = strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	}
	if raw == "" {
		raw = r.URL.Query().Get("api_key")
	}
	if raw == "" {
		if optional {
			return nil, true
		}
		writeError(w, http.StatusForbidden, "auth_error", "This action requires login.")
		return nil, false
	}
	s.mu.Lock()
	k := s.keys[raw]
	s.mu.Unlock()
	switch {
	case k == nil:
		writeError(w, http.StatusNotFound, "auth_error", "Invalid user key")
		return nil, false
	case k.Deleted:
		// A key that existed and was deleted is told 401, an unknown one
		// 404 (vast-api.md §12.3).
		writeError(w, http.StatusUnauthorized, "auth_error", "Invalid user key")
		return nil, false
	}
	return k, true
}

// permits reports whether key k may use category (instance_read, ...).
func (k *apiKey) permits(category string) bool {
	if k == nil {
		return false
	}
	if k.Instance > 0 {
		return false // container keys are checked per route
	}
	if k.Perms == nil {
		return true
	}
	_, ok := k.Perms[category]
	return ok
}
