package runstate

import (
	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
)

// StepDeadMan: an event each time an instance's dead-man switch is armed
// (DeadManData); the attempt's receipt shows the last one.
const StepDeadMan = "deadman"

// DeadManData is the payload of a dead-man event: the switch as the
// instance answered it.
type DeadManData struct {
	Instance provider.InstanceID `json:"instance_id"`
	TTL      string              `json:"ttl"`
	Bound    string              `json:"bound,omitempty"`
	// BeatEvery is how often the controller beats, on the wall clock.
	BeatEvery string `json:"beat_every"`
	// ClockSpeed is the instance's clock speed (the simulator's; 1 on Vast).
	ClockSpeed float64 `json:"clock_speed"`
}

// applyDeadMan applies a dead-man event; Apply calls it for every record.
func applyDeadMan(s *State, r journal.Record) error {
	if r.Step != StepDeadMan || r.Type != "event" {
		return nil
	}
	var d DeadManData
	if err := decode(r, &d); err != nil {
		return err
	}
	if a := s.AttemptFor(d.Instance); a != nil {
		dm := &receipt.DeadMan{TTL: d.TTL, Bound: d.Bound, ArmedAt: r.Time}
		if d.ClockSpeed > 1 {
			dm.SimClockSpeed = d.ClockSpeed
		}
		a.DeadMan = dm
	}
	return nil
}
