package provider

import (
	"strconv"
	"strings"
	"time"
)

// OfferID identifies a rentable offer (an "ask").
type OfferID int64

// InstanceID identifies a rented instance (a "contract").
type InstanceID int64

func (id InstanceID) String() string { return strconv.FormatInt(int64(id), 10) }
func (id OfferID) String() string    { return strconv.FormatInt(int64(id), 10) }

// Query is a marketplace search document in the wire form the official
// client sends: field filters {"field": {"op": value}} plus control keys
// (order, type, limit, allocated_storage).
type Query map[string]any

// Offer is one rentable machine slice.
type Offer struct {
	ID            OfferID
	MachineID     int64
	HostID        int64
	GPUName       string
	NumGPUs       int
	GPURAMMB      float64 // per GPU
	GPUTotalRAMMB float64
	ComputeCap    int     // capability × 100
	CUDAMax       float64 // highest CUDA version the driver supports
	DriverVersion string
	CPUCores      float64
	CPURAMMB      float64
	DiskSpaceGB   float64
	InetUpMbps    float64
	InetDownMbps  float64
	Reliability   float64
	Verification  string // verified, unverified, deverified
	HostingType   int    // 1 = datacenter
	Geolocation   string
	DirectPorts   int
	Rentable      bool
	Score         float64
	DLPerf        float64
	// Prices in $/hour except where noted.
	DPHBase          float64
	DPHTotal         float64 // DPHBase + StorageTotalCost for the searched disk
	StorageCostMonth float64 // $/GB/month
	StorageTotalCost float64 // storage for the searched disk, $/h
	InetUpCostGB     float64 // $/GB
	InetDownCostGB   float64 // $/GB
	MinBid           float64
	IsBid            bool
	// HostEnd is when the host's offer ends (end_date): no rental of it
	// lasts past it, and an expired instance cannot restart (vast-api.md
	// §12.4). Zero when the offer does not say.
	HostEnd time.Time
	// SeenAt is when the search that returned the offer was answered, on
	// the client's clock: HostEnd − SeenAt is how long the host stays.
	SeenAt time.Time
}

// HostLeft is how long the host stays after the offer was seen, and
// whether the offer says at all.
func (o Offer) HostLeft() (time.Duration, bool) {
	if o.HostEnd.IsZero() || o.SeenAt.IsZero() {
		return 0, false
	}
	return o.HostEnd.Sub(o.SeenAt), true
}

// Verified reports whether the host is verified.
func (o Offer) Verified() bool { return o.Verification == "verified" }

// CountryCode is the last two letters of the geolocation ("Oregon, US" → "US").
func (o Offer) CountryCode() string { return countryCode(o.Geolocation) }

func countryCode(geo string) string {
	g := strings.TrimSpace(geo)
	if len(g) < 2 {
		return ""
	}
	return strings.ToUpper(g[len(g)-2:])
}

// CreateRequest rents an offer.
type CreateRequest struct {
	OfferID OfferID
	Image   string
	DiskGB  float64
	// Label must be unique per run: it is how a rental is found again when
	// everything else is lost.
	Label   string
	Env     map[string]string
	Onstart string
	// Runtype is the launch mode; empty means "ssh_direc ssh_proxy".
	Runtype string
	Args    []string
	// BidPrice > 0 rents interruptibly at that $/h (per machine; see
	// BidPerGPU). The client then always sends cancel_unavail true, so a bid
	// that cannot start now fails instead of leaving a stopped contract.
	BidPrice float64
	// NumGPUs is the offer's GPU count (for a per-GPU bid unit).
	NumGPUs       int
	ImageLogin    string
	CancelUnavail bool
	// TemplateHashID creates from a template: it supplies the image,
	// runtype and onstart the request leaves empty.
	TemplateHashID string
	// Stopped creates the instance stopped (target_state "stopped"): it
	// bills storage only until started.
	Stopped bool
}

// CreateResult is what a successful create returns.
type CreateResult struct {
	InstanceID InstanceID
	// InstanceAPIKey is the per-instance restricted key (CONTAINER_API_KEY).
	// It is a secret.
	InstanceAPIKey string
}

// PortBinding is one docker-style host port mapping.
type PortBinding struct {
	HostIP   string
	HostPort int
}

// Instance is a rented contract as the marketplace reports it.
type Instance struct {
	ID             InstanceID
	MachineID      int64
	HostID         int64
	Label          string
	ActualStatus   string // "" when the API said null
	IntendedStatus string
	CurState       string
	NextState      string
	StatusMsg      string
	ImageUUID      string
	GPUName        string
	NumGPUs        int
	GPURAMMB       float64
	CUDAMax        float64
	DriverVersion  string
	DiskSpaceGB    float64
	Geolocation    string
	SSHHost        string
	SSHPort        int
	PublicIP       string
	Ports          map[string][]PortBinding
	DPHBase        float64
	DPHTotal       float64
	StorageTotal   float64 // $/h for storage
	IsBid          bool
	// BidDPH is the bid ($/h, per machine) an interruptible instance is
	// priced at: dph_total less storage. Zero when not a bid.
	BidDPH float64
	// MinBid is the offer's current clearing price ($/h): a bid under it
	// is stopped.
	MinBid    float64
	StartDate time.Time
	// EndDate is when the contract ends (end_date): its host's maximum
	// rental duration, or the end a pending price increase set (vast-api.md
	// §12.2, §12.4). An instance past it has expired and cannot restart.
	// Zero when the answer does not say.
	EndDate time.Time
}

// SSHEndpoint is a host:port at which the instance's SSH server answers.
type SSHEndpoint struct {
	Host string
	Port int
	Via  string // "direct" (public IP + mapped 22/tcp) or "proxy" (ssh_host:ssh_port)
}

// SSHEndpoints lists where to reach SSH, the direct mapping first.
func (i Instance) SSHEndpoints() []SSHEndpoint {
	var out []SSHEndpoint
	if b := i.Ports["22/tcp"]; len(b) > 0 && b[0].HostPort > 0 && i.PublicIP != "" {
		out = append(out, SSHEndpoint{Host: i.PublicIP, Port: b[0].HostPort, Via: "direct"})
	}
	if i.SSHHost != "" && i.SSHPort > 0 {
		out = append(out, SSHEndpoint{Host: i.SSHHost, Port: i.SSHPort, Via: "proxy"})
	}
	return out
}

// Paused reports the outbid-interruptible signature: intended, current and
// next state all "stopped". The contract keeps billing storage.
func (i Instance) Paused() bool {
	return i.IntendedStatus == "stopped" && i.CurState == "stopped" && i.NextState == "stopped"
}

// Running reports a container that is up with SSH published.
func (i Instance) Running() bool {
	return i.ActualStatus == "running" && !i.Paused() && len(i.SSHEndpoints()) > 0
}

// ListOptions narrows an instance listing.
type ListOptions struct {
	// Labels restricts the listing to instances carrying one of these labels.
	Labels []string
	// Brief reads only what finding and cleaning up needs: each instance's
	// ID, Label and states (ActualStatus, IntendedStatus, CurState,
	// NextState); every other field is left zero. The API is asked for
	// those columns alone, so a page is a fraction of its full size.
	Brief bool
}

// User is the account behind a key.
type User struct {
	ID int64
	// KeyID identifies the API key that made the call.
	KeyID    int64
	Username string
	Email    string
	Balance  float64
	Credit   float64
}

// ChargeItem is one priced component of a charge (gpu, disk, bwu, bwd).
type ChargeItem struct {
	Type        string
	Description string
	Amount      float64
	Start, End  time.Time
}

// Charge is what one contract cost over a period.
type Charge struct {
	InstanceID  InstanceID
	Label       string
	Description string
	Amount      float64
	Start, End  time.Time
	Items       []ChargeItem
}

// ChargeQuery selects charges by day range.
type ChargeQuery struct {
	From, To time.Time
}

// APIKeyInfo describes an API key and the permission categories it holds.
type APIKeyInfo struct {
	ID   int64
	Name string
	// Permissions maps categories (instance_read, user_write, billing_write,
	// ...) to their constraints; a nil value means the whole category.
	Permissions map[string]any
	// Full is true for a key with no permission restriction.
	Full bool
}

// SSHKey is an account SSH key.
type SSHKey struct {
	ID        int64
	PublicKey string
}

// LogRequest asks for container or daemon logs.
type LogRequest struct {
	Tail   int
	Filter string
	Daemon bool
}

// Invoice is a payment-side record: a credit top-up, a payout, a prepay.
// Amount is negative for credits, as Vast reports it.
type Invoice struct {
	Type        string
	Source      string
	Service     string
	Description string
	Amount      float64
	When        time.Time
}
