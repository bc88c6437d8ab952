package agent

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Proof of a resume without the workload's help (docs/train.md, "How a
// resume is proven"). Where a checkpoint was restored, the supervisor
// watches the restored files with inotify before it starts the workload:
// the restored files put back in place (train.checkpoint_file) by inode,
// and every directory under $VASTRUN_RESUME_DIR. A read (IN_ACCESS), or an
// open for reading closed (IN_CLOSE_NOWRITE: reads through mmap show only
// as that), of a file not modified since the restore counts as the
// workload reading the restored checkpoint, unless the file is then open
// in a process outside the workload's tree (its process group, or a
// descendant of it): inotify does not name the reader, so the agent looks
// in /proc when the event arrives. A reader that has already closed the
// file cannot be named; on an instance nothing else reads it (the agent
// itself never reads a restored file once the workload runs). fanotify,
// which names the reader, needs CAP_SYS_ADMIN, which containers lack.
//
// The resume is proven by observation when the workload read the restored
// checkpoint and the first step it reported afterwards (train.step_from,
// the step a snapshot read from the file, or a new STEP directory) is at
// or above the restored step (nanoGPT reports its resumed step once more
// before it moves on), and no step it reported before was below it.

// Ways a resume is proven (Resume.ProvenBy).
const (
	ProvenReported = "reported" // the workload wrote the restored step to $VASTRUN_RESUME_PROOF
	ProvenObserved = "observed" // the agent saw it read the checkpoint, then report a step at or above it
)

// Observed is what the agent saw of the workload after a restore (in its
// status file; BuildReport turns it into Resume).
type Observed struct {
	// Read is the first restored file the workload was seen reading,
	// relative to the login directory ("" none).
	Read string `json:"read,omitempty"`
	// FirstStep is the first step the workload reported on this instance;
	// StepAfterRead the first it reported after Read.
	FirstStep     *int64 `json:"first_step,omitempty"`
	StepAfterRead *int64 `json:"step_after_read,omitempty"`
	// ForeignReads counts reads by processes outside the workload's tree.
	ForeignReads int `json:"foreign_reads,omitempty"`
	// Unobservable says why reads cannot be seen here ("" when they can).
	Unobservable string `json:"unobservable,omitempty"`
}

// resumeWatch is the observation on one instance.
type resumeWatch struct {
	mu      sync.Mutex
	home    string
	logFile string
	in      *inotify
	pid     int             // the workload; 0 until it is started
	changed map[string]bool // restored files modified since: reads are no longer of the restore
	obs     Observed
	readOff int64 // the log's size when Read was seen
}

// maxWatchDirs bounds the directories of a restored checkpoint watched.
const maxWatchDirs = 256

// watchRestore starts watching what the last restore on this instance put
// back, before the workload starts; nil when nothing was restored.
func watchRestore(l Layout) *resumeWatch {
	b, err := os.ReadFile(l.Abs(RestoreFile))
	if err != nil {
		return nil
	}
	var rr RestoreResult
	if json.Unmarshal(b, &rr) != nil || rr.Step < 0 {
		return nil
	}
	rw := &resumeWatch{home: l.Home, logFile: l.Abs(LogFile), changed: map[string]bool{}}
	in, err := newInotify(rw.onEvent)
	if err != nil {
		rw.obs.Unobservable = err.Error()
		return rw
	}
	rw.in = in
	watched := 0
	for _, p := range rr.Placed {
		if in.add(l.Abs(filepath.FromSlash(p)), evRead|evChanged) == nil {
			watched++
		}
	}
	dirs := 0
	//nolint:errcheck // the walk's function returns no error: an unreadable directory is one less watched
	filepath.WalkDir(l.Abs(ResumeDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if dirs++; dirs > maxWatchDirs {
			return fs.SkipAll
		}
		if in.add(p, evRead|evChanged) == nil {
			watched++
		}
		return nil
	})
	if watched == 0 {
		rw.obs.Unobservable = "no restored file could be watched"
	}
	return rw
}

// started names the workload's process.
func (rw *resumeWatch) started(pid int) {
	if rw == nil {
		return
	}
	rw.mu.Lock()
	rw.pid = pid
	rw.mu.Unlock()
}

func (rw *resumeWatch) close() {
	if rw != nil && rw.in != nil {
		rw.in.close()
	}
}

// onEvent runs on the inotify reader.
func (rw *resumeWatch) onEvent(ev fsEvent) {
	if ev.mask&evIsDir != 0 || ev.mask&evOverflow != 0 {
		return
	}
	p := ev.full()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if ev.mask&evChanged != 0 {
		rw.changed[p] = true
	}
	if ev.mask&evRead == 0 || rw.changed[p] || rw.obs.Read != "" {
		return
	}
	// Before the workload's pid is known, only the workload can be
	// starting to read: the supervisor launches it next.
	if holders := holdersOf(p); rw.pid > 0 && len(holders) > 0 && !inTree(holders, rw.pid) {
		rw.obs.ForeignReads++
		return
	}
	rel, err := filepath.Rel(rw.home, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = p
	}
	rw.obs.Read = filepath.ToSlash(rel)
	if fi, err := os.Stat(rw.logFile); err == nil {
		rw.readOff = fi.Size()
	}
}

// step takes a step the workload reported, at log offset off.
func (rw *resumeWatch) step(step, off int64) {
	if rw == nil {
		return
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.obs.FirstStep == nil {
		rw.obs.FirstStep = &step
	}
	if rw.obs.Read != "" && rw.obs.StepAfterRead == nil && off >= rw.readOff {
		rw.obs.StepAfterRead = &step
	}
}

// observed is a copy of what was seen so far.
func (rw *resumeWatch) observed() *Observed {
	if rw == nil {
		return nil
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	o := rw.obs
	return &o
}

// holdersOf lists the processes that have path open.
func holdersOf(path string) []int {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		path = r
	}
	var pids []int
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, pe := range procs {
		pid, err := strconv.Atoi(pe.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", pe.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if t, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && t == path {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// inTree reports whether one of pids is the workload (pid), in its process
// group, or a descendant of it.
func inTree(pids []int, workload int) bool {
	for _, p := range pids {
		for hops := 0; p > 1 && hops < 64; hops++ {
			if p == workload {
				return true
			}
			ppid, pgrp, ok := statParents(p)
			if !ok {
				break
			}
			if pgrp == workload {
				return true
			}
			p = ppid
		}
	}
	return false
}

// statParents reads a process's parent and process group from
// /proc/PID/stat (fields 4 and 5, after the parenthesized name).
func statParents(pid int) (ppid, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	return ppid, pgrp, err1 == nil && err2 == nil
}
