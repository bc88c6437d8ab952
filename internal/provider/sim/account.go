package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// spentLocked is every dollar accrued so far. Called with s.mu held.
func (s *Server) spentLocked() float64 {
	now := s.clock.Now()
	total := 0.0
	for _, in := range s.instances {
		in.advance(now)
		total += in.GPUCost + in.DiskCost
	}
	return total
}

func (s *Server) handleCurrentUser(w http.ResponseWriter, r *http.Request, _ int64) {
	k, ok := s.authorize(w, r, "user_read")
	if !ok {
		return
	}
	// Since 2026-04-29 the route validates its input and refuses any query
	// parameter but the legacy key (vast-cli #382: "owner: Extra inputs are
	// not permitted").
	if !onlyParams(w, r, "api_key") {
		return
	}
	s.mu.Lock()
	credit := round(s.startCredit-s.spentLocked(), 6)
	var sshKey string
	if len(s.acctSSHKeys) > 0 {
		sshKey = s.acctSSHKeys[len(s.acctSSHKeys)-1].PublicKey
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"id": 412233, "key_id": k.ID, "username": "sim-user", "fullname": "Simulated User",
		"email": "sim@vastrun.invalid", "email_verified": true, "balance": 0.0, "credit": credit,
		"can_pay": true, "has_billing": true, "billing_creditonly": false, "balance_threshold": 25.0,
		"balance_threshold_enabled": true, "got_signup_credit": false, "has_payout": false,
		"last4": "4242", "ssh_key": sshKey, "sid": "sim",
	})
}

// onlyParams answers 400 invalid_args, as Vast's input validation does,
// when the query carries a parameter outside allowed.
func onlyParams(w http.ResponseWriter, r *http.Request, allowed ...string) bool {
	var extra []string
	for name := range r.URL.Query() {
		if !slices.Contains(allowed, name) {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return true
	}
	sort.Strings(extra)
	writeError(w, http.StatusBadRequest, "invalid_args", strings.Join(extra, ", ")+": Extra inputs are not permitted")
	return false
}

// dayRange reads the required {"day": {"gte", "lte"}} (or "when") filter.
func dayRange(r *http.Request, col string) (float64, float64, bool) {
	var f map[string]map[string]any
	if err := json.Unmarshal([]byte(r.URL.Query().Get("select_filters")), &f); err != nil {
		return 0, 0, false
	}
	gte, ok1 := toFloat(f[col]["gte"])
	lte, ok2 := toFloat(f[col]["lte"])
	return gte, lte, ok1 && ok2
}

func (s *Server) handleCharges(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "billing_read"); !ok {
		return
	}
	from, to, ok := dayRange(r, "day")
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request", "Must provide both 'day' gte and lte filters in select_filters.")
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "invalid_args", "limit must be an integer of at least 1")
			return
		}
		limit = min(n, 500)
	}
	if f := r.URL.Query().Get("format"); f != "" && f != "table" && f != "tree" {
		writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("format %q: must be table or tree", f))
		return
	}
	s.mu.Lock()
	now := s.clock.Now()
	var results []map[string]any
	ids := append([]int64(nil), s.order...)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		in := s.instances[id]
		in.advance(now)
		// Charge windows are integer epochs (the document's type; the
		// end rounds up so a window never ends before the billing it covers).
		start := s.reported(in.Created).Unix()
		billedTo := s.reported(in.billedTo)
		end := billedTo.Unix()
		if billedTo.After(time.Unix(end, 0)) {
			end++
		}
		if float64(end) < from || float64(start) > to {
			continue
		}
		hours := in.RunSeconds / 3600
		var items []map[string]any
		items = append(items, map[string]any{
			"start": start, "end": end, "type": "gpu", "source": fmt.Sprintf("instance-%d", in.ID),
			"description": fmt.Sprintf("%.3f hours at $%.3f/hour", hours, in.gpuDPH()), "amount": round(in.GPUCost, 6),
			"metadata": map[string]any{}, "items": []any{},
		})
		items = append(items, map[string]any{
			"start": start, "end": end, "type": "disk", "source": fmt.Sprintf("instance-%d", in.ID),
			"description": fmt.Sprintf("%.1f GB storage at $%.4f/GB/month", in.Disk, in.Offer.StorageCost), "amount": round(in.DiskCost, 6),
			"metadata": map[string]any{}, "items": []any{},
		})
		results = append(results, map[string]any{
			"start": start, "end": end, "type": "instance", "source": fmt.Sprintf("instance-%d", in.ID),
			"description": fmt.Sprintf("Instance %d (%s x%d)", in.ID, in.Offer.Model.name, in.Offer.NumGPUs),
			"amount":      round(in.GPUCost+in.DiskCost, 6), "metadata": map[string]any{"label": in.Label}, "items": items,
		})
	}
	s.mu.Unlock()
	offset := 0
	if tok := r.URL.Query().Get("after_token"); tok != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(tok, "o"))
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "invalid_token", "Invalid after_token")
			return
		}
		offset = n
	}
	total := len(results)
	offset = min(offset, total)
	end := min(offset+limit, total)
	var next any
	if end < total {
		next = fmt.Sprintf("o%d", end)
	}
	page := results[offset:end]
	if page == nil {
		page = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "count": len(page), "total": total, "next_token": next, "results": page})
}

func (s *Server) handleInvoices(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "billing_read"); !ok {
		return
	}
	from, to, ok := dayRange(r, "when")
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request", "Must provide both 'when' gte and lte filters in select_filters.")
		return
	}
	s.mu.Lock()
	var first time.Time
	for _, in := range s.instances {
		if first.IsZero() || in.Created.Before(first) {
			first = in.Created
		}
	}
	s.mu.Unlock()
	results := []map[string]any{}
	if t := s.reported(first).Unix(); !first.IsZero() && float64(t) >= from && float64(t) <= to {
		results = append(results, map[string]any{"start": t, "end": t, "type": "credit", "source": "stripe",
			"description": "Account credit", "amount": -s.startCredit,
			"metadata": map[string]any{"invoice_id": 1, "service": "stripe_payments"}, "items": []any{}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "count": len(results), "total": len(results), "next_token": nil, "results": results})
}

func (s *Server) handleListAPIKeys(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_read"); !ok {
		return
	}
	s.mu.Lock()
	var list []map[string]any
	for _, k := range s.keys {
		if k.Instance > 0 || k.Deleted {
			continue
		}
		// The document types rights as a string: a restricted key's
		// permissions come JSON-encoded; a full-access key has none, and a
		// personal key no team fields.
		row := map[string]any{"id": k.ID, "user_id": 412233, "name": k.Name}
		if k.Perms != nil {
			b, _ := json.Marshal(map[string]any{"api": k.Perms})
			row["rights"] = string(b)
		}
		list = append(list, row)
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i]["id"].(int64) < list[j]["id"].(int64) })
	writeJSON(w, http.StatusOK, map[string]any{"apikeys": list})
}

func (s *Server) handleCreateAPIKey(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_write"); !ok {
		return
	}
	var b struct {
		Name        string         `json:"name"`
		Permissions map[string]any `json:"permissions"`
	}
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "Invalid json body")
		return
	}
	if strings.TrimSpace(b.Name) == "" {
		writeError(w, http.StatusBadRequest, "invalid_args", "name is required")
		return
	}
	api, ok := b.Permissions["api"].(map[string]any)
	if !ok {
		writeError(w, http.StatusBadRequest, "missing_permissions", "permissions must be {\"api\": {<category>: {...}}}")
		return
	}
	s.mu.Lock()
	k := &apiKey{Name: b.Name, Key: randomHex(32), Perms: api}
	s.addKey(k)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"id": k.ID, "key": k.Key, "permissions": b.Permissions})
}

func (s *Server) handleDeleteAPIKey(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "user_write"); !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k.ID == id && k.Instance == 0 && !k.Deleted {
			k.Deleted = true
			writeJSON(w, http.StatusOK, "Successfully Deleted API Key")
			return
		}
	}
	writeError(w, http.StatusNotFound, "not_found", "API Key not found.")
}

func (s *Server) handleListSSHKeys(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_read"); !ok {
		return
	}
	s.mu.Lock()
	list := []map[string]any{}
	for _, k := range s.acctSSHKeys {
		list = append(list, map[string]any{"id": k.ID, "user_id": 412233, "public_key": k.PublicKey,
			"created_at": s.reported(k.Created).UTC().Format(time.RFC3339), "deleted_at": nil})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleAddSSHKey(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_write"); !ok {
		return
	}
	key, ok := readSSHKey(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	s.nextSSHKey++
	k := &acctSSHKey{ID: s.nextSSHKey, PublicKey: key, Created: s.clock.Now()}
	s.acctSSHKeys = append(s.acctSSHKeys, k)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "key": map[string]any{
		"id": k.ID, "user_id": 412233, "public_key": k.PublicKey, "created_at": s.reported(k.Created).UTC().Format(time.RFC3339), "deleted_at": nil}})
}

func (s *Server) handleDeleteSSHKey(w http.ResponseWriter, r *http.Request, id int64) {
	if _, ok := s.authorize(w, r, "user_write"); !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range s.acctSSHKeys {
		if k.ID == id {
			s.acctSSHKeys = append(s.acctSSHKeys[:i], s.acctSSHKeys[i+1:]...)
			writeJSON(w, http.StatusOK, map[string]any{"success": true})
			return
		}
	}
	writeError(w, http.StatusBadRequest, "no_ssh_key", "No such ssh key")
}

// handleLegacyInvoices is GET /api/v0/users/me/invoices?owner=me&sdate=&edate=
// &inc_charges=true, the 2024 CLI's `show invoices`: the credit top-up as a
// payment and, with inc_charges, each contract's charge, in [sdate, edate].
func (s *Server) handleLegacyInvoices(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "billing_read"); !ok {
		return
	}
	if !onlyParams(w, r, "owner", "sdate", "edate", "inc_charges", "api_key") {
		return
	}
	q := r.URL.Query()
	from, to := 0.0, math.Inf(1)
	for name, dst := range map[string]*float64{"sdate": &from, "edate": &to} {
		if v := q.Get(name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				writeError(w, http.StatusBadRequest, "invalid_args", name+" must be a unix time")
				return
			}
			*dst = f
		}
	}
	s.mu.Lock()
	now := s.clock.Now()
	invoices := []map[string]any{}
	var first time.Time
	spent := 0.0
	for _, id := range s.order {
		in := s.instances[id]
		in.advance(now)
		spent += in.GPUCost + in.DiskCost
		if first.IsZero() || in.Created.Before(first) {
			first = in.Created
		}
		if q.Get("inc_charges") != "true" {
			continue
		}
		if ts := s.reported(in.billedTo).Unix(); float64(ts) >= from && float64(ts) <= to {
			invoices = append(invoices, map[string]any{"type": "charge", "instance_id": in.ID, "timestamp": ts,
				"description": fmt.Sprintf("Instance %d (%s x%d)", in.ID, in.Offer.Model.name, in.Offer.NumGPUs),
				"quantity":    round(in.RunSeconds/3600, 6), "rate": in.gpuDPH(), "amount": round(in.GPUCost+in.DiskCost, 6)})
		}
	}
	s.mu.Unlock()
	if ts := s.reported(first).Unix(); !first.IsZero() && float64(ts) >= from && float64(ts) <= to {
		invoices = append([]map[string]any{{"type": "payment", "timestamp": ts, "description": "Account credit",
			"quantity": 1, "rate": s.startCredit, "amount": s.startCredit}}, invoices...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"invoices": invoices,
		"current": map[string]any{"charges": round(spent, 6), "credit": round(s.startCredit-spent, 6)}})
}

// handleInvoiceSearch is GET /api/v0/invoices?select_cols=["*"]&select_filters=
// {...}: invoice rows (the one credit top-up), filterable on when.
func (s *Server) handleInvoiceSearch(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "billing_read"); !ok {
		return
	}
	var filters map[string]map[string]any
	if v := r.URL.Query().Get("select_filters"); v != "" {
		if err := json.Unmarshal([]byte(v), &filters); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_args", "select_filters is not valid JSON")
			return
		}
	}
	s.mu.Lock()
	var first time.Time
	for _, in := range s.instances {
		if first.IsZero() || in.Created.Before(first) {
			first = in.Created
		}
	}
	s.mu.Unlock()
	rows := []map[string]any{}
	if !first.IsZero() {
		when := s.reported(first).Unix()
		row := map[string]any{"id": 1, "user_id": 412233, "when": when, "paid_on": when,
			"amount_cents": int64(math.Round(s.startCredit * 100)), "is_credit": true, "service": "stripe_payments"}
		if rowMatches(row, filters) {
			rows = append(rows, row)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"invoices": rows})
}
