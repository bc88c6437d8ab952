package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Host price increases and contract ends (vast-api.md §12.2, §12.4).
//
// A host that raises its price above a running contract's writes a pending
// increase for the renter, and the contract is no longer extended at the
// old price: unless the renter accepts, it ends at the increase's
// contract_end_date. Accepting bills the new price from then on and the
// contract goes on; rejecting, or not answering, keeps the old price until
// the contract ends. A contract also ends at its host's end date (the
// offer's end_date). An ended contract expires: its container stops, it
// bills storage until destroyed, and it cannot be started again.

// priceIncrease is one host's increase on one contract. Guarded by
// Server.mu (it lives in the market).
type priceIncrease struct {
	ID       int64
	in       *instance
	newGPU   float64   // $/h per machine
	term     float64   // seconds from asking to the contract's end
	askAt    time.Time // when the host asks (it is listed from then on)
	file     string    // asked only once the workspace holds it, delay later
	delay    time.Duration
	asked    bool      // askAt has passed and the ask took effect
	oldGPU   float64   // the contract's GPU price when asked
	end      time.Time // the contract's end, once asked
	answer   string    // "", "accepted" or "rejected"
	answered time.Time
}

// defaultIncreaseTerm is how long a contract runs on after an increase it
// does not accept, when a fault does not say: no vendor source names it.
const defaultIncreaseTerm = time.Hour

// newIncrease schedules f's increase on in, asked f.Seconds after at.
// Called with Server.mu held.
func (m *market) newIncrease(in *instance, f Fault, at time.Time) *priceIncrease {
	m.nextIncrease += 1 + int64(len(m.increases)%2)
	term := f.For
	if term <= 0 {
		term = defaultIncreaseTerm.Seconds()
	}
	delay := time.Duration(f.Seconds * float64(time.Second))
	p := &priceIncrease{ID: m.nextIncrease, in: in, newGPU: f.Price, term: term, askAt: at.Add(delay), file: f.File, delay: delay}
	m.increases = append(m.increases, p)
	return p
}

// askIncreases makes the increases on in that are due by now take effect:
// the contract keeps its price (frozen as the host's ask rises) and ends
// at the increase's end unless accepted. Nothing bills differently, so
// they may be applied late. It sets fields directly: it runs inside
// advance.
func (in *instance) askIncreases(now time.Time) {
	if in.mkt == nil {
		return
	}
	for _, p := range in.mkt.increases {
		if p.in != in || p.asked {
			continue
		}
		if p.file != "" {
			if _, err := os.Stat(filepath.Join(in.workspace(), p.file)); err != nil || in.sandbox == "" {
				continue
			}
			p.file, p.askAt = "", now.Add(p.delay)
		}
		if now.Before(p.askAt) {
			continue
		}
		p.asked = true
		p.oldGPU = in.gpuDPH()
		if p.newGPU <= 0 {
			p.newGPU = round(p.oldGPU*1.5, 4)
		}
		if !in.IsBid {
			in.gpuPrice = p.oldGPU // the contract's price, not the new ask
		}
		in.Offer.DPHBase = math.Max(in.Offer.DPHBase, p.newGPU)
		p.end = p.askAt.Add(time.Duration(p.term * float64(time.Second)))
		if in.endAt.IsZero() || p.end.Before(in.endAt) {
			in.endAt = p.end
		}
		in.logf(p.askAt, "host asks $%.4f/h instead of $%.4f/h (pending price increase %d): the contract ends %s unless accepted",
			p.newGPU, p.oldGPU, p.ID, p.end.UTC().Format(time.RFC3339))
	}
}

// contractEnd is when in's contract ends: its host's end date, or sooner
// the end a price increase not accepted set (zero: never).
func (in *instance) contractEnd() time.Time {
	end, host := in.endAt, in.hostEnd()
	if end.IsZero() || (!host.IsZero() && host.Before(end)) {
		end = host
	}
	return end
}

// expire stops in at its contract's end, at: Vast shows no expired
// instance's states, so the renter's intent stays "running" and the
// container is exited (not the outbid signature, whose intent is
// "stopped").
func (in *instance) expire(at time.Time) {
	in.expired = true
	in.nextAt, in.awaitBox, in.outbid = time.Time{}, false, false
	in.Actual, in.Intended, in.Cur, in.Next = "exited", "running", "stopped", "stopped"
	in.StatusMsg = "Instance expired: the contract ended " + at.UTC().Format(time.RFC3339) + "."
	in.killPending = true
	in.logf(at, "contract ended: instance expired")
}

// pendingRow renders p as a row of GET
// /api/v0/instances/pending-price-increases/. Called with s.mu held.
func (s *Server) pendingRow(p *priceIncrease) map[string]any {
	in, o := p.in, p.in.Offer
	disk := in.storageDPH() / 3600
	return map[string]any{
		"pending_price_increase_id": p.ID, "contract_id": in.ID, "host_id": o.HostID,
		"new_gpu_costpersec": round(p.newGPU/3600, 9), "old_gpu_costpersec": round(p.oldGPU/3600, 9),
		"new_disk_ram_costpersec": round(disk, 9), "old_disk_ram_costpersec": round(disk, 9),
		"new_bwu_cost": o.InetCost, "old_bwu_cost": o.InetCost, "new_bwd_cost": o.InetCost, "old_bwd_cost": o.InetCost,
		"new_platform_fee": 0.0, "old_platform_fee": 0.0,
		"contract_end_date": unix(s.reportedFuture(p.end)), "ask_end_date": unix(s.reportedFuture(in.hostEnd())),
		"created_at": unix(s.reported(p.askAt)),
	}
}

// hostEnd is the host's end date alone (zero: none).
func (in *instance) hostEnd() time.Time {
	if in.Offer == nil || in.Offer.EndDate <= 0 {
		return time.Time{}
	}
	sec, frac := math.Modf(in.Offer.EndDate)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// pendingLocked lists the increases awaiting an answer: asked, not
// answered, on a contract that has not ended. Called with s.mu held.
func (s *Server) pendingLocked() []*priceIncrease {
	var out []*priceIncrease
	for _, p := range s.mkt.increases {
		if p.in.Destroyed {
			continue
		}
		s.advance(p.in)
		if p.asked && p.answer == "" && !p.in.expired {
			out = append(out, p)
		}
	}
	return out
}

// handlePendingPriceIncreases is GET
// /api/v0/instances/pending-price-increases/ (vast-api.md §12.2).
func (s *Server) handlePendingPriceIncreases(w http.ResponseWriter, r *http.Request, _ int64) {
	if _, ok := s.authorize(w, r, "instance_read"); !ok {
		return
	}
	s.mu.Lock()
	rows := []map[string]any{}
	for _, p := range s.pendingLocked() {
		rows = append(rows, s.pendingRow(p))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "count": len(rows), "truncated": false, "pending_price_increases": rows})
}

// handleAnswerIncrease is PUT /api/v0/instances/accept-price-increase/ or
// reject-price-increase/: the body is exactly {"pending_price_increase_id":
// int} (extra keys are refused, as the server's extra='forbid' model
// does); an increase that is not pending is 404 no_pending_price_increase.
func (s *Server) handleAnswerIncrease(answer string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ int64) {
		if _, ok := s.authorize(w, r, "instance_write"); !ok {
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var b struct {
			ID *int64 `json:"pending_price_increase_id"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err == nil {
			err = dec.Decode(&b)
		}
		switch {
		case err != nil:
			writeError(w, http.StatusBadRequest, "invalid_args", fmt.Sprintf("invalid request body: %v (want exactly {\"pending_price_increase_id\": int})", err))
			return
		case b.ID == nil:
			writeError(w, http.StatusBadRequest, "invalid_args", "pending_price_increase_id: Field required")
			return
		}
		s.mu.Lock()
		var p *priceIncrease
		for _, q := range s.pendingLocked() {
			if q.ID == *b.ID {
				p = q
			}
		}
		if p == nil {
			s.mu.Unlock()
			writeError(w, http.StatusNotFound, "no_pending_price_increase", fmt.Sprintf("No pending price increase %d.", *b.ID))
			return
		}
		now := s.clock.Now()
		in := p.in
		in.advance(now) // everything before the answer at the old price
		p.answer, p.answered = answer, now
		if answer == "accepted" {
			if !in.IsBid {
				in.gpuPrice = p.newGPU
			}
			// Extended as before: the contract ends at its host's end only,
			// or at another increase not yet accepted.
			in.endAt = time.Time{}
			for _, q := range s.mkt.increases {
				if q.in == in && q.asked && q.answer != "accepted" && (in.endAt.IsZero() || q.end.Before(in.endAt)) {
					in.endAt = q.end
				}
			}
		}
		in.logf(now, "price increase %d %s", p.ID, answer)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "pending_price_increase_id": p.ID, "contract_id": in.ID})
	}
}

// injectIncrease schedules a price increase: on f.Instance f.Seconds from
// now, or on each of the next f.Count instances (default 1) f.Seconds
// after it starts running. Called with s.mu held.
func (s *Server) injectIncrease(f Fault, now time.Time) error {
	if f.Price < 0 || f.Seconds < 0 || f.For < 0 {
		return fmt.Errorf("fault %s: price, seconds and for must not be negative", f.Kind)
	}
	if f.Instance == 0 {
		f.Count = max(f.Count, 1)
		s.faults.priceAfter = f
		return nil
	}
	in := s.instances[f.Instance]
	if in == nil || in.Destroyed {
		return fmt.Errorf("fault %s: no live instance %d", f.Kind, f.Instance)
	}
	if in.IsBid {
		return fmt.Errorf("fault %s: instance %d is interruptible: its price is its own bid", f.Kind, f.Instance)
	}
	s.advance(in)
	s.mkt.newIncrease(in, f, now)
	s.advance(in) // one asked now acts now
	return nil
}

// dropScheduled forgets the increases no host has asked yet (a clear of
// the faults that scheduled them); asked ones are facts and stay.
// Called with Server.mu held.
func (m *market) dropScheduled() {
	kept := m.increases[:0]
	for _, p := range m.increases {
		if p.asked {
			kept = append(kept, p)
		}
	}
	m.increases = kept
}
