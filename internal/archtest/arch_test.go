// Package archtest pins the import rules of design.md so that layering
// cannot erode silently.
package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/vastrun/vastrun/"

// imports maps each package directory (relative to the repo root) to the
// imports of its non-test files.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	root := filepath.Join("..", "..")
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[rel] = append(out[rel], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 5 {
		t.Fatalf("found only %d packages; is the walk rooted right?", len(out))
	}
	return out
}

func TestOnlyCLIImportsCobra(t *testing.T) {
	for pkg, imps := range imports(t) {
		for _, p := range imps {
			if strings.HasPrefix(p, "github.com/spf13/") && pkg != "internal/cli" {
				t.Errorf("%s imports %s; only internal/cli may use cobra", pkg, p)
			}
		}
	}
}

func TestProviderImportsNothingOfOurs(t *testing.T) {
	for _, p := range imports(t)["internal/provider"] {
		if strings.HasPrefix(p, module) {
			t.Errorf("internal/provider imports %s; it must import nothing of ours", p)
		}
		if p == "net/http" {
			t.Errorf("internal/provider imports net/http; it holds no HTTP")
		}
	}
}

func TestClientAndSimulatorAreIndependent(t *testing.T) {
	all := imports(t)
	for _, p := range all["internal/provider/vast"] {
		if strings.HasPrefix(p, module+"internal/provider/sim") {
			t.Errorf("the real client imports the simulator (%s)", p)
		}
	}
	for _, p := range all["internal/provider/sim"] {
		if strings.HasPrefix(p, module+"internal/provider/vast") {
			t.Errorf("the simulator imports the real client (%s): it must be written from the wire notes", p)
		}
	}
}
