package preflight

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/vastrun/vastrun/internal/workdir"
)

// checkWorkdir sizes the workdir the way the run will pack it, so that a
// tree over workdir_max_mb (or outside git) is refused before anything is
// created. It excludes what the run excludes that is known now (the state
// dir and the evidence root); the run's own --evidence-dir does not exist
// yet, or holds a few small files.
func checkWorkdir(in Input) []Problem {
	c := in.Config
	if c.Workdir == "" {
		return nil
	}
	root := c.EvidenceDir
	if root == "" {
		root = "vastrun-evidence" // the engine's default evidence root
	}
	var exclude []string
	for _, x := range []string{c.StateDir, root} {
		if x != "" && !filepath.IsAbs(x) {
			x = filepath.Join(in.RepoDir, x)
		}
		exclude = append(exclude, x)
	}
	limit := int64(c.WorkdirMaxMB * (1 << 20))
	_, err := workdir.Measure(context.Background(), in.RepoDir, c.Workdir, workdir.Options{Extras: c.Upload, Exclude: exclude, Limit: limit})
	p := Problem{Field: "workdir", Value: fmt.Sprintf("%q", c.Workdir)}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, workdir.ErrTooLarge):
		p.What = err.Error()
		p.Fix = fmt.Sprintf("raise workdir_max_mb (now %g), or keep large files out of the work tree with .gitignore", c.WorkdirMaxMB)
	case errors.Is(err, workdir.ErrNotGit):
		p.What = err.Error()
		p.Fix = "run vastrun inside the repository's git work tree, or drop workdir: and list the files in upload:"
	default:
		p.What = "cannot be read: " + err.Error()
		p.Fix = "make the files under it readable, or drop workdir: and list the files in upload:"
	}
	return []Problem{p}
}
