package sim

import (
	"fmt"
	"net/http"
	"time"
)

// Fault kinds accepted by Inject and POST /_sim/faults.
const (
	// FaultFail answers the next Count calls of Endpoint with Status/Body
	// (default 503 and a JSON envelope).
	FaultFail = "fail"
	// FaultRateLimit answers the next Count calls of Endpoint ("*" = every
	// endpoint) with 429, alternating the JSON {"detail"} and plain-text bodies.
	FaultRateLimit = "rate_limit"
	// FaultCreateErrorWithContract makes the next Count creates rent the
	// offer but answer an error (Status, default 500) that carries new_contract.
	FaultCreateErrorWithContract = "create_error_with_contract"
	// FaultCreateLostResponse makes the next Count creates commit the rental
	// and then drop the connection without an answer.
	FaultCreateLostResponse = "create_lost_response"
	// FaultReadLag makes each instance created from now on invisible to the
	// next Count show/list reads (Count 0 turns it off).
	FaultReadLag = "read_lag"
	// FaultDestroyNoop makes the next Count destroys answer success and do
	// nothing (Count -1: forever, until cleared).
	FaultDestroyNoop = "destroy_noop"
	// FaultPreempt pauses Instance as an outbid interruptible is paused:
	// actual, intended, cur and next state all "stopped"; storage keeps billing.
	FaultPreempt = "preempt"
	// FaultOffline takes Instance's host offline (actual_status "offline").
	FaultOffline = "offline"
	// FaultExit makes Instance's container exit (actual_status "exited").
	FaultExit = "exit"
	// FaultImagePull makes image pulls fail: the next Count creates, or every
	// create on Machine, or every create of Image. The instance stays
	// "created" with the docker error in status_msg and never runs.
	FaultImagePull = "image_pull_failure"
	// FaultSSHRefuse makes Instance (0: every instance created from now on)
	// refuse SSH connections for Seconds of simulated time, or for the next
	// Count connections.
	FaultSSHRefuse = "ssh_refuse"
	// FaultSlowLoading sets the loading duration to Seconds for Instance, or
	// for every create from now on when Instance is 0.
	FaultSlowLoading = "slow_loading"
	// FaultV0List sets the status of the deprecated GET /api/v0/instances/:
	// 410 (default) or 200.
	FaultV0List = "v0_list"
	// FaultPreemptAfter pauses the next Count instances (default 1) Seconds
	// after each starts running, as an outbid interruptible is paused.
	FaultPreemptAfter = "preempt_after"
	// FaultImageUUID makes the next Count creates (default 1) report Image
	// as their image_uuid instead of what was requested: the host ran
	// other bytes than the ones pinned.
	FaultImageUUID = "image_uuid"
	// FaultSSHDrop closes the live SSH connections of Instance (0: of every
	// instance), as a network that drops TCP connections does. With Seconds
	// 0 it acts once, now; with Seconds > 0 it repeats every Seconds of
	// simulated time (the first period starts at an instance's first SSH
	// traffic after the fault is set, and each drop lands on the next read
	// or write), Count times per instance (0: until cleared). The processes
	// the sessions started keep running, and new connections are accepted.
	FaultSSHDrop = "ssh_drop"
	// FaultSSHStall makes the live SSH connections of Instance (0: of every
	// instance) hang without closing: nothing sent on them is answered, as
	// on a dead network path or a hung host. Seconds and Count schedule it
	// as for FaultSSHDrop. New connections work.
	FaultSSHStall = "ssh_stall"
	// FaultOutbid makes a competing bid outbid Instance (0: every live
	// interruptible instance; with Count > 0, each of the next Count
	// interruptible instances Seconds after it starts running) Seconds from
	// now (0: now): its offer's
	// clearing price rises to Price (default the instance's bid + 25%) for
	// For seconds (0: until cleared). The instance is stopped as an outbid
	// one is, and resumes when the competing bid ends or its own bid is
	// raised above it.
	FaultOutbid = "outbid"
	// FaultMarketSpike multiplies the clearing price by Factor (default
	// 2.5) on Instance's offer, or Machine's, or every offer when both are
	// 0, from Seconds from now for For seconds (default 600).
	FaultMarketSpike = "market_spike"
	// FaultBidIgnored makes the next Count creates (default 1) ignore their
	// price and rent on demand, answering success as usual: the silent
	// on-demand rental Vast makes of a create without price.
	FaultBidIgnored = "bid_ignored"
	// FaultHostEnd moves the end date of Machine's offers (0: of every
	// offer; with Instance, of that instance's machine) to Seconds from now:
	// the host's maximum rental duration, shown on the offer as end_date
	// (vast-api.md §12.4). With Count > 0 (and neither Machine nor
	// Instance), each of the next Count instances' host leaves Seconds
	// after it starts running instead. A contract ends at its host's end
	// date: the instance expires (priceincrease.go). It stays set until
	// another host_end; clear does not undo it.
	FaultHostEnd = "host_end"
	// FaultStopAtSSH makes the next Count instances created (default 1)
	// stop the moment their SSH port is first dialled after they run: the
	// connection is refused and the instance shows stopped (actual,
	// intended, cur and next state), as one the host stops between
	// "running" and the client's first SSH connection. Storage keeps
	// billing.
	FaultStopAtSSH = "stop_at_ssh"
	// FaultCreateLate makes the next Count creates (default 1) commit the
	// rental but drop the connection without an answer, and the instance
	// appear Seconds of simulated time later (Vast processing a create
	// late): until then it is absent from show, listings and destroy, and
	// bills nothing; then it boots as any new rental. Its offer is taken
	// meanwhile.
	FaultCreateLate = "create_late"
	// FaultPriceIncrease makes a host ask Price $/h (GPU, per machine;
	// default the contract's price + 50%) of an on-demand contract: on
	// Instance Seconds from now, or on each of the next Count instances
	// (default 1) Seconds after it starts running (or after its workspace
	// holds File). The increase is pending
	// (GET /api/v0/instances/pending-price-increases/) and, unless
	// accepted, the contract ends For seconds after it is asked (default
	// 1 h) (vast-api.md §12.2).
	FaultPriceIncrease = "price_increase"
	// FaultImageSize gives Image a compressed size of Bytes: an instance
	// created from it pulls that many bytes at its host's inet_down (Mb/s),
	// so its loading lasts Bytes×8/(inet_down×10⁶) seconds, with docker's
	// progress ("<layer>: Downloading 1.20GB/8.00GB") as its status
	// message; ImageSize answers it (the simulator's registry, for --sim).
	FaultImageSize = "image_size"
	// FaultInetDown sets the download rate (inet_down, Mb/s) of Machine's
	// offers, or of every offer when Machine is 0: a slow or a fast host.
	FaultInetDown = "inet_down"
	// FaultPullStall makes the next Count creates (default 1) pull without
	// progress: loading forever, its status message never changing.
	FaultPullStall = "pull_stall"
	// FaultClear removes every pending fault.
	FaultClear = "clear"
)

// Fault is one knob setting. Which fields matter depends on Kind.
type Fault struct {
	Kind     string  `json:"kind"`
	Endpoint string  `json:"endpoint,omitempty"`
	Count    int     `json:"count,omitempty"`
	Status   int     `json:"status,omitempty"`
	Body     string  `json:"body,omitempty"`
	Instance int64   `json:"instance,omitempty"`
	Machine  int64   `json:"machine,omitempty"`
	Image    string  `json:"image,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"`
	// For is how long a market fault lasts, in seconds.
	For float64 `json:"for,omitempty"`
	// Price is an outbid's competing bid ($/h per machine).
	Price float64 `json:"price,omitempty"`
	// Factor is a market spike's multiplier.
	Factor float64 `json:"factor,omitempty"`
	// File delays a price increase until the instance's workspace holds
	// this file (checked whenever the instance is looked at), then Seconds
	// more: a test can raise a price at a point of its workload.
	File string `json:"file,omitempty"`
	// Bytes is an image's compressed size (image_size).
	Bytes int64 `json:"bytes,omitempty"`
	// Mbps is a host's download rate (inet_down).
	Mbps float64 `json:"mbps,omitempty"`
}

// Endpoint names used by FaultFail and FaultRateLimit.
var endpointNames = []string{
	"search", "create", "show", "list", "list_v0", "manage", "destroy", "attach_ssh",
	"instance_ssh_keys", "logs", "user", "charges", "invoices", "apikeys", "ssh_keys",
	"bulk_state", "bulk_destroy", "change_bid", "earnings", "spend_rate", "price_increases", "answer_price_increase",
}

type failSpec struct {
	status int
	body   string
	left   int
}

type faults struct {
	fail              map[string]*failSpec
	rateLimit         map[string]int
	rateLimitFlip     bool
	createErrContract int
	createErrStatus   int
	createLost        int
	readLag           int
	destroyNoop       int
	pullFailNext      int
	pullFailMachines  map[int64]bool
	pullFailImages    map[string]bool
	sshRefuseNewFor   time.Duration
	sshRefuseNewConns int
	slowLoading       time.Duration
	v0ListStatus      int
	preemptAfter      time.Duration
	preemptAfterCount int
	imageUUID         string
	imageUUIDCount    int
	bidIgnored        int
	outbidAfter       Fault // Count left, Seconds after running, For
	stopAtSSH         int
	createLate        int
	createLateFor     time.Duration
	priceAfter        Fault // a price increase: Count left, Seconds after running, Price, For
	hostEndAfter      Fault // a host's end: Count left, Seconds after running
	pullStall         int
	ssh               []*sshSchedule
}

// Inject sets a fault. It is safe to call while requests are in flight.
func (s *Server) Inject(f Fault) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	fs := &s.faults
	switch f.Kind {
	case FaultFail, FaultRateLimit:
		if f.Endpoint == "" {
			return fmt.Errorf("fault %s needs an endpoint (one of %v, or *)", f.Kind, endpointNames)
		}
		if f.Endpoint != "*" && !knownEndpoint(f.Endpoint) {
			return fmt.Errorf("unknown endpoint %q (want one of %v, or *)", f.Endpoint, endpointNames)
		}
		if f.Count <= 0 {
			f.Count = 1
		}
		if f.Kind == FaultRateLimit {
			if fs.rateLimit == nil {
				fs.rateLimit = map[string]int{}
			}
			fs.rateLimit[f.Endpoint] = f.Count
			return nil
		}
		if f.Status == 0 {
			f.Status = http.StatusServiceUnavailable
		}
		if fs.fail == nil {
			fs.fail = map[string]*failSpec{}
		}
		fs.fail[f.Endpoint] = &failSpec{status: f.Status, body: f.Body, left: f.Count}
	case FaultCreateErrorWithContract:
		fs.createErrContract = max(f.Count, 1)
		fs.createErrStatus = f.Status
	case FaultCreateLostResponse:
		fs.createLost = max(f.Count, 1)
	case FaultReadLag:
		fs.readLag = f.Count
	case FaultDestroyNoop:
		if f.Count == 0 {
			f.Count = 1
		}
		fs.destroyNoop = f.Count
	case FaultPreempt, FaultOffline, FaultExit:
		in := s.instances[f.Instance]
		if in == nil || in.Destroyed {
			return fmt.Errorf("fault %s: no live instance %d", f.Kind, f.Instance)
		}
		switch f.Kind {
		case FaultPreempt:
			in.setState(now, "stopped", "stopped", "stopped", "stopped", "")
			in.IsBid = true
		case FaultOffline:
			in.setState(now, "offline", in.Intended, in.Cur, in.Next, "host offline: no heartbeat")
		case FaultExit:
			in.setState(now, "exited", "running", "running", "running", "container exited with code 1")
		}
		s.killSessions(in)
	case FaultImagePull:
		switch {
		case f.Machine != 0:
			if fs.pullFailMachines == nil {
				fs.pullFailMachines = map[int64]bool{}
			}
			fs.pullFailMachines[f.Machine] = true
		case f.Image != "":
			if fs.pullFailImages == nil {
				fs.pullFailImages = map[string]bool{}
			}
			fs.pullFailImages[f.Image] = true
		default:
			fs.pullFailNext = max(f.Count, 1)
		}
	case FaultSSHRefuse:
		d := time.Duration(f.Seconds * float64(time.Second))
		if f.Instance == 0 {
			fs.sshRefuseNewFor, fs.sshRefuseNewConns = d, f.Count
			return nil
		}
		in := s.instances[f.Instance]
		if in == nil {
			return fmt.Errorf("fault %s: no instance %d", f.Kind, f.Instance)
		}
		if d > 0 {
			in.sshRefuseUntil = now.Add(d)
		}
		in.sshRefuseConns = f.Count
	case FaultSlowLoading:
		d := time.Duration(f.Seconds * float64(time.Second))
		if f.Instance == 0 {
			fs.slowLoading = d
			return nil
		}
		in := s.instances[f.Instance]
		if in == nil {
			return fmt.Errorf("fault %s: no instance %d", f.Kind, f.Instance)
		}
		in.loadFor = d
		if in.Actual == "loading" && in.nextState == "running" {
			in.nextAt = now.Add(d)
		}
	case FaultPreemptAfter:
		if f.Seconds <= 0 {
			return fmt.Errorf("fault %s needs seconds > 0", f.Kind)
		}
		fs.preemptAfter = time.Duration(f.Seconds * float64(time.Second))
		fs.preemptAfterCount = max(f.Count, 1)
	case FaultImageUUID:
		if f.Image == "" {
			return fmt.Errorf("fault %s needs image", f.Kind)
		}
		fs.imageUUID, fs.imageUUIDCount = f.Image, max(f.Count, 1)
	case FaultV0List:
		if f.Status != http.StatusOK && f.Status != http.StatusGone {
			return fmt.Errorf("fault %s: status must be 200 or 410", f.Kind)
		}
		fs.v0ListStatus = f.Status
	case FaultSSHDrop, FaultSSHStall:
		return s.armSSHFault(f, now)
	case FaultBidIgnored:
		fs.bidIgnored = max(f.Count, 1)
	case FaultStopAtSSH:
		fs.stopAtSSH = max(f.Count, 1)
	case FaultCreateLate:
		if f.Seconds <= 0 {
			return fmt.Errorf("fault %s needs seconds > 0 (how late the create lands)", f.Kind)
		}
		fs.createLate, fs.createLateFor = max(f.Count, 1), time.Duration(f.Seconds*float64(time.Second))
	case FaultOutbid, FaultMarketSpike:
		return s.injectMarket(f, now)
	case FaultHostEnd:
		if f.Seconds <= 0 {
			return fmt.Errorf("fault %s needs seconds > 0 (how long from now the host stays)", f.Kind)
		}
		if f.Instance != 0 {
			in := s.instances[f.Instance]
			if in == nil || in.Destroyed {
				return fmt.Errorf("fault %s: no live instance %d", f.Kind, f.Instance)
			}
			f.Machine = in.Offer.MachineID
		}
		if f.Count > 0 && f.Machine == 0 {
			fs.hostEndAfter = f
			return nil
		}
		for _, id := range s.order {
			if in := s.instances[id]; !in.Destroyed && (f.Machine == 0 || in.Offer.MachineID == f.Machine) {
				s.advance(in) // up to now on the old end date
			}
		}
		for _, o := range s.offers {
			if f.Machine == 0 || o.MachineID == f.Machine {
				o.EndDate = unix(now) + f.Seconds
			}
		}
	case FaultPriceIncrease:
		return s.injectIncrease(f, now)
	case FaultImageSize:
		if f.Image == "" || f.Bytes <= 0 {
			return fmt.Errorf("fault %s needs image and bytes > 0", f.Kind)
		}
		if s.imageSizes == nil {
			s.imageSizes = map[string]int64{}
		}
		s.imageSizes[f.Image] = f.Bytes
	case FaultInetDown:
		if f.Mbps <= 0 {
			return fmt.Errorf("fault %s needs mbps > 0", f.Kind)
		}
		for _, o := range s.offers {
			if f.Machine == 0 || o.MachineID == f.Machine {
				o.InetDown = f.Mbps
			}
		}
	case FaultPullStall:
		fs.pullStall = max(f.Count, 1)
	case FaultClear:
		*fs = faults{v0ListStatus: http.StatusGone}
		s.mkt.events = nil
		s.mkt.dropScheduled()
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	return nil
}

func knownEndpoint(e string) bool {
	for _, n := range endpointNames {
		if n == e {
			return true
		}
	}
	return false
}

// takeFailure consumes a pending fail/rate-limit fault for endpoint, if any.
// Called with s.mu held.
func (s *Server) takeFailure(endpoint string) (status int, body string, contentType string, ok bool) {
	fs := &s.faults
	for _, key := range []string{endpoint, "*"} {
		if n := fs.rateLimit[key]; n > 0 {
			fs.rateLimit[key] = n - 1
			fs.rateLimitFlip = !fs.rateLimitFlip
			if fs.rateLimitFlip {
				return http.StatusTooManyRequests, `{"detail": "API requests too frequent endpoint threshold=2.0"}`, "application/json", true
			}
			return http.StatusTooManyRequests, "API requests too frequent", "text/plain; charset=utf-8", true
		}
	}
	if f := fs.fail[endpoint]; f != nil && f.left != 0 {
		f.left--
		body := f.body
		if body == "" {
			body = fmt.Sprintf(`{"success": false, "error": "service_unavailable", "msg": "simulated failure (HTTP %d)"}`, f.status)
		}
		return f.status, body, "application/json", true
	}
	return 0, "", "", false
}
