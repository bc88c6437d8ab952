// Package checkpoint commits training checkpoints to durable storage and
// restores them, so that a checkpoint counts only once it is complete and
// verified.
//
// Layout under the store (step zero-padded so keys sort by step):
//
//	checkpoints/000000001200/files/<relative path>   the checkpoint's files
//	checkpoints/000000001200/manifest.json           files, sizes, SHA-256 (per part too), step, time
//	checkpoints/000000001200/COMMITTED               SHA-256 of manifest.json
//
// Commit uploads the files, then the manifest, then creates COMMITTED with a
// conditional create. A checkpoint without a COMMITTED marker whose content
// matches its manifest does not exist, whatever files it has. Restore
// re-hashes every byte (a file of several parts part by part, against the
// manifest's part digests) and refuses a mismatch; RestoreLatest then falls back
// to the previous committed checkpoint. Prune deletes old checkpoints only
// beyond the newest `keep` committed ones, marker first, so a half-deleted
// checkpoint is never mistaken for a committed one.
package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/storage"
)

// Prefix is where checkpoints live in the store.
const Prefix = "checkpoints"

// CompleteMarker is the file a workload writes into a checkpoint directory
// when it has finished writing it; the agent commits only complete ones.
const CompleteMarker = ".complete"

// Errors.
var (
	ErrCorrupt      = errors.New("checkpoint failed verification")
	ErrNoCheckpoint = errors.New("no committed checkpoint")
	ErrConflict     = errors.New("a different checkpoint is already committed at this step")
)

// File is one file of a checkpoint.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Parts are the SHA-256 digests of the file's consecutive ranges, for
	// files of more than one part: Restore verifies each range as it
	// arrives, in parallel, against them. Absent in older manifests, whose
	// files are verified against SHA256 in one stream.
	Parts *storage.PartDigests `json:"parts,omitempty"`
}

// Manifest describes a checkpoint.
type Manifest struct {
	Schema string    `json:"schema"`
	Step   int64     `json:"step"`
	Time   time.Time `json:"time"`
	Files  []File    `json:"files"`
}

// Committed is a committed checkpoint.
type Committed struct {
	Step           int64
	ManifestSHA256 string
	Manifest       Manifest
}

// Store commits and restores checkpoints in a storage.Store.
type Store struct {
	S storage.Store
	// Prefix is where checkpoints live; default "checkpoints". Final
	// outputs use the same protocol under "outputs".
	Prefix string
}

func (c Store) prefix() string {
	if c.Prefix == "" {
		return Prefix
	}
	return c.Prefix
}

func (c Store) stepDir(step int64) string { return fmt.Sprintf("%s/%012d", c.prefix(), step) }

// Commit uploads dir as the checkpoint for step and commits it. Committing
// the same content again is a no-op; different content at a committed step
// is ErrConflict.
func (c Store) Commit(ctx context.Context, dir string, step int64, now time.Time) (Committed, error) {
	m := Manifest{Schema: "vastrun.checkpoint/v1", Step: step, Time: now.UTC()}
	var uploads []storage.FileTransfer
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() == CompleteMarker || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		m.Files = append(m.Files, File{Path: filepath.ToSlash(rel)})
		uploads = append(uploads, storage.FileTransfer{Key: c.stepDir(step) + "/files/" + filepath.ToSlash(rel), Path: p})
		return nil
	})
	if err != nil {
		return Committed{}, fmt.Errorf("commit checkpoint %d: %w", step, err)
	}
	// All files at once, through the store's bounded request slots.
	objs, err := storage.PutFiles(ctx, c.S, uploads)
	if err != nil {
		return Committed{}, fmt.Errorf("commit checkpoint %d: %w", step, err)
	}
	for i, o := range objs {
		m.Files[i].Size, m.Files[i].SHA256, m.Files[i].Parts = o.Size, o.SHA256, o.Parts
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	mb, _ := json.MarshalIndent(m, "", "  ")
	sum := sha256.Sum256(mb)
	digest := hex.EncodeToString(sum[:])
	// If this step is already committed, do not touch its manifest.
	if existing, err := c.marker(ctx, step); err == nil {
		if existing == digest {
			return Committed{Step: step, ManifestSHA256: digest, Manifest: m}, nil
		}
		if prev, err := c.read(ctx, step); err == nil && sameFiles(prev.Manifest, m) {
			return prev, nil
		}
		return Committed{}, fmt.Errorf("commit checkpoint %d: %w", step, ErrConflict)
	}
	// Two committers of one step (the watching agent and a final --once)
	// must not overwrite each other's manifest between the other's manifest
	// and marker writes: that leaves a marker that matches no manifest, and
	// the step silently stops counting. The first manifest written wins; a
	// later committer with the same files adopts it.
	if err := c.S.PutIfAbsent(ctx, c.stepDir(step)+"/manifest.json", mb); err != nil {
		if !errors.Is(err, storage.ErrExists) {
			return Committed{}, fmt.Errorf("commit checkpoint %d: manifest: %w", step, err)
		}
		prevb, rerr := c.readAll(ctx, c.stepDir(step)+"/manifest.json")
		var prev Manifest
		switch {
		case rerr != nil:
			return Committed{}, fmt.Errorf("commit checkpoint %d: manifest: %w", step, rerr)
		case json.Unmarshal(prevb, &prev) == nil && prev.Step == step && sameFiles(prev, m):
			mb, m = prevb, prev
			sum = sha256.Sum256(mb)
			digest = hex.EncodeToString(sum[:])
		default:
			// Left by a commit that died before its marker, for other
			// bytes: no marker names it, so it may be replaced.
			if _, err := c.S.Put(ctx, c.stepDir(step)+"/manifest.json", bytes.NewReader(mb)); err != nil {
				return Committed{}, fmt.Errorf("commit checkpoint %d: manifest: %w", step, err)
			}
		}
	}
	if err := c.S.PutIfAbsent(ctx, c.stepDir(step)+"/COMMITTED", []byte(digest)); err != nil {
		if errors.Is(err, storage.ErrExists) {
			return c.Commit(ctx, dir, step, now) // lost a race: judge the winner
		}
		return Committed{}, fmt.Errorf("commit checkpoint %d: marker: %w", step, err)
	}
	return Committed{Step: step, ManifestSHA256: digest, Manifest: m}, nil
}

func sameFiles(a, b Manifest) bool {
	if len(a.Files) != len(b.Files) {
		return false
	}
	for i := range a.Files {
		if a.Files[i] != b.Files[i] {
			return false
		}
	}
	return true
}

func (c Store) readAll(ctx context.Context, key string) ([]byte, error) {
	rc, err := c.S.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close() //nolint:errcheck // read-only; the read's error is checked
	return io.ReadAll(io.LimitReader(rc, 16<<20))
}

func (c Store) marker(ctx context.Context, step int64) (string, error) {
	b, err := c.readAll(ctx, c.stepDir(step)+"/COMMITTED")
	return strings.TrimSpace(string(b)), err
}

// read loads a committed checkpoint's manifest and checks it against the
// marker.
func (c Store) read(ctx context.Context, step int64) (Committed, error) {
	// The manifest is fetched beside the marker, not after it: a restore
	// starts a round trip sooner. It counts only if the marker names it.
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mb []byte
	var merr error
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		mb, merr = c.readAll(mctx, c.stepDir(step)+"/manifest.json")
	}()
	digest, err := c.marker(ctx, step)
	if err != nil {
		cancel()
		<-fetched
		return Committed{}, err
	}
	<-fetched
	if merr != nil {
		return Committed{}, fmt.Errorf("checkpoint %d: manifest: %w", step, merr)
	}
	sum := sha256.Sum256(mb)
	if hex.EncodeToString(sum[:]) != digest {
		return Committed{}, fmt.Errorf("checkpoint %d: manifest does not match its commit marker: %w", step, ErrCorrupt)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil || m.Step != step {
		return Committed{}, fmt.Errorf("checkpoint %d: bad manifest: %w", step, ErrCorrupt)
	}
	return Committed{Step: step, ManifestSHA256: digest, Manifest: m}, nil
}

// steps lists the steps that have objects, and which of them have markers.
func (c Store) steps(ctx context.Context) (all []int64, marked map[int64]bool, err error) {
	objs, err := c.S.List(ctx, c.prefix()+"/")
	if err != nil {
		return nil, nil, err
	}
	seen := map[int64]bool{}
	marked = map[int64]bool{}
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, c.prefix()+"/")
		name, tail, _ := strings.Cut(rest, "/")
		step, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		if !seen[step] {
			seen[step] = true
			all = append(all, step)
		}
		if tail == "COMMITTED" {
			marked[step] = true
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] > all[j] })
	return all, marked, nil
}

// Committed lists committed checkpoints, newest first. A marker whose
// manifest does not match is reported as corrupt and left out.
func (c Store) Committed(ctx context.Context) ([]Committed, error) {
	all, marked, err := c.steps(ctx)
	if err != nil {
		return nil, err
	}
	var out []Committed
	for _, step := range all {
		if !marked[step] {
			continue
		}
		cm, err := c.read(ctx, step)
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				continue
			}
			return nil, err
		}
		out = append(out, cm)
	}
	return out, nil
}

// Restore downloads a committed checkpoint into dir, verifying every
// file's size and SHA-256. dir is replaced only when all files verify.
func (c Store) Restore(ctx context.Context, step int64, dir string) (Committed, error) {
	cm, err := c.read(ctx, step)
	if err != nil {
		return Committed{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), ".restore-*")
	if err != nil {
		return Committed{}, err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // after the rename nothing is left; a leftover is a hidden .restore-* directory
	if err := c.restoreFiles(ctx, step, cm.Manifest.Files, tmp); err != nil {
		return Committed{}, fmt.Errorf("restore checkpoint %d: %w", step, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return Committed{}, fmt.Errorf("restore checkpoint %d: %w", step, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return Committed{}, err
	}
	return cm, nil
}

// restoreFiles downloads every file at once (through the store's bounded
// request slots) and checks each against the manifest. The files are not
// fsynced: a restore is redone before every start of the workload
// (run.startTraining), so one cut short by a crash is never used, and
// syncing hundreds of MiB would make the restore disk-bound.
func (c Store) restoreFiles(ctx context.Context, step int64, files []File, root string) error {
	downloads := make([]storage.FileTransfer, len(files))
	for i, f := range files {
		if strings.Contains(f.Path, "..") || path.IsAbs(f.Path) {
			return fmt.Errorf("file %q: %w", f.Path, ErrCorrupt)
		}
		dst := filepath.Join(root, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		downloads[i] = storage.FileTransfer{Key: c.stepDir(step) + "/files/" + f.Path, Path: dst, Size: f.Size, Parts: f.Parts}
	}
	got, err := storage.GetFiles(ctx, c.S, downloads)
	if err != nil {
		switch {
		case errors.Is(err, storage.ErrNotExist):
			return fmt.Errorf("a file is missing: %w: %w", err, ErrCorrupt)
		case errors.Is(err, storage.ErrSizeMismatch), errors.Is(err, storage.ErrDigestMismatch):
			return fmt.Errorf("%w: %w", err, ErrCorrupt)
		}
		return err
	}
	for i, f := range files {
		// Every byte was hashed: as one stream (g.SHA256), or range by
		// range against the manifest's part digests (g.Parts, a mismatch
		// having failed GetFiles already).
		g := got[i]
		verified := g.SHA256 == f.SHA256 || (g.SHA256 == "" && f.Parts != nil && g.Parts == f.Parts)
		if g.Size != f.Size || !verified {
			return fmt.Errorf("file %s: %d bytes with SHA-256 %s, manifest says %d bytes with %s: %w", f.Path, g.Size, g.SHA256, f.Size, f.SHA256, ErrCorrupt)
		}
	}
	return nil
}

// Skip records a checkpoint that could not be used.
type Skip struct {
	Step   int64  `json:"step"`
	Reason string `json:"reason"`
}

// RestoreLatest restores the newest committed checkpoint that verifies,
// falling back to older ones; skipped lists those that failed.
func (c Store) RestoreLatest(ctx context.Context, dir string) (Committed, []Skip, error) {
	list, err := c.Committed(ctx)
	if err != nil {
		return Committed{}, nil, err
	}
	var skipped []Skip
	for _, cm := range list {
		got, err := c.Restore(ctx, cm.Step, dir)
		if err == nil {
			return got, skipped, nil
		}
		if !errors.Is(err, ErrCorrupt) {
			return Committed{}, skipped, err
		}
		skipped = append(skipped, Skip{Step: cm.Step, Reason: err.Error()})
	}
	return Committed{}, skipped, ErrNoCheckpoint
}

// Prune keeps the newest keep committed checkpoints and deletes older
// ones, and any uncommitted leftovers older than the newest committed one.
// With fewer than keep committed checkpoints it deletes nothing committed.
func (c Store) Prune(ctx context.Context, keep int) error {
	if keep < 1 {
		keep = 1
	}
	all, marked, err := c.steps(ctx)
	if err != nil {
		return err
	}
	var newest int64 = -1
	kept := 0
	var doomed []int64
	for _, step := range all { // newest first
		switch {
		case marked[step] && kept < keep:
			kept++
			if newest < 0 {
				newest = step
			}
		case marked[step]:
			doomed = append(doomed, step)
		case newest >= 0 && step < newest:
			doomed = append(doomed, step) // an abandoned partial upload
		}
	}
	for _, step := range doomed {
		// Marker first: from here on the checkpoint no longer counts.
		if err := c.S.Delete(ctx, c.stepDir(step)+"/COMMITTED"); err != nil {
			return err
		}
		objs, err := c.S.List(ctx, c.stepDir(step)+"/")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := c.S.Delete(ctx, o.Key); err != nil {
				return err
			}
		}
	}
	return nil
}
