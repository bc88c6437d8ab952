package sim

import (
	"bytes"
	"context"
	"fmt"

	"github.com/vastrun/vastrun/internal/provider"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The instance routes beyond show/manage/destroy: bulk state and destroy,
// reboot, change bid, deposit and execute.

// lookupLocked is a live instance, or nil. Called with s.mu held.
func (s *Server) lookupLocked(id int64) *instance {
	in := s.instances[id]
	if in == nil || in.Destroyed {
		return nil
	}
	return in
}

// applyStateLocked is the state change of PUT /instances/{id}/ and of the
// bulk form. Called with s.mu held.
func (s *Server) applyStateLocked(in *instance, state string) {
	now := s.clock.Now()
	switch state {
	case "stopped":
		in.setState(now, "stopped", "stopped", "stopped", "stopped", "")
		in.outbid = false // stopped by its renter: it waits for no market
		s.killSessions(in)
	case "running":
		// An expired instance cannot restart (vast-api.md §12.4).
		if in.Actual != "running" && !in.expired {
			in.setState(now, "loading", "running", "running", "running", "restarting container")
			in.nextAt, in.nextState = now.Add(s.cfg.ScheduleDelay), "running"
		}
	}
}

// maxBulkIDs is the chunk a bulk state change takes (vast-api.md §12.1).
const maxBulkIDs = 64

// handleBulkState is PUT /api/v0/instances/ {"ids": [...], "state": ...}
// (the 2026 CLI's stop/start of several instances). As documented
// (vast-api.md §12.1): at most 64 ids; the call succeeds when at least one
// instance was updated, with no per-id result, and answers 404 only when
// none of the ids is the caller's.
func (s *Server) handleBulkState(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		IDs   []int64 `json:"ids"`
		State string  `json:"state"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body")
		return
	}
	switch {
	case len(b.IDs) == 0:
		writeError(w, http.StatusBadRequest, "invalid_args", "ids list required")
		return
	case len(b.IDs) > maxBulkIDs:
		writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("chunk length of %d > %d", len(b.IDs), maxBulkIDs))
		return
	case b.State != "running" && b.State != "stopped":
		writeError(w, http.StatusBadRequest, "invalid_args", `body must be {"ids": [id, ...], "state": "running"|"stopped"}`)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	updated := 0
	for _, id := range b.IDs {
		if in := s.lookupLocked(id); in != nil {
			s.applyStateLocked(in, b.State)
			updated++
		}
	}
	if updated == 0 {
		writeError(w, http.StatusNotFound, "invalid_args", "Invalid instance ID list ids.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

// handleBulkDestroy is DELETE /api/v0/instances/ {"instance_ids": [...]}
// (the 2026 CLI's `destroy instances A B`): 404 instances_not_found when
// none of the ids is the caller's (vast-api.md §12.1). A mix of own and
// unknown ids destroys the own ones; the documents leave that case open
// (see the deviation list).
func (s *Server) handleBulkDestroy(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		IDs []int64 `json:"instance_ids"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "invalid request format")
		return
	}
	switch {
	case len(b.IDs) == 0:
		writeError(w, http.StatusBadRequest, "invalid_args", "instance_ids array is required")
		return
	case len(b.IDs) > maxBulkIDs:
		// The bulk state change's cap (§12.1); the destroy's is not
		// documented, so it is held to the same (see the deviations).
		writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("chunk length of %d > %d", len(b.IDs), maxBulkIDs))
		return
	}
	s.mu.Lock()
	var gone []*instance
	for _, id := range b.IDs {
		if in := s.lookupLocked(id); in != nil {
			s.destroyLocked(in)
			gone = append(gone, in)
		}
	}
	s.mu.Unlock()
	if len(gone) == 0 {
		writeError(w, http.StatusNotFound, "instances_not_found", fmt.Sprintf("Instances %s not found.", idList(b.IDs)))
		return
	}
	for _, in := range gone {
		in.stopSSH()
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

// idList writes ids as the backend's Python list would print them.
func idList(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// handleReboot is PUT /api/v0/instances/reboot/{id}/: docker stop/start
// in place, keeping the GPU; processes die, the instance is "rebooting"
// and then running again.
func (s *Server) handleReboot(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.lookupLocked(id)
	if in == nil {
		writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("invalid instance_id %d", id))
		return
	}
	s.advance(in)
	if in.Actual != "running" {
		writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("instance %d is %s, not running", id, in.Actual))
		return
	}
	now := s.clock.Now()
	in.setState(now, "rebooting", "running", "running", "running", "rebooting")
	in.nextAt, in.nextState = now.Add(s.cfg.ScheduleDelay), "running"
	s.killSessions(in)
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

// handleChangeBid is PUT /api/v0/instances/bid_price/{id}/ {"client_id",
// "price"}: an interruptible instance's bid becomes price (an on-demand
// one is refused: its price is the contract's). Billing changes
// from now on; a bid under the market pauses it (outbid), a bid at or above
// it resumes an outbid instance.
func (s *Server) handleChangeBid(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		ClientID *string  `json:"client_id"`
		Price    *float64 `json:"price"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "Invalid json body")
		return
	}
	if b.ClientID == nil || b.Price == nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "client_id and price are required")
		return
	}
	if *b.Price < provider.MinBidPrice || *b.Price > provider.MaxChangeBidPrice {
		writeError(w, http.StatusBadRequest, "invalid_args", "Please set a bid price >= 0.001 and <= 32.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.lookupLocked(id)
	if in == nil {
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	if !in.IsBid {
		// An on-demand contract keeps its price (vast-api.md §12.1).
		writeError(w, http.StatusBadRequest, "invalid_args", "Can't change price of on-demand contract.")
		return
	}
	s.advance(in) // bill up to now at the old price
	now := s.clock.Now()
	price := provider.BidFromWire(*b.Price, in.Offer.NumGPUs)
	in.IsBid, in.Bid = true, price
	in.logf(now, "bid changed to $%.4f/h", price)
	// The market decides from here: under the clearing price it is
	// stopped (outbid), at or above it an outbid instance resumes.
	in.evalMarket(now)
	if in.killPending {
		in.killPending = false
		s.killSessions(in)
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

// handleDeposit is GET /api/v0/instances/balance/{id}/: on-demand and
// interruptible rentals hold no deposit.
func (s *Server) handleDeposit(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	s.mu.Lock()
	in := s.lookupLocked(id)
	s.mu.Unlock()
	if in == nil {
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "refundable_deposit": 0.0, "total_discount": 0.0, "discount_months": 0})
}

// executeAllowed are the commands Vast's constrained execute documents.
var executeAllowed = map[string]bool{"ls": true, "rm": true, "du": true}

// handleExecute is PUT /api/v0/instances/command/{id}/ {"command"}: one of
// ls, rm, du runs in the instance's container (its sandbox; container paths
// under /workspace and /root map into it, no shell), and its output is
// served at result_url, which answers 403 until the "upload" lands. Paths
// outside the sandbox's /workspace and /root fail as the command's output.
func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		Command *string `json:"command"`
	}
	if err := readBody(r, &b); err != nil || b.Command == nil {
		writeError(w, http.StatusBadRequest, "invalid_args", `body must be {"command": "ls -l"}`)
		return
	}
	if len(*b.Command) > 512 {
		writeError(w, http.StatusBadRequest, "invalid_args", "command longer than 512 characters")
		return
	}
	argv := strings.Fields(*b.Command)
	if len(argv) == 0 || !executeAllowed[argv[0]] {
		writeError(w, http.StatusBadRequest, "invalid_args", "only ls, rm and du may be executed")
		return
	}
	s.mu.Lock()
	in := s.lookupLocked(id)
	if in != nil {
		s.advance(in)
	}
	switch {
	case in == nil:
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "invalid_container_id", fmt.Sprintf("invalid instance id %d", id))
		return
	case in.Actual != "running":
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "invalid_container", fmt.Sprintf("instance %d is %s, not running", id, in.Actual))
		return
	}
	sandbox := in.sandbox
	s.mu.Unlock()
	for i, a := range argv[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		argv[i+1] = containerPath(sandbox, a)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(sandbox, "workspace")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // a failing ls is output, not an API error
	// The host path of the sandbox is the simulator's business, not the
	// container's: show container paths.
	text := strings.ReplaceAll(out.String(), sandbox, "")
	url := s.storeResult(r, text, "C.log")
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "writeable_path": "/workspace", "result_url": url, "msg": "Command is executing..."})
}

// containerPath maps a path inside the container to the sandbox: relative
// paths are under /workspace. A path the sandbox lacks (/etc) is the
// command's own failure, printed in its output as on a host: Vast documents
// no API error for it. Cleaning an absolute path keeps it inside the
// sandbox.
func containerPath(sandbox, p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/workspace/" + p
	}
	return filepath.Join(sandbox, filepath.Clean(p))
}

// storeResult keeps text for a result URL that answers once not-yet.
func (s *Server) storeResult(r *http.Request, text, suffix string) string {
	// The object name ends in suffix (".log", or "C.log" for execute, as
	// Vast names them); the control plane looks objects up without ".log".
	token := randomHex(16) + strings.TrimSuffix(suffix, ".log")
	s.mu.Lock()
	s.results[token] = &logResult{text: text, polls: 1}
	s.mu.Unlock()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s/_sim/results/%s.log", scheme, r.Host, token)
}

// handleFilters is GET /api/v0/instances/filters/: the distinct values of
// the account's instances for the columns the v1 list filters on.
func (s *Server) handleFilters(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	s.mu.Lock()
	vals := map[string]map[string]bool{}
	for _, id := range s.order {
		in := s.instances[id]
		if !s.visible(in) {
			continue
		}
		for col, v := range map[string]string{"label": in.Label, "actual_status": in.Actual, "intended_status": in.Intended,
			"gpu_name": in.Offer.Model.name, "image_uuid": in.ImageUUID, "verification": in.Offer.Verification} {
			if vals[col] == nil {
				vals[col] = map[string]bool{}
			}
			vals[col][v] = true
		}
	}
	s.mu.Unlock()
	filters := []map[string]any{}
	cols := make([]string, 0, len(vals))
	for c := range vals {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	for _, c := range cols {
		vs := make([]string, 0, len(vals[c]))
		for v := range vals[c] {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		filters = append(filters, map[string]any{"name": c, "values": vs})
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "filters": filters})
}

// handleGPUNames is GET /api/v0/gpu_names/unique/: every GPU model name
// the marketplace knows (the official CLI caches it to map names).
func (s *Server) handleGPUNames(w http.ResponseWriter, r *http.Request, _ int64) {
	names := make([]string, 0, len(gpuModels))
	for _, m := range gpuModels {
		names = append(names, m.name)
	}
	sort.Strings(names)
	writeJSON(w, http.StatusOK, map[string]any{"gpu_names": names})
}

// SeedInstances rents n free offers at once, as if created long enough ago
// to be running, labelled label(i), without SSH servers: an account with a
// large listing for benchmarks and `vastrun sim serve --instances N`. It
// fails when fewer than n offers are free.
func (s *Server) SeedInstances(n int, label func(i int) string) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var free []*offer
	for _, o := range s.offers {
		if o.RentedBy == 0 && len(free) < n {
			free = append(free, o)
		}
	}
	if len(free) < n {
		return nil, fmt.Errorf("seed %d instances: only %d offers are free (raise the catalog size)", n, len(free))
	}
	now := s.clock.Now()
	ids := make([]int64, 0, n)
	for i, o := range free {
		l := label(i)
		disk := min(10, o.DiskSpace)
		in := s.createLocked(o, createBody{ClientID: "me", Image: "vastai/base-image:cuda-12.4.1-auto", Label: &l}, disk, nil)
		in.nextAt = time.Time{}
		in.enter("running", now)
		ids = append(ids, in.ID)
	}
	return ids, nil
}
