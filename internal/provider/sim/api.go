package sim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gliderlabs/ssh"
	"github.com/vastrun/vastrun/internal/clock"
	"github.com/vastrun/vastrun/internal/provider"
)

// minDiskGB is the create's smallest disk: "Minimum 8 when specified" on
// Vast's SLA documentation branch (vast-api.md §12.4; whether the server
// enforces it is not documented, see the deviation list).
const minDiskGB = 8

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"success": false, "error": "server_error", "msg": "encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	// The body is whole: it goes with its length, not chunked (as Go sends
	// a body over 2 KB without one), and a client can size its buffer.
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client went away; a handler has no one else to tell
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"success": false, "error": code, "msg": msg})
}

func writeRaw(w http.ResponseWriter, status int, contentType, body string) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	io.WriteString(w, body) //nolint:errcheck // the client went away; a handler has no one else to tell
}

// ServeHTTP routes the wire API and the /_sim/ control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.Trim(r.URL.Path, "/")
	seg := strings.Split(path, "/")
	if seg[0] == "_sim" {
		s.serveControl(w, r, seg[1:])
		return
	}
	if len(seg) < 3 || seg[0] != "api" || (seg[1] != "v0" && seg[1] != "v1") {
		writeError(w, http.StatusNotFound, "not_found", "no such API path: /"+path)
		return
	}
	ver, rest := seg[1], seg[2:]
	route, id, handler := s.route(r.Method, ver, rest)
	if handler == nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s /%s", r.Method, path))
		return
	}
	s.mu.Lock()
	status, body, ctype, failed := s.takeFailure(route)
	s.mu.Unlock()
	if failed {
		writeRaw(w, status, ctype, body)
		return
	}
	handler(w, r, id)
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, id int64)

// route maps method + path to a fault endpoint name and a handler.
func (s *Server) route(method, ver string, p []string) (string, int64, handlerFunc) {
	idAt := func(i int) (int64, bool) {
		if len(p) <= i {
			return 0, false
		}
		n, err := strconv.ParseInt(p[i], 10, 64)
		return n, err == nil
	}
	switch {
	case ver == "v0" && len(p) == 1 && p[0] == "bundles" && (method == http.MethodPost || method == http.MethodGet):
		return "search", 0, s.handleSearch
	case ver == "v0" && len(p) == 2 && p[0] == "search" && p[1] == "asks" && method == http.MethodPut:
		return "search", 0, s.handleSearch
	case ver == "v0" && len(p) == 2 && p[0] == "asks" && method == http.MethodPut:
		if id, ok := idAt(1); ok {
			return "create", id, s.handleCreate
		}
	case ver == "v1" && len(p) == 1 && p[0] == "instances" && method == http.MethodGet:
		return "list", 0, s.handleListV1
	case ver == "v0" && len(p) == 1 && p[0] == "instances" && method == http.MethodGet:
		return "list_v0", 0, s.handleListV0
	case ver == "v0" && len(p) == 1 && p[0] == "instances" && method == http.MethodPut:
		return "bulk_state", 0, s.handleBulkState
	case ver == "v0" && len(p) == 1 && p[0] == "instances" && method == http.MethodDelete:
		return "bulk_destroy", 0, s.handleBulkDestroy
	case ver == "v0" && len(p) == 2 && p[0] == "instances" && p[1] == "filters" && method == http.MethodGet:
		return "filters", 0, s.handleFilters
	case ver == "v0" && len(p) == 3 && p[0] == "instances" && method == http.MethodPut && p[1] == "reboot":
		if id, ok := idAt(2); ok {
			return "reboot", id, s.handleReboot
		}
	case ver == "v0" && len(p) == 3 && p[0] == "instances" && method == http.MethodPut && p[1] == "command":
		if id, ok := idAt(2); ok {
			return "execute", id, s.handleExecute
		}
	case ver == "v0" && len(p) == 3 && p[0] == "instances" && method == http.MethodPut && p[1] == "bid_price":
		if id, ok := idAt(2); ok {
			return "change_bid", id, s.handleChangeBid
		}
	case ver == "v0" && len(p) == 3 && p[0] == "instances" && method == http.MethodGet && p[1] == "balance":
		if id, ok := idAt(2); ok {
			return "deposit", id, s.handleDeposit
		}
	case ver == "v0" && len(p) == 2 && p[0] == "gpu_names" && p[1] == "unique" && method == http.MethodGet:
		return "gpu_names", 0, s.handleGPUNames
	case ver == "v0" && len(p) == 3 && p[0] == "users" && p[1] == "me" && p[2] == "invoices" && method == http.MethodGet:
		return "legacy_invoices", 0, s.handleLegacyInvoices
	case ver == "v0" && len(p) == 1 && p[0] == "invoices" && method == http.MethodGet:
		return "invoice_search", 0, s.handleInvoiceSearch
	case ver == "v0" && len(p) == 1 && p[0] == "template" && method == http.MethodGet:
		return "templates", 0, s.handleTemplates
	case ver == "v0" && len(p) == 2 && p[0] == "users" && p[1] == "cloud_integrations" && method == http.MethodGet:
		return "cloud_integrations", 0, s.handleCloudIntegrations
	case ver == "v0" && len(p) == 2 && p[0] == "commands" && p[1] == "copy_direct" && method == http.MethodPut:
		return "copy", 0, s.handleCopyDirect
	case ver == "v0" && len(p) == 2 && p[0] == "commands" && p[1] == "rsync" && method == http.MethodPut:
		return "copy", 0, s.handleRsync
	case ver == "v0" && len(p) == 2 && p[0] == "commands" && p[1] == "rclone" && method == http.MethodPost:
		return "copy", 0, s.handleRclone
	case ver == "v0" && len(p) == 3 && p[0] == "users" && p[2] == "machine-earnings" && method == http.MethodGet:
		return "earnings", 0, s.handleMachineEarnings
	case ver == "v0" && len(p) == 2 && p[0] == "users" && p[1] == "spend-rate" && method == http.MethodGet:
		return "spend_rate", 0, s.handleSpendRate
	case ver == "v0" && len(p) == 2 && p[0] == "instances" && p[1] == "pending-price-increases" && method == http.MethodGet:
		return "price_increases", 0, s.handlePendingPriceIncreases
	case ver == "v0" && len(p) == 2 && p[0] == "instances" && p[1] == "accept-price-increase" && method == http.MethodPut:
		return "answer_price_increase", 0, s.handleAnswerIncrease("accepted")
	case ver == "v0" && len(p) == 2 && p[0] == "instances" && p[1] == "reject-price-increase" && method == http.MethodPut:
		return "answer_price_increase", 0, s.handleAnswerIncrease("rejected")
	case ver == "v0" && len(p) == 2 && p[0] == "instances":
		id, ok := idAt(1)
		if !ok && method == http.MethodGet {
			// A non-integer id is refused, not unrouted (vast-api.md §12.1).
			return "show", 0, func(w http.ResponseWriter, r *http.Request, _ int64) {
				if _, ok := s.authorize(w, r, "instance_read"); ok {
					writeError(w, http.StatusBadRequest, "invalid_args", "invalid instance_id")
				}
			}
		}
		if !ok {
			return "", 0, nil
		}
		switch method {
		case http.MethodGet:
			return "show", id, s.handleShow
		case http.MethodPut:
			return "manage", id, s.handleManage
		case http.MethodDelete:
			return "destroy", id, s.handleDestroy
		}
	case ver == "v0" && len(p) == 3 && p[0] == "instances" && p[2] == "ssh":
		id, ok := idAt(1)
		if !ok {
			return "", 0, nil
		}
		switch method {
		case http.MethodPost:
			return "attach_ssh", id, s.handleAttachSSH
		case http.MethodGet:
			return "instance_ssh_keys", id, s.handleInstanceSSHKeys
		}
	case ver == "v0" && len(p) == 3 && p[0] == "instances" && p[1] == "request_logs" && method == http.MethodPut:
		if id, ok := idAt(2); ok {
			return "logs", id, s.handleRequestLogs
		}
	case ver == "v0" && len(p) == 2 && p[0] == "users" && p[1] == "current" && method == http.MethodGet:
		return "user", 0, s.handleCurrentUser
	case ver == "v0" && len(p) == 1 && p[0] == "charges" && method == http.MethodGet:
		return "charges", 0, s.handleCharges
	case ver == "v1" && len(p) == 1 && p[0] == "invoices" && method == http.MethodGet:
		return "invoices", 0, s.handleInvoices
	case ver == "v0" && len(p) == 2 && p[0] == "auth" && p[1] == "apikeys":
		switch method {
		case http.MethodGet:
			return "apikeys", 0, s.handleListAPIKeys
		case http.MethodPost:
			return "apikeys", 0, s.handleCreateAPIKey
		}
	case ver == "v0" && len(p) == 3 && p[0] == "auth" && p[1] == "apikeys" && method == http.MethodDelete:
		if id, ok := idAt(2); ok {
			return "apikeys", id, s.handleDeleteAPIKey
		}
	case ver == "v0" && len(p) == 1 && p[0] == "ssh":
		switch method {
		case http.MethodGet:
			return "ssh_keys", 0, s.handleListSSHKeys
		case http.MethodPost:
			return "ssh_keys", 0, s.handleAddSSHKey
		}
	case ver == "v0" && len(p) == 2 && p[0] == "ssh" && method == http.MethodDelete:
		if id, ok := idAt(1); ok {
			return "ssh_keys", id, s.handleDeleteSSHKey
		}
	}
	return "", 0, nil
}

// authorize authenticates and checks the key's permission category.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, category string) (*apiKey, bool) {
	k, ok := s.authenticate(w, r, false)
	if !ok {
		return nil, false
	}
	if !k.permits(category) {
		writeError(w, http.StatusUnauthorized, "not_authorized", fmt.Sprintf("This API key lacks the %s permission.", category))
		return nil, false
	}
	return k, true
}

// readBody decodes a JSON body; an empty body is {}.
func readBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		b = []byte("{}")
	}
	return json.Unmarshal(b, v)
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request, _ int64) {
	// Anonymous search is allowed (gpuhunt searches without a key); a key
	// that is present must be valid.
	if k, ok := s.authenticate(w, r, true); !ok {
		return
	} else if k != nil && !k.permits("misc") {
		writeError(w, http.StatusUnauthorized, "not_authorized", "This API key lacks the misc permission.")
		return
	}
	var q map[string]any
	switch r.Method {
	case http.MethodGet:
		raw := r.URL.Query().Get("q")
		if raw == "" {
			raw = "{}"
		}
		if err := json.Unmarshal([]byte(raw), &q); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json in q")
			return
		}
	case http.MethodPut: // /search/asks/ wants {"select_cols": [...], "q": {...}}
		var body struct {
			Q map[string]any `json:"q"`
		}
		if err := readBody(r, &body); err != nil || body.Q == nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body: expected {\"q\": {...}}")
			return
		}
		q = body.Q
	default:
		if err := readBody(r, &q); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body")
			return
		}
	}
	s.mu.Lock()
	s.refreshMinBid()
	res, err := searchSnapshot(s.offers, q)
	for i := range res.offers { // the host's dates on the client's clock
		o := &res.offers[i]
		o.StartDate, o.EndDate = s.futureUnix(o.StartDate), s.futureUnix(o.EndDate)
	}
	s.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	res.writeTo(w) //nolint:errcheck // the client went away; a handler has no one else to tell
}

type createBody struct {
	ClientID      string          `json:"client_id"`
	Image         string          `json:"image"`
	Disk          *float64        `json:"disk"`
	Label         *string         `json:"label"`
	Env           json.RawMessage `json:"env"`
	Onstart       *string         `json:"onstart"`
	Runtype       *string         `json:"runtype"`
	Args          []string        `json:"args"`
	Price         *float64        `json:"price"`
	ImageLogin    *string         `json:"image_login"`
	CancelUnavail *bool           `json:"cancel_unavail"`
	TemplateHash  *string         `json:"template_hash_id"`
	TargetState   *string         `json:"target_state"`
}

// runtypeTokens are what runtype may be made of: the document's enum and
// the truncated tokens the 2026 CLI combines ("ssh_direc ssh_proxy").
var runtypeTokens = map[string]bool{
	"ssh": true, "jupyter": true, "args": true, "ssh_proxy": true, "ssh_direct": true, "jupyter_proxy": true,
	"jupyter_direct": true, "ssh_direc": true, "jupyter_direc": true,
}

// checkCreate enforces the document's enums and limits on a create body,
// as Vast's input validation does; it returns the error message or "".
func checkCreate(b *createBody) string {
	if b.Runtype != nil && *b.Runtype != "" {
		for _, tok := range strings.Fields(*b.Runtype) {
			if !runtypeTokens[tok] {
				return fmt.Sprintf("runtype %q: %q is not one of ssh, jupyter, args, ssh_proxy, ssh_direct, jupyter_proxy, jupyter_direct", *b.Runtype, tok)
			}
		}
	}
	if b.TargetState != nil && *b.TargetState != "running" && *b.TargetState != "stopped" {
		return fmt.Sprintf("target_state %q: must be running or stopped", *b.TargetState)
	}
	if b.Onstart != nil && len(*b.Onstart) > 4048 {
		return "onstart longer than 4048 characters: gzip and base64 a larger script"
	}
	return ""
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request, offerID int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b createBody
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body")
		return
	}
	if msg := checkCreate(&b); msg != "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args", "msg": msg, "ask_id": offerID})
		return
	}
	var tmpl *template
	if b.TemplateHash != nil && *b.TemplateHash != "" {
		if tmpl = templateByHash(*b.TemplateHash); tmpl == nil {
			// No vendor source names this answer: the create's documented
			// 400 invalid_args stands in for it (see the deviation list).
			writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args",
				"msg": fmt.Sprintf("Invalid template_hash_id %s.", *b.TemplateHash), "ask_id": offerID})
			return
		}
		// The template supplies what the body leaves out.
		if b.Image == "" {
			b.Image = tmpl.Image
		}
		if b.Runtype == nil || *b.Runtype == "" {
			b.Runtype = &tmpl.Runtype
		}
		if b.Onstart == nil && tmpl.Onstart != "" {
			b.Onstart = &tmpl.Onstart
		}
	}
	s.mu.Lock()
	var o *offer
	for _, x := range s.offers {
		if x.ID == offerID {
			o = x
			break
		}
	}
	switch {
	case o == nil:
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "error": "no_such_ask",
			"msg": fmt.Sprintf("error 404/3603: no_such_ask Instance type by id %d is not available.", offerID), "ask_id": offerID})
		return
	case o.RentedBy != 0:
		s.mu.Unlock()
		writeJSON(w, http.StatusGone, map[string]any{"success": false, "error": "no_such_ask",
			"msg": fmt.Sprintf("error 410/3907: no_such_ask Instance type %d is no longer available.", offerID), "ask_id": offerID})
		return
	case b.Image == "" && (b.TemplateHash == nil || *b.TemplateHash == ""):
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args", "msg": "image is required", "ask_id": offerID})
		return
	}
	disk := float64(minDiskGB)
	if b.Disk != nil {
		disk = *b.Disk
	}
	if disk < minDiskGB && b.Disk != nil {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args",
			"msg": fmt.Sprintf("disk %.1f GB is under the minimum of %d GB", disk, minDiskGB), "ask_id": offerID})
		return
	}
	if disk > o.DiskSpace {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args",
			"msg": fmt.Sprintf("disk %.1f GB is outside %d..%.1f GB for this offer", disk, minDiskGB, o.DiskSpace), "ask_id": offerID})
		return
	}
	if b.Label != nil && len(*b.Label) > 1024 {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args", "msg": "label longer than 1024 characters", "ask_id": offerID})
		return
	}
	if b.Price != nil && (*b.Price < 0.001 || *b.Price > 128) {
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_price", "msg": "price must be between 0.001 and 128", "ask_id": offerID})
		return
	}
	if b.Price != nil && s.faults.bidIgnored > 0 {
		s.faults.bidIgnored--
		b.Price = nil
	}
	lowBid := b.Price != nil && provider.BidFromWire(*b.Price, o.NumGPUs) < s.clearingNow(o)
	if lowBid && b.CancelUnavail != nil && *b.CancelUnavail {
		// cancel_unavail: a bid that cannot start now is refused, and
		// nothing is created (the document's 410).
		s.mu.Unlock()
		writeJSON(w, http.StatusGone, map[string]any{"success": false, "error": "no_such_ask",
			"msg": fmt.Sprintf("error 410/3907: no_such_ask Instance type %d is no longer available.", offerID), "ask_id": offerID})
		return
	}
	late := s.faults.createLate > 0
	before, had := s.maxLive[in2label(b)]
	in := s.createLocked(o, b, disk, tmpl)
	fs := &s.faults
	lost := fs.createLost > 0
	if lost {
		fs.createLost--
	}
	if late {
		fs.createLate--
		lost = true // the answer never arrives; the rental lands later
		// It is counted live for its label when it lands (hidden).
		if had {
			s.maxLive[in.Label] = before
		} else {
			delete(s.maxLive, in.Label)
		}
		s.delayLocked(in, fs.createLateFor)
	}
	errContract := !lost && fs.createErrContract > 0
	errStatus := fs.createErrStatus
	if errContract {
		fs.createErrContract--
	}
	minBid := o.MinBid
	s.mu.Unlock()

	if err := s.startSSH(in); err != nil {
		s.log.Error("start SSH", "instance", in.ID, "err", err)
	}
	switch {
	case lost:
		// The rental committed; the answer never arrives.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close() //nolint:errcheck // the fault is the dropped connection; its Close error changes nothing
				return
			}
		}
		writeRaw(w, http.StatusGatewayTimeout, "text/html", "<html><body>504 Gateway Time-out</body></html>")
	case errContract:
		if errStatus == 0 {
			errStatus = http.StatusInternalServerError
		}
		writeJSON(w, errStatus, map[string]any{"success": false, "error": "server_error",
			"msg": "error 500/1201: internal error while starting the instance", "new_contract": in.ID})
	case lowBid:
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_price",
			"msg":          fmt.Sprintf("Your bid of $%.4f/h is below the minimum bid $%.4f/h; the instance was created stopped.", *b.Price, minBid),
			"new_contract": in.ID})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "new_contract": in.ID, "instance_api_key": in.APIKey})
	}
}

// createLocked makes the instance. Called with s.mu held.
func (s *Server) createLocked(o *offer, b createBody, disk float64, tmpl *template) *instance {
	now := s.clock.Now()
	s.nextID += 1 + int64(len(s.order)%3)
	in := &instance{
		ID: s.nextID, Offer: o, Image: b.Image, Disk: disk, Args: b.Args, Created: now, billedTo: now, mkt: s.mkt, marketAt: now,
		Intended: "running", Cur: "running", Next: "running", APIKey: randomHex(32),
		loadFor: s.cfg.LoadDuration, readLag: s.faults.readLag,
	}
	if b.Label != nil {
		in.Label = *b.Label
	}
	if b.Onstart != nil {
		in.Onstart = *b.Onstart
	}
	in.Runtype = "ssh_direc ssh_proxy"
	if b.Runtype != nil && *b.Runtype != "" {
		in.Runtype = *b.Runtype
	}
	in.Env = parseEnv(b.Env)
	if b.Price != nil {
		in.IsBid, in.Bid = true, provider.BidFromWire(*b.Price, o.NumGPUs)
		if oa := &s.faults.outbidAfter; oa.Count > 0 {
			oa.Count--
			in.outbidAfter = *oa
		}
	}
	fs := &s.faults
	if n := s.imageSizes[b.Image]; n > 0 {
		in.pullBytes = n
		in.loadFor = pullTime(n, o.InetDown)
	}
	if fs.slowLoading > 0 {
		in.loadFor = fs.slowLoading
	}
	if fs.pullStall > 0 {
		fs.pullStall--
		in.pullStalls = true
	}
	switch {
	case fs.pullFailNext > 0:
		fs.pullFailNext--
		in.pullFails = true
	case fs.pullFailMachines[o.MachineID], fs.pullFailImages[b.Image]:
		in.pullFails = true
	}
	if msg := s.pullDenied(b.Image, b.ImageLogin); msg != "" {
		in.pullFails, in.pullMsg = true, msg
	}
	if fs.sshRefuseNewFor > 0 {
		in.sshRefuseUntil = now.Add(fs.sshRefuseNewFor)
	}
	in.ImageUUID = in.Image
	if fs.imageUUIDCount > 0 {
		fs.imageUUIDCount--
		in.ImageUUID = fs.imageUUID
	}
	if fs.preemptAfterCount > 0 {
		fs.preemptAfterCount--
		in.preemptAfter = fs.preemptAfter
	}
	if pa := &fs.priceAfter; pa.Count > 0 && !in.IsBid {
		pa.Count--
		in.priceAfter = *pa
	}
	if he := &fs.hostEndAfter; he.Count > 0 {
		he.Count--
		in.hostEndAfter = *he
	}
	in.sshRefuseConns = fs.sshRefuseNewConns
	if fs.stopAtSSH > 0 {
		fs.stopAtSSH--
		in.stopAtSSH = true
	}
	in.nextAt, in.nextState = now.Add(s.cfg.ScheduleDelay), "loading"
	in.Template = tmpl
	stopped := b.TargetState != nil && *b.TargetState == "stopped"
	if stopped || (in.IsBid && in.Bid < s.clearingNow(o)) { // asked for, or below market: created stopped
		in.Actual, in.Intended, in.Cur, in.Next = "stopped", "stopped", "stopped", "stopped"
		in.nextAt = time.Time{}
		// Below the market it waits for priority, as an outbid one does.
		in.outbid = !stopped
	}
	in.logf(now, "contract %d created from offer %d (machine %d)", in.ID, o.ID, o.MachineID)
	o.RentedBy = in.ID
	if in.Label != "" {
		live := 1
		for _, other := range s.instances {
			if !other.Destroyed && other.Label == in.Label && !s.hidden(other) {
				live++
			}
		}
		s.maxLive[in.Label] = max(s.maxLive[in.Label], live)
	}
	s.instances[in.ID] = in
	s.order = append(s.order, in.ID)
	s.addKey(&apiKey{Name: fmt.Sprintf("instance-%d", in.ID), Key: in.APIKey, Instance: in.ID})
	if err := in.makeSandbox(s.dir); err != nil {
		s.log.Error("make sandbox", "instance", in.ID, "err", err)
	}
	if s.cfg.Images != nil && !in.pullFails {
		s.startBox(in, b.ImageLogin)
	}
	return in
}

func in2label(b createBody) string {
	if b.Label == nil {
		return ""
	}
	return *b.Label
}

// delayLocked makes a just-created instance a late create: it is there
// for nobody (show, listings, destroy) and bills nothing until d from
// now, then boots as a new rental does. Called with s.mu held.
func (s *Server) delayLocked(in *instance, d time.Duration) {
	at := s.clock.Now().Add(d)
	in.hiddenUntil, in.Created, in.billedTo, in.marketAt = at, at, at, at
	in.nextAt = at.Add(s.cfg.ScheduleDelay)
	in.logf(at, "contract %d: the create was processed late", in.ID)
}

// hidden reports a late create that has not landed yet; on its first look
// after landing it is counted live for its label. Called with s.mu held.
func (s *Server) hidden(in *instance) bool {
	if in.hiddenUntil.IsZero() || in.landed {
		return false
	}
	return s.hiddenAt(in, s.clock.Now())
}

// hiddenAt is hidden as of now (one clock reading for a whole listing).
func (s *Server) hiddenAt(in *instance, now time.Time) bool {
	if in.hiddenUntil.IsZero() || in.landed {
		return false
	}
	if now.Before(in.hiddenUntil) {
		return true
	}
	in.landed = true
	if in.Label != "" {
		live := 0
		for _, other := range s.instances {
			if !other.Destroyed && other.Label == in.Label && !s.hiddenAt(other, now) {
				live++
			}
		}
		s.maxLive[in.Label] = max(s.maxLive[in.Label], live)
	}
	return false
}

// parseEnv accepts the object form {"KEY": "value", "-p 8000:8000": "1"}
// that clients send, and the docker-flags string the OpenAPI file documents.
func parseEnv(raw json.RawMessage) [][2]string {
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][2]string, 0, len(keys))
		for _, k := range keys {
			out = append(out, [2]string{k, fmt.Sprint(m[k])})
		}
		return out
	}
	var str string
	if json.Unmarshal(raw, &str) != nil {
		return nil
	}
	var out [][2]string
	f := strings.Fields(str)
	for i := 0; i < len(f); i++ {
		if f[i] == "-e" && i+1 < len(f) {
			kv := strings.SplitN(f[i+1], "=", 2)
			if len(kv) == 2 {
				out = append(out, [2]string{kv[0], kv[1]})
			}
			i++
		} else if strings.HasPrefix(f[i], "-") && i+1 < len(f) {
			out = append(out, [2]string{f[i] + " " + f[i+1], "1"})
			i++
		}
	}
	return out
}

// advance runs an instance's due transitions and carries out what they
// need outside the state (killing a paused container's processes). Called
// with s.mu held.
func (s *Server) advance(in *instance) { s.advanceAt(in, s.clock.Now()) }

// advanceAt is advance to now: a listing reads the clock once and
// advances every instance it looks at to that one instant, as a snapshot.
func (s *Server) advanceAt(in *instance, now time.Time) {
	in.advance(now)
	if in.killPending {
		in.killPending = false
		s.killSessions(in)
	}
}

// visible advances an instance and reports whether reads may see it,
// consuming one read of any read-after-create lag. Called with s.mu held.
func (s *Server) visible(in *instance) bool {
	if in == nil {
		return false
	}
	return s.visibleAt(in, s.clock.Now())
}

// visibleAt is visible with the clock read as now (see advanceAt).
func (s *Server) visibleAt(in *instance, now time.Time) bool {
	if in == nil || in.Destroyed || s.hiddenAt(in, now) {
		return false
	}
	s.advanceAt(in, now)
	if in.readLag > 0 {
		in.readLag--
		return false
	}
	return true
}

func (s *Server) handleShow(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	s.mu.Lock()
	in := s.instances[id]
	if !s.visible(in) {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"instances": nil})
		return
	}
	row := s.instanceRow(in)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"instances": row})
}

// instanceRow renders an instance as the wire object. Called with s.mu held.
func (s *Server) instanceRow(in *instance) map[string]any {
	o := in.Offer
	var actual any = in.Actual
	if in.Actual == "" {
		actual = nil
	}
	var statusMsg any = in.StatusMsg
	if in.StatusMsg == "" {
		statusMsg = nil
	}
	var label any = in.Label
	if in.Label == "" {
		label = nil
	}
	in.sshMu.Lock()
	port := in.sshPort
	in.sshMu.Unlock()
	ports := map[string]any{}
	var uptime any
	gpuNow := 0.0
	if in.Actual == "running" {
		if port > 0 {
			ports["22/tcp"] = []map[string]string{{"HostIp": "0.0.0.0", "HostPort": strconv.Itoa(port)}}
		}
		uptime = round(in.RunSeconds/60, 2)
		gpuNow = in.gpuDPH()
	}
	env := make([][]string, 0, len(in.Env))
	for _, kv := range in.Env {
		env = append(env, []string{kv[0], kv[1]})
	}
	var tmplID, tmplHash, tmplName any
	if t := in.Template; t != nil {
		tmplID, tmplHash, tmplName = t.ID, t.HashID, t.Name
	}
	st := round(in.storageDPH(), 7)
	// The contract's own price and end: a host's raised ask is not what
	// a contract that did not accept it pays (priceincrease.go).
	dphBase := o.DPHBase
	if !in.IsBid {
		dphBase = in.gpuDPH()
	}
	endDate := o.EndDate
	if end := in.contractEnd(); !end.IsZero() {
		endDate = unix(s.reportedFuture(end))
	}
	searchPrice := map[string]any{"gpuCostPerHour": in.gpuDPH(), "diskHour": st, "totalHour": round(in.gpuDPH()+st, 7), "discountTotalHour": 0, "discountedTotalPerHour": round(in.gpuDPH()+st, 7)}
	nowPrice := map[string]any{"gpuCostPerHour": gpuNow, "diskHour": st, "totalHour": round(gpuNow+st, 7), "discountTotalHour": 0, "discountedTotalPerHour": round(gpuNow+st, 7)}
	// Vast assigns the proxy endpoint with the contract, so ssh_host and
	// ssh_port are set in every state (integers, never null, as the document
	// says); without SSH servers the port is a reserved one nobody serves.
	sshPort := port
	if sshPort == 0 {
		sshPort = 20000 + int(in.ID%20000)
	}
	return map[string]any{
		"id": in.ID, "machine_id": o.MachineID, "host_id": o.HostID, "bundle_id": o.ID * 31,
		"actual_status": actual, "intended_status": in.Intended, "cur_state": in.Cur, "next_state": in.Next,
		"status_msg": statusMsg, "label": label, "template_id": tmplID, "template_hash_id": tmplHash, "template_name": tmplName,
		"image_uuid": in.ImageUUID, "image_args": nonNil(in.Args), "image_runtype": in.Runtype, "extra_env": env,
		"onstart": in.Onstart, "jupyter_token": fmt.Sprintf("%032x", in.ID*7919),
		"ssh_host": "127.0.0.1", "ssh_idx": "1", "ssh_port": sshPort, "machine_dir_ssh_port": sshPort + 1,
		"public_ipaddr": "127.0.0.1", "local_ipaddrs": "10.4.0.12 172.17.0.1 \n", "ports": ports,
		"direct_port_start": 41200, "direct_port_end": 41299, "direct_port_count": o.DirectPorts,
		"start_date": unix(s.reported(in.Created)), "end_date": endDate, "uptime_mins": uptime,
		"duration": round(s.reported(s.clock.Now()).Sub(s.reported(in.Created)).Seconds(), 1),
		"num_gpus": o.NumGPUs, "gpu_name": o.Model.name, "gpu_arch": o.Model.gpuArch,
		"gpu_ram": o.Model.vramMB, "gpu_totalram": o.Model.vramMB * float64(o.NumGPUs),
		"gpu_util": nil, "gpu_temp": nil, "gpu_frac": o.GPUFrac, "compute_cap": o.Model.compCap,
		"cpu_name": o.CPUName, "cpu_cores": o.CPUCores, "cpu_cores_effective": o.CPUEffective, "cpu_ram": o.CPURAM, "cpu_util": 0.0,
		"disk_space": in.Disk, "disk_util": -1, "disk_usage": -1,
		"cuda_max_good": o.CUDA, "driver_version": o.Driver, "os_version": "22.04",
		"dph_base": dphBase, "dph_total": round(in.gpuDPH()+st, 7), "storage_cost": o.StorageCost, "storage_total_cost": st,
		"inet_up_cost": o.InetCost, "inet_down_cost": o.InetCost, "is_bid": in.IsBid, "min_bid": s.clearingNow(o),
		"reliability2": o.Reliability, "verification": o.Verification, "geolocation": o.Geolocation,
		"hosting_type": o.HostingType, "search": searchPrice, "instance": nowPrice, "volume_info": []any{},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// v1 listing: filterable stored columns, as the real API allows.
var listFilterable = map[string]bool{
	"id": true, "label": true, "actual_status": true, "intended_status": true, "gpu_name": true,
	"verification": true, "machine_id": true, "host_id": true, "image_uuid": true, "cur_state": true,
}

func (s *Server) handleListV1(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	qp := r.URL.Query()
	limit := 25
	if v := qp.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 25 {
			// The document's enum for this route's 400 names invalid_request.
			writeError(w, http.StatusBadRequest, "invalid_request", "Error in query parameters: limit must be an integer from 1 to 25")
			return
		}
		limit = n
	}
	cols, ok := selectCols(w, qp.Get("select_cols"))
	if !ok {
		return
	}
	var filters map[string]map[string]any
	if v := qp.Get("select_filters"); v != "" {
		if err := json.Unmarshal([]byte(v), &filters); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "Error in query parameters: select_filters is not valid JSON")
			return
		}
		for col := range filters {
			if !listFilterable[col] {
				writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Error in query parameters: %s is not a valid search key", col))
				return
			}
		}
	}
	desc := false
	if v := qp.Get("order_by"); v != "" {
		var ob []map[string]string
		if err := json.Unmarshal([]byte(v), &ob); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request", "Error in query parameters: order_by is not valid JSON")
			return
		}
		if len(ob) > 0 && ob[0]["col"] == "id" && strings.EqualFold(ob[0]["dir"], "desc") {
			desc = true
		}
	}
	after := int64(-1)
	if tok := qp.Get("after_token"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		n, err2 := strconv.ParseInt(strings.TrimPrefix(string(b), "id:"), 10, 64)
		if err != nil || err2 != nil {
			writeError(w, http.StatusBadRequest, "invalid_token", "Invalid after_token")
			return
		}
		after = n
	}

	// One cheap pass counts and filters on the few filterable columns; only
	// the page's rows are rendered, so a page costs O(page) renders however
	// many instances the account holds. s.order is ascending by id (ids
	// only grow), so no sort is needed.
	s.mu.Lock()
	now := s.clock.Now()
	labelCounts := map[string]int{}
	var picked []*instance // the page, plus one to know whether more follow
	total := 0
	for k := range s.order {
		if desc {
			k = len(s.order) - 1 - k
		}
		in := s.instances[s.order[k]]
		if !s.visibleAt(in, now) {
			continue
		}
		labelCounts[in.Label]++
		if len(filters) > 0 && !rowMatches(s.filterRow(in, filters), filters) {
			continue
		}
		total++
		if after >= 0 && ((!desc && in.ID <= after) || (desc && in.ID >= after)) {
			continue
		}
		if len(picked) <= limit {
			picked = append(picked, in)
		}
	}
	more := len(picked) > limit
	picked = picked[:min(limit, len(picked))]
	page := make([]any, 0, len(picked))
	brief := slices.Sorted(slices.Values(cols)) // a row's keys in the order json.Marshal writes a map's
	for _, in := range picked {
		if row := briefRow(in, brief); row != nil {
			page = append(page, row)
			continue
		}
		row := s.instanceRow(in)
		if cols != nil {
			kept := make(map[string]any, len(cols))
			for _, c := range cols {
				kept[c] = row[c]
			}
			row = kept
		}
		page = append(page, row)
	}
	s.mu.Unlock()
	var next any
	if more {
		next = base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("id:%d", picked[len(picked)-1].ID)))
	}
	writeJSON(w, http.StatusOK, listPage{
		Success: true, InstancesFound: len(page), TotalInstances: total,
		LabelCounts: labelCounts, NextToken: next, Instances: page,
	})
}

// listPage is a v1 listing page. Its fields are in the order json.Marshal
// writes a map's keys (sorted), so a page reads byte for byte as the map
// it replaced; a struct is encoded without sorting keys on every page.
type listPage struct {
	Instances      []any          `json:"instances"`
	InstancesFound int            `json:"instances_found"`
	LabelCounts    map[string]int `json:"label_counts"`
	NextToken      any            `json:"next_token"`
	Success        bool           `json:"success"`
	TotalInstances int            `json:"total_instances"`
}

// briefColumns render the columns a brief listing asks for (select_cols)
// without the whole row: the values instanceRow gives them (held to it by
// TestBriefColumnsMatchInstanceRow).
var briefColumns = map[string]func(in *instance) any{
	"id":              func(in *instance) any { return in.ID },
	"label":           func(in *instance) any { return orNil(in.Label) },
	"actual_status":   func(in *instance) any { return orNil(in.Actual) },
	"intended_status": func(in *instance) any { return in.Intended },
	"cur_state":       func(in *instance) any { return in.Cur },
	"next_state":      func(in *instance) any { return in.Next },
}

// briefRow renders only cols (sorted, no repeats) when every one of them
// is a brief column, as the JSON object json.Marshal would write for the
// map of those columns (TestBriefRowIsTheMapsJSON); nil otherwise (the
// whole row is rendered, then cut to cols).
func briefRow(in *instance, cols []string) json.RawMessage {
	if len(cols) == 0 {
		return nil
	}
	b := make([]byte, 0, 192)
	for i, c := range cols {
		f, ok := briefColumns[c]
		if !ok || (i > 0 && cols[i-1] == c) {
			return nil
		}
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), c...), `":`...) // column names are plain ASCII
		switch v := f(in).(type) {
		case nil:
			b = append(b, "null"...)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		default:
			if s, ok := v.(string); ok && plainJSON(s) {
				b = append(append(append(b, '"'), s...), '"')
				continue
			}
			j, err := json.Marshal(v)
			if err != nil {
				return nil
			}
			b = append(b, j...)
		}
	}
	return append(b, '}')
}

// plainJSON: s is printable ASCII that json.Marshal writes as is, between
// quotes (no quote, backslash or HTML character to escape).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// orNil is a string column that is null when empty.
func orNil(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// instanceColumns are the columns of an instance row.
var instanceColumns = sync.OnceValue(func() map[string]any {
	return (&Server{clock: clock.Real{}}).instanceRow(&instance{Offer: &offer{}})
})

// selectCols reads select_cols (a JSON array of column names; ["*"] or
// absent is every column) and answers 400 for a column the list lacks.
func selectCols(w http.ResponseWriter, raw string) ([]string, bool) {
	if raw == "" {
		return nil, true
	}
	var cols []string
	if err := json.Unmarshal([]byte(raw), &cols); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "Error in query parameters: select_cols must be a JSON array of column names")
		return nil, false
	}
	if len(cols) == 0 || slices.Contains(cols, "*") {
		return nil, true
	}
	for _, c := range cols {
		if _, ok := instanceColumns()[c]; !ok {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Error in query parameters: %s is not a column", c))
			return nil, false
		}
	}
	return cols, true
}

// filterRow is the columns filters name, valued exactly as instanceRow
// values them (only filterable columns reach here). Called with s.mu held.
func (s *Server) filterRow(in *instance, filters map[string]map[string]any) map[string]any {
	row := make(map[string]any, len(filters))
	for col := range filters {
		var v any
		switch col {
		case "id":
			v = in.ID
		case "label":
			if in.Label != "" {
				v = in.Label
			}
		case "actual_status":
			if in.Actual != "" {
				v = in.Actual
			}
		case "intended_status":
			v = in.Intended
		case "cur_state":
			v = in.Cur
		case "gpu_name":
			v = in.Offer.Model.name
		case "verification":
			v = in.Offer.Verification
		case "machine_id":
			v = in.Offer.MachineID
		case "host_id":
			v = in.Offer.HostID
		case "image_uuid":
			v = in.ImageUUID
		}
		row[col] = v
	}
	return row
}

func rowMatches(row map[string]any, filters map[string]map[string]any) bool {
	for col, ops := range filters {
		for op, want := range ops {
			ok, err := evalOp(col, row[col], op, want)
			if err != nil || !ok {
				return false
			}
		}
	}
	return true
}

func (s *Server) handleListV0(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	s.mu.Lock()
	status := s.faults.v0ListStatus
	if status != http.StatusOK {
		s.mu.Unlock()
		writeError(w, http.StatusGone, "deprecated_endpoint", "/api/v0/instances/ is deprecated. Use /api/v1/instances/ instead.")
		return
	}
	rows := []map[string]any{}
	for _, id := range s.order {
		if in := s.instances[id]; s.visible(in) {
			rows = append(rows, s.instanceRow(in))
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"instances_found": len(rows), "instances": rows})
}

// containerKeyAllowed: a CONTAINER_API_KEY may only start, stop or destroy
// its own instance.
func containerKeyAllowed(k *apiKey, id int64) bool { return k.Instance > 0 && k.Instance == id }

func (s *Server) handleManage(w http.ResponseWriter, r *http.Request, id int64) {
	k, ok := s.authenticate(w, r, false)
	if !ok {
		return
	}
	var b struct {
		State *string `json:"state"`
		Label *string `json:"label"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body")
		return
	}
	if k.Instance > 0 {
		if !containerKeyAllowed(k, id) || b.Label != nil || b.State == nil {
			writeError(w, http.StatusUnauthorized, "not_authorized", "This key can only start, stop or destroy its own instance.")
			return
		}
	} else if !k.permits("instance_write") {
		writeError(w, http.StatusUnauthorized, "not_authorized", "This API key lacks the instance_write permission.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	if in == nil || in.Destroyed {
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	now := s.clock.Now()
	if b.Label != nil {
		if len(*b.Label) > 1024 {
			writeError(w, http.StatusBadRequest, "invalid_args", "label longer than 1024 characters")
			return
		}
		in.advance(now)
		in.Label = *b.Label
	}
	if b.State != nil {
		if *b.State != "stopped" && *b.State != "running" {
			writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("invalid state %q: use running or stopped", *b.State))
			return
		}
		s.applyStateLocked(in, *b.State)
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

func (s *Server) handleDestroy(w http.ResponseWriter, r *http.Request, id int64) {
	k, ok := s.authenticate(w, r, false)
	if !ok {
		return
	}
	if k.Instance > 0 && !containerKeyAllowed(k, id) {
		writeError(w, http.StatusUnauthorized, "not_authorized", "This key can only start, stop or destroy its own instance.")
		return
	}
	if k.Instance == 0 && !k.permits("instance_write") {
		writeError(w, http.StatusUnauthorized, "not_authorized", "This API key lacks the instance_write permission.")
		return
	}
	s.mu.Lock()
	in := s.instances[id]
	if in == nil || in.Destroyed || s.hidden(in) {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	if n := s.faults.destroyNoop; n != 0 {
		if n > 0 {
			s.faults.destroyNoop--
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
		return
	}
	s.destroyLocked(in)
	in.destroyedBy = "account_key"
	if k.Instance > 0 {
		in.destroyedBy = "container_api_key"
	}
	s.mu.Unlock()
	in.stopSSH()
	writeJSON(w, http.StatusOK, map[string]any{"success": true})
}

// destroyLocked ends the contract: billing stops, the offer is free again.
func (s *Server) destroyLocked(in *instance) {
	now := s.clock.Now()
	in.advance(now)
	in.Destroyed = true
	in.logf(now, "contract destroyed")
	in.Offer.RentedBy = 0
	s.killSessions(in)
	if in.box != nil && in.box.destroy() {
		s.removeBox(in.box)
	}
	for _, k := range s.keys {
		if k.Instance == in.ID {
			k.Deleted = true
		}
	}
}

// handleAttachSSH is POST /api/v0/instances/{id}/ssh/ {"ssh_key",
// "instance_id"?}. Attaching is not idempotent on the wire: a key already
// on the instance is answered 200 success:false (vast-api.md §12.1).
func (s *Server) handleAttachSSH(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_write"); !ok {
		return
	}
	var b struct {
		SSHKey     string `json:"ssh_key"`
		InstanceID *int64 `json:"instance_id"`
	}
	if err := readBody(r, &b); err != nil || strings.TrimSpace(b.SSHKey) == "" {
		writeError(w, http.StatusBadRequest, "no_ssh_key", "No ssh key provided")
		return
	}
	pub, err := parseAuthorizedKey(b.SSHKey)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "Invalid ssh key: "+err.Error())
		return
	}
	if b.InstanceID != nil { // the body's id takes precedence over the path's
		id = *b.InstanceID
	}
	key := strings.TrimSpace(b.SSHKey)
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[id]
	if in == nil || in.Destroyed {
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	for _, t := range in.AttachedKeys {
		if k, err := parseAuthorizedKey(t); err == nil && ssh.KeysEqual(k, pub) {
			writeJSON(w, http.StatusOK, map[string]any{"success": false, "msg": "SSH key already associated with instance."})
			return
		}
	}
	in.AttachedKeys = append(in.AttachedKeys, key)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "msg": "SSH key added to instance.",
		"key": map[string]any{"id": len(in.AttachedKeys), "public_key": key}})
}

func (s *Server) handleInstanceSSHKeys(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	s.mu.Lock()
	in := s.instances[id]
	if in == nil || in.Destroyed {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
		return
	}
	var keys []map[string]any
	for i, k := range in.AttachedKeys {
		keys = append(keys, map[string]any{"id": i + 1, "name": fmt.Sprintf("key-%d", i+1), "public_key": k})
	}
	s.mu.Unlock()
	enc, _ := json.Marshal(keys)
	// The real API returns this list as a JSON-encoded string.
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "ssh_keys": string(enc)})
}

type logResult struct {
	text  string
	polls int // non-200 answers left before the text is "uploaded"
}

func (s *Server) handleRequestLogs(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	var b struct {
		Tail       string  `json:"tail"`
		Filter     string  `json:"filter"`
		DaemonLogs *string `json:"daemon_logs"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body")
		return
	}
	if b.DaemonLogs != nil && *b.DaemonLogs != "true" { // the document's enum is ["true"]
		writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("daemon_logs %q: the only value is \"true\"", *b.DaemonLogs))
		return
	}
	s.mu.Lock()
	in := s.instances[id]
	if in == nil || in.Destroyed {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "invalid_id", "Invalid instance id.")
		return
	}
	in.advance(s.clock.Now())
	lines := make([]string, 0, len(in.logLines))
	for _, l := range in.logLines {
		lines = append(lines, s.reported(l.at).UTC().Format(time.RFC3339)+" "+l.text)
	}
	if b.Filter != "" {
		kept := lines[:0]
		for _, l := range lines {
			if strings.Contains(l, b.Filter) {
				kept = append(kept, l)
			}
		}
		lines = kept
	}
	if n, err := strconv.Atoi(b.Tail); err == nil && n >= 0 && n < len(lines) {
		lines = lines[len(lines)-n:]
	}
	token := randomHex(16)
	s.results[token] = &logResult{text: strings.Join(lines, "\n") + "\n", polls: 1}
	s.mu.Unlock()
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "result_url": fmt.Sprintf("%s://%s/_sim/results/%s.log", scheme, r.Host, token), "msg": "Logs request submitted."})
}

// readSSHKey reads and checks the {"ssh_key": "..."} body both key
// endpoints take, answering the API's errors itself.
func readSSHKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	var b struct {
		SSHKey string `json:"ssh_key"`
	}
	if err := readBody(r, &b); err != nil || strings.TrimSpace(b.SSHKey) == "" {
		writeError(w, http.StatusBadRequest, "no_ssh_key", "No ssh key provided")
		return "", false
	}
	if _, err := parseAuthorizedKey(b.SSHKey); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_args", "Invalid ssh key: "+err.Error())
		return "", false
	}
	return strings.TrimSpace(b.SSHKey), true
}
