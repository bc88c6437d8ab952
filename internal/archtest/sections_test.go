package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sharedSectionTypes are the types of the workflow sections' schema the
// core may still name, with why: they describe something of the shared
// lifecycle that a section also carries.
var sharedSectionTypes = map[string]string{
	"GPUInfo":       "the shared verify step records the GPUs as nvidia-smi reports them (receipt.VerifyReport)",
	"CheckpointRef": "the shared bid lifecycle journals the last checkpoint an interrupted instance left (InterruptedData)",
}

// sectionTypes are the types the workflows' receipt sections are made of:
// the types of receipt.Sections' fields and, transitively, the types
// declared in internal/receipt that those are made of. Derived from the
// source, so a new section is covered without editing this test.
func sectionTypes(t *testing.T) map[string]bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", "internal", "receipt", "*.go"))
	decls := map[string]ast.Expr{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					decls[ts.Name.Name] = ts.Type
				}
			}
		}
	}
	root, ok := decls["Sections"].(*ast.StructType)
	if !ok {
		t.Fatal("internal/receipt declares no Sections struct")
	}
	out := map[string]bool{}
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || out[id.Name] {
				return true
			}
			if typ, declared := decls[id.Name]; declared {
				out[id.Name] = true
				walk(typ)
			}
			return true
		})
	}
	for _, f := range root.Fields.List {
		walk(f.Type)
	}
	if len(out) < 2 {
		t.Fatalf("receipt.Sections is made of %v: the check would check nothing", out)
	}
	return out
}

// The core names no workflow section: the train and canary sections of
// the receipt (their types and what they are made of) are declared and
// rendered in internal/receipt, filled by their workflows, and the core
// reaches them only through receipt.Sections and receipt.Part.
func TestTheCoreNamesNoWorkflowSection(t *testing.T) {
	types := sectionTypes(t)
	for name := range sharedSectionTypes {
		if !types[name] {
			t.Errorf("sharedSectionTypes lists %s, which no section is made of: remove it", name)
		}
	}
	for _, pkg := range corePackages {
		files, _ := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if len(files) == 0 {
			t.Fatalf("%s: no Go files", pkg)
		}
		var found []string
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			found = append(found, namedSectionTypes(t, path, types)...)
		}
		sort.Strings(found)
		for _, f := range found {
			t.Errorf("%s: %s: the section's workflow owns it (receipt.Part renders it)", pkg, f)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, sel := range sectionSelectors(t, path) {
				t.Errorf("%s: %s: a workflow's section is read by its workflow (run.Workflow), not by the core", pkg, sel)
			}
		}
	}
}

// sectionFields are the workflow sections' names, as fields of both the
// receipt (receipt.Sections) and the frozen spec (spec.Manifest).
var sectionFields = map[string]bool{"Train": true, "Canary": true}

// sectionSelectors lists where a Go file reads a workflow's section, of the
// receipt or of the spec (x.Train, x.Canary).
func sectionSelectors(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok && sectionFields[s.Sel.Name] {
			out = append(out, fmt.Sprintf("%s:%d reads .%s", filepath.Base(path), fset.Position(s.Pos()).Line, s.Sel.Name))
		}
		return true
	})
	return out
}

// The selector check can fail: reading a spec's train section is caught.
func TestSectionSelectorsCatchesASectionRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.go")
	src := "package run\n\nfunc f(m *Manifest) bool { return m.Train != nil || m.Test != \"\" }\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := sectionSelectors(t, path); len(got) != 1 || got[0] != "bad.go:3 reads .Train" {
		t.Fatalf("got %q, want the one read of .Train", got)
	}
}

// namedSectionTypes lists where a Go file names one of types, other than
// the shared ones, as an identifier (a type, a qualified receipt.T, an
// alias).
func namedSectionTypes(t *testing.T, path string, types map[string]bool) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && types[id.Name] {
			if _, shared := sharedSectionTypes[id.Name]; !shared {
				out = append(out, filepath.Base(path)+" names "+id.Name)
			}
		}
		return true
	})
	return out
}

// The check above can fail: a file naming a section type is caught.
func TestNamedSectionTypesCatchesASectionType(t *testing.T) {
	types := sectionTypes(t)
	for _, want := range []string{"TrainReport", "CanaryReport", "SmokeOutcome", "ResumeProof"} {
		if !types[want] {
			t.Errorf("section types %v lack %s", types, want)
		}
	}
	path := filepath.Join(t.TempDir(), "bad.go")
	src := "package run\n\nimport \"github.com/vastrun/vastrun/internal/receipt\"\n\nfunc f(r *receipt.CanaryReport) { var _ receipt.GPUInfo }\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := namedSectionTypes(t, path, types)
	if len(got) != 1 || got[0] != "bad.go names CanaryReport" {
		t.Fatalf("got %q, want the one CanaryReport (GPUInfo is shared)", got)
	}
}
