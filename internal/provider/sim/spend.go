package sim

import (
	"net/http"
	"strconv"
)

// The account routes of vast-api.md §12.2 that official clients call and
// the simulator had no answer for: host earnings and the burn rate (the
// renter's pending price increases are in priceincrease.go). The simulated
// account hosts nothing, so its earnings are zero.

// handleMachineEarnings is GET /api/v0/users/{user_id}/machine-earnings
// (both official clients' `show earnings` send "me"): a renter-only
// account has earned nothing on no machines.
func (s *Server) handleMachineEarnings(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "billing_read"); !ok {
		return
	}
	for _, p := range []string{"sday", "eday", "machid", "last_days"} {
		if v := r.URL.Query().Get(p); v != "" {
			if _, err := strconv.Atoi(v); err != nil {
				writeError(w, http.StatusBadRequest, "invalid_args", p+" must be an integer")
				return
			}
		}
	}
	s.mu.Lock()
	credit := round(s.startCredit-s.spentLocked(), 6)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"summary":  map[string]any{"total_gpu": 0.0, "total_stor": 0.0, "total_bwu": 0.0, "total_bwd": 0.0},
		"username": "sim-user", "email": "sim@vastrun.invalid", "fullname": "Simulated User",
		"current":     map[string]any{"balance": 0.0, "service_fee": 0.0, "total": 0.0, "credit": credit},
		"per_machine": []any{}, "per_day": []any{},
	})
}

// handleSpendRate is GET /api/v0/users/spend-rate: the $/h the caller's
// instances bill now, GPU (running ones) and container storage (every
// instance that exists) apart; the simulator has no volumes.
func (s *Server) handleSpendRate(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "user_read"); !ok {
		return
	}
	s.mu.Lock()
	gpu, disk, active := 0.0, 0.0, false
	for _, id := range s.order {
		in := s.instances[id]
		if in == nil || in.Destroyed || !s.visible(in) {
			continue
		}
		s.advance(in)
		g, d := in.rates()
		gpu, disk, active = gpu+g, disk+d, true
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "gpu_cost_per_hour": round(gpu, 7),
		"container_storage_cost_per_hour": round(disk, 7), "volume_storage_cost_per_hour": 0.0, "has_active_resources": active})
}
