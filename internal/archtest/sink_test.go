package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// evidencePackages produce what a person or another program reads:
// evidence, run state, journals, receipts, reports, CI files, team state.
// They write files only through redact.Sink (or a redact.File it opens),
// so masking is a property of the one writer, never a step each caller
// must remember (issue 26: the canary's local result was copied raw).
var evidencePackages = []string{
	"internal/cienv", "internal/cli", "internal/journal", "internal/lifecycle", "internal/receipt",
	"internal/report", "internal/team", "internal/teamstate",
	"internal/workflow/ci", "internal/workflow/canary", "internal/workflow/train",
}

// rawWriters are the functions of those packages that may open a file for
// writing themselves (package/file.go:Func, or Type.Method), each with why.
var rawWriters = map[string]string{
	"internal/journal/journal.go:Open":          "the journal keeps one locked, fsync'd handle for the life of the run; every record's data is masked by its Redactor (SetRedactor) before the handle, or the mirror, sees it",
	"internal/teamstate/local.go:Local.write":   "the file:// store of team state, twin of the S3 backend: it keeps the bytes it is handed, which are masked above it (the journal masks every record before its mirror sees it)",
	"internal/teamstate/local.go:Local.locked":  "the store's lock file: only flock'd, never written",
	"internal/lifecycle/workdir.go:syncWorkdir": "the workdir archive (the repository's own files, for the instance; compressed bytes that masking would corrupt) and its checksums, in a private temporary directory removed after the upload",
	"internal/cli/simserve.go:runSimServe":      "the simulator's ready file hands the made-up key of a local simulator to the harness that started it: that key is its content",
}

// rawWrite is one place a file is written around the sink.
type rawWrite struct {
	where, fn, what string
}

// rawFileWrites finds, in the non-test Go files of dir, every call that
// writes a file directly: os.WriteFile, os.Create, os.CreateTemp,
// os.OpenFile with a write flag, and io.Copy/CopyN/CopyBuffer into a file
// (os.Stdout, os.Stderr, or a variable of type *os.File or one set from
// an os call).
func rawFileWrites(t *testing.T, dir string) []rawWrite {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []rawWrite
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				typ := fn.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			files := fileVars(fn)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				pkg, sel := selector(call.Fun)
				what := ""
				switch {
				case pkg == "os" && (sel == "WriteFile" || sel == "Create" || sel == "CreateTemp"):
					what = "os." + sel
				case pkg == "os" && sel == "OpenFile" && len(call.Args) >= 2 && writeFlag(call.Args[1]):
					what = "os.OpenFile for writing"
				case pkg == "io" && (sel == "Copy" || sel == "CopyN" || sel == "CopyBuffer") && len(call.Args) > 0 && intoFile(call.Args[0], files):
					what = "io." + sel + " into a file"
				}
				if what != "" {
					out = append(out, rawWrite{where: fset.Position(call.Pos()).String(), fn: filepath.Base(path) + ":" + name, what: what})
				}
				return true
			})
		}
	}
	return out
}

func selector(e ast.Expr) (pkg, name string) {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	if id, ok := s.X.(*ast.Ident); ok {
		return id.Name, s.Sel.Name
	}
	return "", s.Sel.Name
}

// writeFlag reports whether an os.OpenFile flag expression can write.
func writeFlag(e ast.Expr) bool {
	w := false
	ast.Inspect(e, func(n ast.Node) bool {
		if pkg, name := selector(nodeExpr(n)); pkg == "os" {
			switch name {
			case "O_WRONLY", "O_RDWR", "O_APPEND", "O_CREATE", "O_TRUNC":
				w = true
			}
		}
		return true
	})
	return w
}

func nodeExpr(n ast.Node) ast.Expr {
	e, _ := n.(ast.Expr)
	return e
}

// fileVars are the names fn declares as *os.File (parameters, vars) or
// sets from an os call (os.Open, os.NewFile, …).
func fileVars(fn *ast.FuncDecl) map[string]bool {
	vars := map[string]bool{}
	isFileType := func(e ast.Expr) bool {
		s, ok := e.(*ast.StarExpr)
		if !ok {
			return false
		}
		pkg, name := selector(s.X)
		return pkg == "os" && name == "File"
	}
	for _, fl := range []*ast.FieldList{fn.Type.Params, fn.Recv} {
		if fl == nil {
			continue
		}
		for _, f := range fl.List {
			if isFileType(f.Type) {
				for _, n := range f.Names {
					vars[n.Name] = true
				}
			}
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.ValueSpec:
			if s.Type != nil && isFileType(s.Type) {
				for _, n := range s.Names {
					vars[n.Name] = true
				}
			}
		case *ast.AssignStmt:
			if len(s.Rhs) == 1 {
				if call, ok := s.Rhs[0].(*ast.CallExpr); ok {
					if pkg, _ := selector(call.Fun); pkg == "os" && len(s.Lhs) > 0 {
						if id, ok := s.Lhs[0].(*ast.Ident); ok {
							vars[id.Name] = true
						}
					}
				}
			}
		}
		return true
	})
	return vars
}

func intoFile(dst ast.Expr, files map[string]bool) bool {
	if pkg, name := selector(dst); pkg == "os" && (name == "Stdout" || name == "Stderr") {
		return true
	}
	id, ok := dst.(*ast.Ident)
	return ok && files[id.Name]
}

// TestEvidenceIsWrittenOnlyThroughTheSink: the evidence-producing packages
// open no file for writing but through redact.Sink, except the writers
// listed (each with its reason), and every listed exception is still in
// use.
func TestEvidenceIsWrittenOnlyThroughTheSink(t *testing.T) {
	used := map[string]bool{}
	for _, pkg := range evidencePackages {
		dir := filepath.Join("..", "..", pkg)
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s: no such package: update evidencePackages", pkg)
			continue
		}
		for _, w := range rawFileWrites(t, dir) {
			key := pkg + "/" + w.fn
			if _, ok := rawWriters[key]; ok {
				used[key] = true
				continue
			}
			t.Errorf("%s: %s in %s writes a file around the sink: write it through redact.Sink (lifecycle: e.Sink(); CLI: f.sink(cfg)), or add %s to rawWriters with the reason it cannot be", w.where, w.what, key, key)
		}
	}
	var stale []string
	for key := range rawWriters {
		if !used[key] {
			stale = append(stale, key)
		}
	}
	sort.Strings(stale)
	for _, key := range stale {
		t.Errorf("rawWriters lists %s, which writes no file any more: remove it", key)
	}
}

// TestSinkRuleCatchesAPlantedWriter plants raw writers in a package of its
// own and checks the rule finds each, and not a read.
func TestSinkRuleCatchesAPlantedWriter(t *testing.T) {
	dir := t.TempDir()
	src := `package lifecycle

import (
	"io"
	"os"
)

func planted(b []byte, r io.Reader, log *os.File) {
	os.WriteFile("receipt.json", b, 0o644)
	f, _ := os.OpenFile("test.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	io.Copy(f, r)
	io.Copy(log, r)
	g, _ := os.OpenFile("result.json", os.O_RDONLY, 0)
	io.Copy(io.Discard, g)
}
`
	if err := os.WriteFile(filepath.Join(dir, "planted.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range rawFileWrites(t, dir) {
		got = append(got, w.fn+" "+w.what)
	}
	want := []string{"planted.go:planted os.WriteFile", "planted.go:planted os.OpenFile for writing", "planted.go:planted io.Copy into a file", "planted.go:planted io.Copy into a file"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
