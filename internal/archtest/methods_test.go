package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods is the most methods one type of the core or of a workflow
// may have: a type past it is a step hiding in an object every feature
// lands on (issue 24: run.Engine had grown to 113).
const maxMethods = 30

// methodCounts counts the methods of each type declared in the non-test
// files under dir: "pkgdir.Type" → methods.
func methodCounts(t *testing.T, dir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if st, ok := typ.(*ast.StarExpr); ok {
				typ = st.X
			}
			if ix, ok := typ.(*ast.IndexExpr); ok {
				typ = ix.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				out[filepath.ToSlash(filepath.Dir(path))+"."+id.Name]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNoCoreOrWorkflowTypeOverThirtyMethods(t *testing.T) {
	root := filepath.Join("..", "..", "internal")
	total := 0
	for _, dir := range []string{"lifecycle", "workflow"} {
		for typ, n := range methodCounts(t, filepath.Join(root, dir)) {
			total += n
			if n > maxMethods {
				t.Errorf("%s has %d methods (at most %d): take the step it holds out into a type of its own", strings.TrimPrefix(typ, "../../"), n, maxMethods)
			}
		}
	}
	if total < 50 {
		t.Fatalf("counted only %d methods in the core and the workflows; is the walk rooted right?", total)
	}
}
