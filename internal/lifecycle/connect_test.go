package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/runstate"
)

// refusingSSH is an SSH port that takes each connection and closes it at
// once, as a host that does not answer SSH (yet): the client's handshake
// fails with EOF, without waiting on any clock.
type refusingSSH struct {
	ln    net.Listener
	dials atomic.Int64
}

func newRefusingSSH(t *testing.T) *refusingSSH {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &refusingSSH{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.dials.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return r
}

func (r *refusingSSH) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// TestConnectAsksBetweenDials: between SSH dials, connect asks the API
// whether the instance still runs, at most once per connectStatusEvery on
// the run's clock; an instance stopped, exited, offline or gone ends the
// attempt at once as ErrStoppedBeforeSSH (a ready failure: provision
// replaces it), while one that still runs is dialled until the deadline.
func TestConnectAsksBetweenDials(t *testing.T) {
	unavailable := &provider.APIError{Op: "show instance 101", Status: 503}
	for _, tc := range []struct {
		name     string
		statuses []string // what each show answers after the caller saw it running; nil: gone (404)
		showErrs []error  // scripted show errors, in order
		// wantStopped: ends with ErrStoppedBeforeSSH naming wantReason
		// after wantShows status checks; otherwise at the deadline.
		wantStopped bool
		wantReason  string
		wantShows   int
	}{
		{name: "stopped by the host after it ran", statuses: []string{"paused"}, wantStopped: true, wantReason: "stopped", wantShows: 1},
		{name: "its container exited", statuses: []string{"exited"}, wantStopped: true, wantReason: "exited", wantShows: 1},
		{name: "its host went offline", statuses: []string{"offline"}, wantStopped: true, wantReason: "offline", wantShows: 1},
		{name: "destroyed (the API answers 404)", statuses: nil, wantStopped: true, wantReason: "no longer has it", wantShows: 1},
		{name: "stopped later: caught at a later check", statuses: []string{"running", "running", "paused"}, wantStopped: true, wantReason: "stopped", wantShows: 3},
		{name: "a status check that fails is no verdict: the next one is", statuses: []string{"paused"}, showErrs: []error{unavailable},
			wantStopped: true, wantReason: "stopped", wantShows: 2},
		{name: "still running: dialled until the ready deadline", statuses: []string{"running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMarket()
			r := newStepRig(t, stepConfig, m)
			ssh := newRefusingSSH(t)
			m.sshHost, m.sshPort = "127.0.0.1", ssh.port()
			label := r.s.State().Label
			if tc.statuses != nil {
				m.add(101, 10, label, 0)
				m.instances[101].statuses = tc.statuses
			}
			r.rented(101, 10)
			m.fail("show", tc.showErrs...)
			// What waitReady saw: running, SSH published.
			inst := provider.Instance{ID: 101, ActualStatus: "running", PublicIP: "127.0.0.1",
				Ports: map[string][]provider.PortBinding{"22/tcp": {{HostPort: ssh.port()}}}}
			start := r.clk.Now()
			deadline := start.Add(2 * time.Minute)

			c, err := connect(context.Background(), r.s, 101, inst, deadline)

			if c != nil {
				c.Close()
				t.Fatal("connected to a port that answers no SSH")
			}
			var se *StepError
			if !errors.As(err, &se) || se.Outcome != OutcomeReadyFailed || se.Instance != 101 {
				t.Fatalf("connect: %v, want a ready failure of instance 101", err)
			}
			calls, at := m.calls(), m.callsAt()
			var shows []time.Time
			for i, c := range calls {
				if c == "show 101" {
					shows = append(shows, at[i])
				}
			}
			for i := 1; i < len(shows); i++ {
				if d := shows[i].Sub(shows[i-1]); d < connectStatusEvery {
					t.Fatalf("status asked %s after the last (at most every %s)", d, connectStatusEvery)
				}
			}
			if len(shows) > 0 && !shows[0].After(start) {
				t.Fatal("the status was asked before the first dial: the caller had just seen it running")
			}
			dials := int(ssh.dials.Load())
			if tc.wantStopped {
				if !errors.Is(err, ErrStoppedBeforeSSH) || !strings.Contains(err.Error(), tc.wantReason) {
					t.Fatalf("connect: %v, want ErrStoppedBeforeSSH naming %q", err, tc.wantReason)
				}
				if len(shows) != tc.wantShows {
					t.Fatalf("%d status checks, want %d: %v", len(shows), tc.wantShows, calls)
				}
				// It ends at the check: no dial after it, and long before
				// the deadline.
				if dials < 1 || dials > 2*tc.wantShows || r.clk.Now().Sub(start) > time.Duration(tc.wantShows)*(connectStatusEvery+10*time.Second) {
					t.Fatalf("%d dials over %s", dials, r.clk.Now().Sub(start))
				}
				return
			}
			if errors.Is(err, ErrStoppedBeforeSSH) || !strings.Contains(err.Error(), "SSH never answered before the ready deadline") {
				t.Fatalf("connect: %v, want the ready deadline", err)
			}
			if r.clk.Now().Before(deadline) || dials < 10 || len(shows) < 5 || len(shows) >= dials {
				t.Fatalf("ended at +%s after %d dials and %d status checks", r.clk.Now().Sub(start), dials, len(shows))
			}
		})
	}
}

// An instance stopped between "running" and its first SSH connection is
// replaced by provision at once, on another machine, and its failover
// names the stop.
func TestProvisionReplacesStoppedBeforeSSH(t *testing.T) {
	m := newFakeMarket(offer(1, 10, 0.4), offer(2, 20, 0.5))
	r := newStepRig(t, stepConfig, m)
	ssh := newRefusingSSH(t)
	m.sshHost, m.sshPort = "127.0.0.1", ssh.port()
	// Running when the ready wait looks, stopped when connect looks.
	m.statuses[1] = []string{"running", "paused"}
	// The replacement gets its key attached no more: the test ends there.
	m.fail("attach", nil, authFail)
	if err := Freeze.Do(context.Background(), r.s); err != nil {
		t.Fatal(err)
	}
	start := r.clk.Now()
	err := Provision.Do(context.Background(), r.s)
	assertStoppedAtAttach(t, r, err, 102)
	st := r.s.State()
	if len(st.Attempts) != 2 || !strings.Contains(st.Attempts[0].Failure, ErrStoppedBeforeSSH.Error()) || !st.Attempts[0].Confirmed ||
		st.Attempts[1].MachineID == st.Attempts[0].MachineID {
		t.Fatalf("attempts %+v", st.Attempts)
	}
	if j := r.journalData(); !slices.Contains(j, "event:failover:101:"+st.Attempts[0].Failure) {
		t.Fatalf("journal %v", j)
	}
	// Replaced within one status interval of its first dial, not at the
	// ready deadline (10m).
	if calls := m.calls(); !before(calls, "destroy 101", "create 2") || r.clk.Now().Sub(start) > time.Minute {
		t.Fatalf("calls %v after %s", calls, r.clk.Now().Sub(start))
	}
	if c := st.Condition(runstate.StepConnect); c.Instance != 102 {
		t.Fatalf("connect condition %+v", c)
	}
}

// journalData is the run's journal on disk as "type:step:instance:reason"
// entries (instance 0 and no reason for records that name none).
func (r *stepRig) journalData() []string {
	r.t.Helper()
	recs, err := journal.Read(r.s.RunDir())
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, rec := range recs {
		var d runstate.InstanceData
		_ = json.Unmarshal(rec.Data, &d) // not every payload is one: zero then
		out = append(out, fmt.Sprintf("%s:%s:%d:%s", rec.Type, rec.Step, d.Instance, d.Reason))
	}
	return out
}
