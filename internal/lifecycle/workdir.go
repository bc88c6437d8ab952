package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vastrun/vastrun/internal/workdir"
)

const (
	remoteWorkdirArchive = ".vastrun/workdir.tar.gz"
	remoteWorkdirSums    = ".vastrun/workdir.sha256"
)

// workdirOptions: the upload: extras ride along; vastrun's own state (the
// run's private key, the journal) and evidence never do, ignored or not.
func workdirOptions(e *Scope) workdir.Options {
	root := e.EvidenceRoot
	if root == "" {
		root = "vastrun-evidence" // defaultEvidence's root
	}
	exclude := []string{e.StateRoot, e.EvidenceDir, root}
	for i, x := range exclude {
		if x != "" && !filepath.IsAbs(x) {
			exclude[i] = filepath.Join(e.RepoDir, x)
		}
	}
	return workdir.Options{Extras: e.Frozen().Upload, Exclude: exclude, Limit: int64(e.Frozen().WorkdirMaxMB * (1 << 20))}
}

// checkWorkdir lists and hashes the workdir before anything is rented, so
// a tree over its limit (or outside git) fails for free.
func checkWorkdir(ctx context.Context, e *Scope) error {
	if e.Frozen().Workdir == "" {
		return nil
	}
	_, err := workdir.Collect(ctx, e.RepoDir, e.Frozen().Workdir, workdirOptions(e))
	return err
}

// syncWorkdir sends the workdir (git's files plus the upload: extras) as
// one compressed archive, unpacks it in the login directory, checks every
// file's SHA-256 there, and keeps the manifest in the evidence
// (workdir.json).
func syncWorkdir(e *Scope, c uploader) error {
	// upload has no caller context; bound the sync by the ready timeout.
	ctx, cancel := context.WithTimeout(context.Background(), e.readyDeadline())
	defer cancel()
	m, err := workdir.Collect(ctx, e.RepoDir, e.Frozen().Workdir, workdirOptions(e))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "vastrun-workdir-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) //nolint:errcheck // a scratch directory under the temp dir: a leftover costs disk, not the sync
	archive := filepath.Join(tmp, "workdir.tar.gz")
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	if err := workdir.Pack(e.RepoDir, m, f); err != nil {
		_ = f.Close() // the archive is discarded with tmp; the pack's error is the one reported
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	sums := filepath.Join(tmp, "workdir.sha256")
	if err := os.WriteFile(sums, []byte(m.Checksums()), 0o644); err != nil {
		return err
	}
	if err := c.Upload(archive, remoteWorkdirArchive); err != nil {
		return fmt.Errorf("upload workdir: %w", err)
	}
	if err := c.Upload(sums, remoteWorkdirSums); err != nil {
		return fmt.Errorf("upload workdir manifest: %w", err)
	}
	script := fmt.Sprintf("tar -xzf %s && rm -f %s && sha256sum -c --quiet %s", remoteWorkdirArchive, remoteWorkdirArchive, remoteWorkdirSums)
	if _, err := c.Output(ctx, script); err != nil {
		return fmt.Errorf("unpack workdir on the instance: %w", err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := e.Sink().WriteJSON(filepath.Join(e.EvidenceDir, "workdir.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write workdir manifest: %w", err)
	}
	e.Infof("workdir %s: %d files, %s (%s compressed), SHA-256 checked on the instance; manifest in workdir.json",
		e.Frozen().Workdir, len(m.Files), size(m.TotalBytes), size(m.CompressedBytes))
	return nil
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return strings.TrimSpace(fmt.Sprintf("%d B", n))
}
