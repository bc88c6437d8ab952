package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// openForWriting finds, for each root (a file or a directory), a file at or
// under it that some process on this machine has open for writing, from
// /proc/PID/fd and the access mode in /proc/PID/fdinfo. A save that is still
// running (or stalled) holds its file open; one that has returned does not.
// Processes this agent may not inspect are skipped: on an instance the
// workload runs as the agent's user.
func openForWriting(roots []string) map[string]string {
	resolved := make(map[string]string, len(roots)) // resolved path -> root as given
	for _, r := range roots {
		abs, err := filepath.Abs(r)
		if err != nil {
			continue
		}
		if p, err := filepath.EvalSymlinks(abs); err == nil {
			abs = p
		}
		resolved[abs] = r
	}
	found := map[string]string{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return found
	}
	for _, pe := range procs {
		if _, err := strconv.Atoi(pe.Name()); err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", pe.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(target, "/") {
				continue
			}
			target = strings.TrimSuffix(target, " (deleted)")
			for abs, root := range resolved {
				if _, ok := found[root]; ok {
					continue
				}
				if target != abs && !strings.HasPrefix(target, abs+"/") {
					continue
				}
				if writable(pe.Name(), fd.Name()) {
					found[root] = target
				}
			}
		}
	}
	return found
}

// writable reports whether the descriptor was opened for writing.
func writable(pid, fd string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "fdinfo", fd))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				return false
			}
			mode := flags & 3 // O_ACCMODE
			return mode == 1 || mode == 2
		}
	}
	return false
}
