//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotify is one inotify instance read by one goroutine. It needs no
// privilege (fanotify, which names the process, needs CAP_SYS_ADMIN, which
// containers rarely have); what it cannot say is who caused an event.
type inotify struct {
	f    *os.File
	mu   sync.Mutex
	wds  map[int32]string // watch descriptor -> the path it watches
	byP  map[string]int32
	done chan struct{}
}

// fsEvent is one event: the watched path, and the name under it for a
// directory's entry ("" for the watched path itself).
type fsEvent struct {
	path, name string
	mask       uint32
}

func (e fsEvent) full() string {
	if e.name == "" {
		return e.path
	}
	return filepath.Join(e.path, e.name)
}

// newInotify starts reading events into fn, one at a time, until close.
func newInotify(fn func(fsEvent)) (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	// Non-blocking, so the runtime's poller reads it and Close wakes the reader.
	n := &inotify{f: os.NewFile(uintptr(fd), "inotify"), wds: map[int32]string{}, byP: map[string]int32{}, done: make(chan struct{})}
	go n.read(fn)
	return n, nil
}

// add watches path for mask (idempotent per path).
func (n *inotify) add(path string, mask uint32) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.byP[path]; ok {
		return nil
	}
	rc, err := n.f.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var werr error
	if err := rc.Control(func(fd uintptr) { wd, werr = unix.InotifyAddWatch(int(fd), path, mask) }); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("inotify watch %s: %w", path, werr)
	}
	n.wds[int32(wd)], n.byP[path] = path, int32(wd)
	return nil
}

func (n *inotify) read(fn func(fsEvent)) {
	defer close(n.done)
	buf := make([]byte, 64<<10)
	for {
		k, err := n.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue // EINTR and the like; a closed file ends the loop
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameLen := int(ev.Len)
			var name string
			if nameLen > 0 && off+unix.SizeofInotifyEvent+nameLen <= k {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
				for i, c := range b {
					if c == 0 {
						b = b[:i]
						break
					}
				}
				name = string(b)
			}
			off += unix.SizeofInotifyEvent + nameLen
			n.mu.Lock()
			path, ok := n.wds[ev.Wd]
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(n.wds, ev.Wd)
				delete(n.byP, path)
			}
			n.mu.Unlock()
			if ok || ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				fn(fsEvent{path: path, name: name, mask: ev.Mask})
			}
		}
	}
}

// close stops the reader and waits for it.
func (n *inotify) close() {
	n.f.Close() //nolint:errcheck // it only ends the reader; nothing is left to report
	<-n.done
}

// The events the two watches use (inotify(7)).
const (
	evSaved    = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO // a save finished (in place, or renamed into place)
	evRead     = unix.IN_ACCESS | unix.IN_CLOSE_NOWRITE // content read, or an open for reading closed (an mmap shows only as that)
	evChanged  = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	evDirMade  = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR // a directory appeared (with evIsDir)
	evIsDir    = unix.IN_ISDIR
	evOverflow = unix.IN_Q_OVERFLOW
)

const inotifyAvailable = true
