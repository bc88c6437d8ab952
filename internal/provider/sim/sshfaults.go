package sim

import (
	"fmt"
	"io"
	"net"
	"time"
)

// SSH faults: connections that drop (ssh_drop) and connections that stall
// without closing (ssh_stall), as a flaky network or a hung host does.
// Both act on an instance's live connections; new connections work.

// sshSchedule is an armed ssh_drop or ssh_stall that repeats.
type sshSchedule struct {
	kind     string
	instance int64 // 0: every instance
	every    time.Duration
	count    int                 // times per instance; 0: until cleared
	next     map[int64]time.Time // per instance: when it fires next
	fired    map[int64]int
}

// armSSHFault applies or schedules f. Called with s.mu held.
func (s *Server) armSSHFault(f Fault, now time.Time) error {
	if f.Instance != 0 {
		if in := s.instances[f.Instance]; in == nil || in.Destroyed {
			return fmt.Errorf("fault %s: no live instance %d", f.Kind, f.Instance)
		}
	}
	if f.Seconds <= 0 { // once, now, on the connections open at this moment
		for _, in := range s.instances {
			if !in.Destroyed && (f.Instance == 0 || in.ID == f.Instance) {
				s.actOnConns(in, f.Kind)
				s.sshFaultsFired++
			}
		}
		return nil
	}
	s.faults.ssh = append(s.faults.ssh, &sshSchedule{kind: f.Kind, instance: f.Instance,
		every: time.Duration(f.Seconds * float64(time.Second)), count: max(f.Count, 0),
		next: map[int64]time.Time{}, fired: map[int64]int{}})
	return nil
}

// sshFaultDue reports the SSH fault due on in now, if any ("" if none). The
// first sight of an instance's connection starts its period.
func (s *Server) sshFaultDue(in *instance) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, sc := range s.faults.ssh {
		if sc.instance != 0 && sc.instance != in.ID {
			continue
		}
		if sc.count > 0 && sc.fired[in.ID] >= sc.count {
			continue
		}
		next, seen := sc.next[in.ID]
		if !seen {
			sc.next[in.ID] = now.Add(sc.every)
			continue
		}
		if now.Before(next) {
			continue
		}
		sc.next[in.ID] = now.Add(sc.every)
		sc.fired[in.ID]++
		s.sshFaultsFired++
		s.log.Info("ssh fault", "kind", sc.kind, "instance", in.ID, "times", sc.fired[in.ID])
		return sc.kind
	}
	return ""
}

// actOnConns drops or stalls in's live connections. It never takes s.mu.
func (s *Server) actOnConns(in *instance, kind string) {
	st := stateOf(in)
	st.mu.Lock()
	var conns []*trackedConn
	for c := range st.conns {
		conns = append(conns, c.(*trackedConn))
	}
	st.mu.Unlock()
	for _, c := range conns {
		switch kind {
		case FaultSSHDrop:
			c.Close() //nolint:errcheck // dropping the connection is the fault
		case FaultSSHStall:
			c.stalled.Store(true)
		}
	}
}

// fire checks for a due SSH fault on each read and write: a connection
// idle between calls drops or stalls at its next use.
func (c *trackedConn) fire() {
	if c.srv == nil {
		return
	}
	if kind := c.srv.sshFaultDue(c.in); kind != "" {
		c.srv.actOnConns(c.in, kind)
	}
}

func (c *trackedConn) Read(p []byte) (int, error) {
	c.fire()
	if !c.stalled.Load() {
		n, err := c.Conn.Read(p)
		if !c.stalled.Load() {
			return n, err
		}
	}
	// Stalled: what arrives is never processed; only a close ends it.
	_, err := io.Copy(io.Discard, c.Conn)
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.fire()
	if c.stalled.Load() {
		return len(p), nil // into the void, as on a dead path
	}
	return c.Conn.Write(p)
}

var _ net.Conn = (*trackedConn)(nil)
