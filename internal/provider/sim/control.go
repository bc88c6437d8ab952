package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/clock"
)

// InstanceState is the simulator's own view of an instance, for assertions.
type InstanceState struct {
	ID           int64   `json:"id"`
	Label        string  `json:"label"`
	OfferID      int64   `json:"offer_id"`
	MachineID    int64   `json:"machine_id"`
	ActualStatus string  `json:"actual_status"`
	Intended     string  `json:"intended_status"`
	Image        string  `json:"image"`
	Destroyed    bool    `json:"destroyed"`
	SSHPort      int     `json:"ssh_port"`
	GPUCost      float64 `json:"gpu_cost"`
	DiskCost     float64 `json:"disk_cost"`
	Sandbox      string  `json:"sandbox"`
	// RunningSince is when the container last started running (billing of
	// the GPU starts then).
	RunningSince time.Time `json:"running_since,omitempty"`
	// Bid is an interruptible instance's bid ($/h; 0 on demand) and
	// Outbids how often the market stopped it.
	Bid     float64 `json:"bid,omitempty"`
	Outbids int     `json:"outbids,omitempty"`
	// APIKey is the instance's CONTAINER_API_KEY (a simulator-only view).
	APIKey string `json:"container_api_key"`
	// DestroyedBy is the key whose destroy call ended the contract:
	// "container_api_key" (the instance's own, as its agent destroys it),
	// "account_key", or "" (not destroyed by a call).
	DestroyedBy string `json:"destroyed_by,omitempty"`
}

// State is a snapshot for leak assertions: Live holds every instance that
// is not destroyed (and so still billing or able to bill).
type State struct {
	Now   time.Time       `json:"now"`
	Live  []InstanceState `json:"live"`
	Gone  []InstanceState `json:"destroyed"`
	Spent float64         `json:"spent"`
	// MaxLivePerLabel is, per label, the most live contracts it ever had
	// at once (a duplicate-rental detector).
	MaxLivePerLabel map[string]int `json:"max_live_per_label"`
	// SSHFaultsFired counts the ssh_drop and ssh_stall faults that acted.
	SSHFaultsFired int `json:"ssh_faults_fired"`
}

// Snapshot returns the current state, billing advanced to now.
func (s *Server) Snapshot() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	st := State{Now: now, Live: []InstanceState{}, Gone: []InstanceState{}, MaxLivePerLabel: map[string]int{}, SSHFaultsFired: s.sshFaultsFired}
	for l, n := range s.maxLive {
		st.MaxLivePerLabel[l] = n
	}
	ids := append([]int64(nil), s.order...)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		in := s.instances[id]
		s.advance(in)
		in.sshMu.Lock()
		port := in.sshPort
		in.sshMu.Unlock()
		is := InstanceState{ID: in.ID, Label: in.Label, OfferID: in.Offer.ID, MachineID: in.Offer.MachineID,
			ActualStatus: in.Actual, Intended: in.Intended, Image: in.Image, Destroyed: in.Destroyed,
			SSHPort: port, GPUCost: in.GPUCost, DiskCost: in.DiskCost, Sandbox: in.sandbox, APIKey: in.APIKey, RunningSince: in.RunningSince, Outbids: in.Outbids, DestroyedBy: in.destroyedBy}
		if in.IsBid {
			is.Bid = in.Bid
		}
		st.Spent += in.GPUCost + in.DiskCost
		if in.Destroyed {
			st.Gone = append(st.Gone, is)
		} else {
			st.Live = append(st.Live, is)
		}
	}
	return st
}

// Advance moves a fake clock forward; it fails on any other clock.
func (s *Server) Advance(d time.Duration) error {
	f, ok := s.clock.(*clock.Fake)
	if !ok {
		return fmt.Errorf("the simulator clock is not manual; advance needs a fake clock")
	}
	f.Advance(d)
	return nil
}

// serveControl answers /_sim/: GET state, POST faults, POST advance, and
// the result URLs that log requests point at.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request, seg []string) {
	switch {
	case len(seg) == 1 && seg[0] == "state" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Snapshot())
	case len(seg) == 1 && seg[0] == "faults" && r.Method == http.MethodPost:
		var f Fault
		if err := readBody(r, &f); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "fault must be JSON: "+err.Error())
			return
		}
		if err := s.Inject(f); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_fault", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
	case len(seg) == 1 && seg[0] == "advance" && r.Method == http.MethodPost:
		var b struct {
			Seconds float64 `json:"seconds"`
		}
		if err := readBody(r, &b); err != nil || b.Seconds < 0 {
			writeError(w, http.StatusBadRequest, "invalid_request", `body must be {"seconds": N}`)
			return
		}
		if err := s.Advance(time.Duration(b.Seconds * float64(time.Second))); err != nil {
			writeError(w, http.StatusConflict, "not_manual_clock", err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "now": s.clock.Now()})
	case len(seg) == 2 && seg[0] == "results" && r.Method == http.MethodGet:
		token := strings.TrimSuffix(seg[1], ".log")
		s.mu.Lock()
		res := s.results[token]
		notYet := res != nil && res.polls > 0
		if notYet {
			res.polls--
		}
		s.mu.Unlock()
		switch {
		case res == nil:
			writeRaw(w, http.StatusNotFound, "application/xml", "<Error><Code>NoSuchKey</Code></Error>")
		case notYet: // the object store answers 403/404 until the upload lands
			writeRaw(w, http.StatusForbidden, "application/xml", "<Error><Code>AccessDenied</Code></Error>")
		default:
			writeRaw(w, http.StatusOK, "text/plain; charset=utf-8", res.text)
		}
	default:
		writeError(w, http.StatusNotFound, "not_found", "unknown simulator control path")
	}
}

// MarshalFault is a helper for tools that post faults.
func MarshalFault(f Fault) []byte {
	b, _ := json.Marshal(f)
	return b
}
