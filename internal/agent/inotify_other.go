//go:build !linux

package agent

import (
	"errors"
	"path/filepath"
)

// Without inotify the agent polls: steps are read when a poll first sees
// a save, and a resume is proven only by the workload's own report.
type inotify struct{}

type fsEvent struct {
	path, name string
	mask       uint32
}

func (e fsEvent) full() string { return filepath.Join(e.path, e.name) }

func newInotify(func(fsEvent)) (*inotify, error) {
	return nil, errors.New("inotify is Linux only")
}

func (*inotify) add(string, uint32) error { return errors.New("inotify is Linux only") }
func (*inotify) close()                   {}

const (
	evSaved    = 0
	evRead     = 0
	evChanged  = 0
	evDirMade  = 0
	evIsDir    = 0
	evOverflow = 0
)

const inotifyAvailable = false
