package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/vastrun/vastrun/internal/journal"
	"github.com/vastrun/vastrun/internal/lifecycle"
	"github.com/vastrun/vastrun/internal/provider"
)

// NoRunError means the state directory holds no run to act on. It is a
// usage error: the command was run where no run lives.
type NoRunError struct {
	StateDir string
	Err      error
	// Also is a fix the command itself offers besides a run (down:
	// --instance / --label), said in the hint.
	Also string
}

func (e *NoRunError) Error() string {
	return fmt.Sprintf("no run to act on in %s: nothing has been run from here yet", e.StateDir)
}
func (e *NoRunError) Unwrap() error { return e.Err }

// LockedError means another process drives the run.
type LockedError struct {
	RunDir string
	Holder *lockHolder // nil when it cannot be found out
	Err    error
}

func (e *LockedError) Error() string {
	if e.Holder != nil {
		return fmt.Sprintf("run %s is in use by vastrun pid %d on %s (%s)", filepath.Base(e.RunDir), e.Holder.PID, e.Holder.Host, e.Holder.Command)
	}
	return e.Err.Error()
}
func (e *LockedError) Unwrap() error { return e.Err }

// DamagedJournalError means a run's journal cannot be replayed; nothing
// was changed. Label and Instances come from state.json beside it.
type DamagedJournalError struct {
	RunDir    string
	Label     string
	Instances []provider.InstanceID
	Err       error
}

func (e *DamagedJournalError) Error() string {
	s := fmt.Sprintf("the journal of run %s is damaged (left unchanged): %v", filepath.Base(e.RunDir), e.Err)
	if e.Label != "" {
		s += fmt.Sprintf("; state.json names label %s and instances %v", e.Label, e.Instances)
	}
	return s
}
func (e *DamagedJournalError) Unwrap() error { return e.Err }

// checkJournal validates a run's journal read-only, before anything opens
// (and so may repair) it.
func checkJournal(dir string) error {
	_, err := journal.Read(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	de := &DamagedJournalError{RunDir: dir, Err: err}
	if b, rerr := os.ReadFile(filepath.Join(dir, "state.json")); rerr == nil {
		var sf struct {
			Label     string                `json:"label"`
			Instances []provider.InstanceID `json:"instance_ids"`
		}
		if json.Unmarshal(b, &sf) == nil {
			de.Label, de.Instances = sf.Label, sf.Instances
		}
	}
	return de
}

// openRun opens the run in dir on e. A lock held by another process is a
// *LockedError naming that process. The holder can let go between the
// failed flock and the look-up in /proc/locks; then nobody holds the lock
// any more and the open is simply tried again, a few times at most.
func openRun(e *lifecycle.Scope, dir string) error {
	const attempts = 5
	var err error
	for range attempts {
		if err = e.Open(dir); !errors.Is(err, journal.ErrLocked) {
			return err
		}
		if h := findLockHolder(filepath.Join(dir, journal.FileName)); h != nil {
			return &LockedError{RunDir: dir, Holder: h, Err: err}
		}
	}
	return &LockedError{RunDir: dir, Err: err}
}

type lockHolder struct {
	PID     int
	Host    string
	Command string
}

// findLockHolder looks the journal's flock up in /proc/locks (Linux): the
// lock is local, so the holder runs on this host.
func findLockHolder(path string) *lockHolder {
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // only read
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 12345 08:01:131074 0 EOF
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		dev := strings.Split(fields[5], ":")
		if len(dev) != 3 || dev[2] != strconv.FormatUint(sys.Ino, 10) {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		host, _ := os.Hostname()
		cmd := "command unknown"
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			cmd = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		}
		return &lockHolder{PID: pid, Host: host, Command: cmd}
	}
	return nil
}

// hintedError carries a hint that needs the command line (the -f file,
// --sim), which the error itself cannot know.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() }
func (e *hintedError) Unwrap() error { return e.err }

// withRunHints adds the hints a workflow's error needs from its flags.
func withRunHints(f *Factory, o *WorkflowOptions, err error) error {
	if errors.Is(err, lifecycle.ErrNoOffer) {
		sim := ""
		if f.Sim {
			sim = "--sim "
		}
		return &hintedError{err: err, hint: fmt.Sprintf("see why each offer was rejected: vastrun offers %s--policy %s --explain", sim, o.ConfigPath)}
	}
	return err
}
