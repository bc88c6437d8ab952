package redact

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Sink is the one way vastrun writes a file a person or a program reads
// (evidence, state, receipts, reports, CI files): every byte goes through
// its Redactor on the way. The packages that produce evidence write no
// file otherwise (internal/archtest pins it), so masking is a property of
// the writer, not a step each caller must remember.
//
// The zero Sink (or one over a nil Redactor) masks token shapes only.
type Sink struct{ r *Redactor }

// NewSink returns a sink masking with r.
func NewSink(r *Redactor) Sink { return Sink{r: r} }

// Redactor is the sink's redactor.
func (s Sink) Redactor() *Redactor { return s.r }

// WriteFile writes b, masked as text, to path: whole or not at all (a
// temporary file beside it, synced, then renamed over it).
func (s Sink) WriteFile(path string, b []byte, perm os.FileMode) error {
	return writeAtomic(path, s.r.Bytes(b), perm)
}

// WriteJSON writes the JSON document b to path like WriteFile, masked after
// decoding so that it stays a document (see Redactor.JSON).
func (s Sink) WriteJSON(path string, b []byte, perm os.FileMode) error {
	return writeAtomic(path, s.r.JSON(b), perm)
}

// Create creates (or truncates) path for a stream of output, masked line
// by line as it is written; mirrors (a terminal, say; nil ones are left
// out) get the same masked lines.
func (s Sink) Create(path string, perm os.FileMode, mirrors ...io.Writer) (*File, error) {
	return s.open(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm, mirrors)
}

// Append opens path for appending a stream of output, like Create.
func (s Sink) Append(path string, perm os.FileMode, mirrors ...io.Writer) (*File, error) {
	return s.open(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, perm, mirrors)
}

func (s Sink) open(path string, flag int, perm os.FileMode, mirrors []io.Writer) (*File, error) {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	ws := []io.Writer{f}
	for _, m := range mirrors {
		if m != nil {
			ws = append(ws, m)
		}
	}
	out := &lockedWriter{w: io.MultiWriter(ws...)}
	file := &File{r: s.r, f: f, out: out}
	file.main = file.Stream().(*Writer)
	return file, nil
}

// File is an open file of a Sink. Its Write is one stream; Stream gives
// more (a command's stdout and stderr: each is masked on its own before
// their lines are interleaved, so that a secret one of them writes in
// pieces never reaches the file split by the other's output).
type File struct {
	r      *Redactor
	f      *os.File
	out    *lockedWriter
	mu     sync.Mutex
	main   *Writer
	all    []*Writer
	closed bool
}

// Name is the file's path.
func (f *File) Name() string { return f.f.Name() }

// Write writes to the file's main stream.
func (f *File) Write(p []byte) (int, error) { return f.main.Write(p) }

// Stream returns a new stream into the file.
func (f *File) Stream() io.Writer {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.r.Writer(f.out)
	f.all = append(f.all, w)
	return w
}

// Flush writes what each stream holds.
func (f *File) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, w := range f.all {
		errs = append(errs, w.Flush())
	}
	return errors.Join(errs...)
}

// Close flushes every stream, syncs and closes the file. Closing again
// does nothing.
func (f *File) Close() error {
	err := f.Flush()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return err
	}
	f.closed = true
	return errors.Join(err, f.f.Sync(), f.f.Close())
}

// writeAtomic writes b to path through a synced temporary file renamed over
// it, so a reader never sees half a file.
func writeAtomic(path string, b []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // after the rename nothing is left to remove; a leftover is a hidden temporary file
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err = errors.Join(err, tmp.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}
