package container

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The base images a build starts FROM are the engine's to fetch, as a plain
// `podman build` or `docker build` would: present ones are used, missing
// ones are pulled. Where the network cannot reach their registry, the
// build cannot happen; EnsureBaseImages says so before anything else is
// done, with the exact command that fetches each (*MissingImageError).

// MissingImageError is a base image the engine does not have and could not
// pull.
type MissingImageError struct {
	Engine string // docker or podman
	File   string // the Containerfile that names it
	Ref    string
	Output string // the pull's own last words
}

func (e *MissingImageError) Error() string {
	return fmt.Sprintf("%s builds FROM %s, which %s does not have and could not pull: %s", e.File, e.Ref, e.Engine, e.Output)
}

// PullCommand is the command that fetches the image where its registry
// can be reached.
func (e *MissingImageError) PullCommand() string { return e.Engine + " pull " + e.Ref }

// BaseImages are the images file (relative to dir) builds FROM, in order:
// not scratch, not an earlier stage's name, not a reference an ARG fills
// in (only the engine knows its value).
func BaseImages(dir, file string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read-only
	stages := map[string]bool{}
	seen := map[string]bool{}
	var refs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		args := fields[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") { // --platform=…
			args = args[1:]
		}
		if len(args) == 0 {
			continue
		}
		ref := args[0]
		earlierStage := stages[strings.ToLower(ref)]
		if len(args) >= 3 && strings.EqualFold(args[1], "AS") {
			stages[strings.ToLower(args[2])] = true
		}
		if earlierStage || seen[ref] || strings.EqualFold(ref, "scratch") || strings.Contains(ref, "$") {
			continue
		}
		seen[ref] = true
		refs = append(refs, ref)
	}
	return refs, sc.Err()
}

// HasImage reports whether the engine's local store holds ref.
func (e *Engine) HasImage(ctx context.Context, ref string) (bool, error) {
	args := []string{"image", "inspect", "--format", "{{.Id}}", ref}
	if e.Name == "podman" {
		args = []string{"image", "exists", ref}
	}
	cmd := exec.CommandContext(ctx, e.Path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1: // both engines: no such image
		return false, nil
	}
	return false, fmt.Errorf("%s %s: %w", e.Name, strings.Join(args, " "), err)
}

// pullBase fetches ref into the engine's local store, output to w; a
// registry on this host is spoken to over plain HTTP (podman asks first).
func (e *Engine) pullBase(ctx context.Context, ref string, w io.Writer) error {
	args := []string{"pull", ref}
	if e.Name == "podman" && LoopbackRegistry(ref) {
		args = []string{"pull", "--tls-verify=false", ref}
	}
	return e.command(ctx, w, args...)
}

// EnsureBaseImages pulls the base images of file (relative to dir) that
// the engine does not have yet; one that cannot be pulled is a
// *MissingImageError. Pull output goes to w.
func (e *Engine) EnsureBaseImages(ctx context.Context, dir, file string, w io.Writer) error {
	refs, err := BaseImages(dir, file)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		ok, err := e.HasImage(ctx, ref)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		if err := e.pullBase(ctx, ref, w); err != nil {
			out := err.Error()
			var re *RunError
			if errors.As(err, &re) {
				out = lastLine(re.Output)
			}
			return &MissingImageError{Engine: e.Name, File: file, Ref: ref, Output: out}
		}
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
