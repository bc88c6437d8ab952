package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkUploads judges each upload: path: it must exist and stay inside the
// repository, symlinks resolved. Without workdir: the files are copied by
// following symlinks, so a link inside an uploaded directory would ship
// whatever it points at, outside the repository or not; with workdir: a
// link travels as a link, and only the path itself is judged.
func checkUploads(in Input) []Problem {
	var ps []Problem
	root := in.RepoDir
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	for i, u := range in.Config.Upload {
		field, val := fmt.Sprintf("upload[%d]", i), fmt.Sprintf("%q", u)
		bad := func(what, fix string) { ps = append(ps, Problem{Field: field, Value: val, What: what, Fix: fix}) }
		if filepath.IsAbs(u) {
			bad("is an absolute path; upload paths are relative to the repository ("+in.RepoDir+")",
				"write it relative to the repository root, copying the file into the repository if it lives elsewhere")
			continue
		}
		if c := filepath.ToSlash(filepath.Clean(u)); c == ".." || strings.HasPrefix(c, "../") {
			bad("leaves the repository ("+in.RepoDir+"); only files inside it are uploaded",
				"copy the file into the repository and list it by its path there")
			continue
		}
		p := filepath.Join(in.RepoDir, u)
		if _, err := os.Stat(p); err != nil {
			what := "does not exist"
			if !errors.Is(err, os.ErrNotExist) {
				what = "cannot be read: " + err.Error()
			}
			bad(what+" (paths are relative to "+in.RepoDir+")", "correct the path, or remove it from upload:")
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			bad("cannot be resolved: "+err.Error(), "correct the path, or remove it from upload:")
			continue
		}
		if !within(root, real) {
			bad("resolves to "+real+", outside the repository; its contents would be uploaded",
				"copy the file into the repository instead of linking to it")
			continue
		}
		if in.Config.Workdir != "" {
			continue
		}
		if link, target := linkOutside(root, real); link != "" {
			rel, _ := filepath.Rel(real, link)
			bad(fmt.Sprintf("holds %s, a symlink to %s, outside the repository; its contents would be uploaded", filepath.Join(u, rel), target),
				"replace the link with a copy of the file, or remove it from the uploaded directory")
		}
	}
	return ps
}

// linkOutside is the first symlink under dir (a directory or not) that
// resolves outside root, or is broken, and what it resolves to.
func linkOutside(root, dir string) (link, target string) {
	// The walk's func never fails (an unreadable entry is skipped): only
	// SkipAll ends it early, which WalkDir does not report.
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		t, err := filepath.EvalSymlinks(p)
		if err != nil {
			link, target = p, "nothing (the link is broken)"
			return filepath.SkipAll
		}
		if !within(root, t) {
			link, target = p, t
			return filepath.SkipAll
		}
		return nil
	})
	return link, target
}

// within reports whether p is root or under it (both already resolved).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
