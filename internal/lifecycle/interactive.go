package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/remote"
)

// ErrNotLive means the run has no instance that is up and reachable: never
// rented, destroyed, stopped or paused.
var ErrNotLive = errors.New("run has no live instance")

// NotLiveError names the run, the instance (if any) and its state.
type NotLiveError struct {
	RunID    string
	Instance provider.InstanceID
	State    string // "destroyed", the instance's actual_status, ...
}

func (e *NotLiveError) Error() string {
	if e.Instance == 0 {
		return fmt.Sprintf("run %s: %v (nothing was rented)", e.RunID, ErrNotLive)
	}
	return fmt.Sprintf("run %s: %v: instance %d is %s", e.RunID, ErrNotLive, e.Instance, e.State)
}

func (e *NotLiveError) Unwrap() error { return ErrNotLive }

// Interactive connects to the run's live instance (opened with Open) with
// the run's own key and the host key pinned in the run's known_hosts, for
// `vastrun ssh`. It never rents, adopts or destroys anything.
func (e *Scope) Interactive(ctx context.Context) (*remote.Client, provider.Instance, error) {
	a := e.state.Current()
	if a == nil || a.InstanceID == 0 {
		return nil, provider.Instance{}, &NotLiveError{RunID: e.state.RunID}
	}
	if a.Destroyed || a.Confirmed {
		return nil, provider.Instance{}, &NotLiveError{RunID: e.state.RunID, Instance: a.InstanceID, State: "destroyed"}
	}
	inst, err := e.Market.ShowInstance(ctx, a.InstanceID)
	if errors.Is(err, provider.ErrNotFound) {
		return nil, provider.Instance{}, &NotLiveError{RunID: e.state.RunID, Instance: a.InstanceID, State: "gone"}
	}
	if err != nil {
		return nil, provider.Instance{}, fmt.Errorf("ssh to instance %d: %w", a.InstanceID, err)
	}
	if !inst.Running() {
		state := inst.ActualStatus
		if inst.Paused() {
			state = "paused (stopped or outbid)"
		}
		return nil, inst, &NotLiveError{RunID: e.state.RunID, Instance: a.InstanceID, State: state}
	}
	c, err := connect(ctx, e, a.InstanceID, inst, e.Now().Add(time.Minute))
	if err != nil {
		return nil, inst, err
	}
	return c, inst, nil
}
