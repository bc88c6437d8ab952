package preflight

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vastrun/vastrun/internal/config"
)

func parse(t *testing.T, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("image: r@sha256:" + strings.Repeat("a", 64) + "\ntest: t\nbudget: {max_spend: 1}\n" + extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestUploadsStayInsideTheRepository(t *testing.T) {
	top := t.TempDir()
	repo, outside := filepath.Join(top, "repo"), filepath.Join(top, "outside-secret.txt")
	for _, d := range []string{"repo/data", "repo/tree", "repo/leaky"} {
		os.MkdirAll(filepath.Join(top, d), 0o755)
	}
	os.WriteFile(outside, []byte("secret"), 0o600)
	os.WriteFile(filepath.Join(repo, "data", "a.csv"), nil, 0o644)
	os.WriteFile(filepath.Join(repo, "tree", "b.txt"), nil, 0o644)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../outside-secret.txt", filepath.Join(repo, "out-link")))
	must(os.Symlink("data/a.csv", filepath.Join(repo, "in-link")))
	must(os.Symlink("b.txt", filepath.Join(repo, "tree", "in-tree-link")))
	must(os.Symlink(outside, filepath.Join(repo, "leaky", "key")))
	must(os.Symlink(top, filepath.Join(repo, "up-dir")))

	for _, c := range []struct {
		upload, want string // want "": accepted
	}{
		{"data/a.csv", ""},
		{"data", ""},
		{"./data/../data/a.csv", ""},
		{"in-link", ""},
		{"tree", ""},
		{"../outside-secret.txt", "leaves the repository"},
		{"..", "leaves the repository"},
		{outside, "is an absolute path"},
		{"out-link", "resolves to " + outside + ", outside the repository"},
		{"up-dir", "outside the repository"},
		{"up-dir/repo/data/a.csv", ""}, // a detour that ends inside
		{"leaky", "holds leaky/key, a symlink to " + outside},
	} {
		in := Input{Config: parse(t, "upload: ["+c.upload+"]\n"), RepoDir: repo, Getenv: func(string) string { return "" }}
		ps := checkUploads(in)
		switch {
		case c.want == "" && len(ps) > 0:
			t.Errorf("%s: refused: %v", c.upload, ps)
		case c.want != "" && (len(ps) != 1 || !strings.Contains(ps[0].What, c.want) || ps[0].Fix == "" || ps[0].Field != "upload[0]"):
			t.Errorf("%s: got %v, want %q with a fix", c.upload, ps, c.want)
		}
	}
	// With workdir: a link inside an uploaded directory travels as a link.
	in := Input{Config: parse(t, "workdir: .\nupload: [leaky]\n"), RepoDir: repo}
	if ps := checkUploads(in); len(ps) > 0 {
		t.Errorf("workdir: a link inside the directory refused: %v", ps)
	}
}

func TestWorkdirOverItsLimitIsAProblemWithAFix(t *testing.T) {
	repo := t.TempDir()
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	os.WriteFile(filepath.Join(repo, "big.bin"), make([]byte, 2048), 0o644)
	os.MkdirAll(filepath.Join(repo, ".vastrun"), 0o700)
	os.WriteFile(filepath.Join(repo, ".vastrun", "huge"), make([]byte, 1<<20), 0o600) // vastrun's state: never counted
	mb := 2048.0 / (1 << 20)
	for _, c := range []struct {
		maxMB float64
		want  string
	}{{mb, ""}, {mb - 1e-9, "workdir is larger than its limit"}} {
		in := Input{Config: parse(t, "workdir: .\n"), RepoDir: repo}
		in.Config.WorkdirMaxMB = c.maxMB
		ps := checkWorkdir(in)
		switch {
		case c.want == "" && len(ps) > 0:
			t.Errorf("%g MB: refused: %v", c.maxMB, ps)
		case c.want != "" && (len(ps) != 1 || !strings.Contains(ps[0].What, c.want) || !strings.Contains(ps[0].Fix, "workdir_max_mb")):
			t.Errorf("%g MB: got %v", c.maxMB, ps)
		}
	}
	in := Input{Config: parse(t, "workdir: .\n"), RepoDir: t.TempDir()}
	if ps := checkWorkdir(in); len(ps) != 1 || !strings.Contains(ps[0].What, "not in a git work tree") {
		t.Errorf("outside git: %v", ps)
	}
}
