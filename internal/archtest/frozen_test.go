package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// configReaders are the only lifecycle functions that may read the live
// configuration (Deps.Config). Everything else, every step after the
// freeze and every step of a resumed run, reads the frozen spec
// (e.frozen(), e.trainSpec(), e.canarySpec()), so a vastrun.yaml edited
// after the freeze cannot change a run (issue 9, Deliver 2).
var configReaders = map[string]string{
	"Begin":        "the label's expiry is set before the run id, and so the spec, exists",
	"draft":        "builds the spec from the configuration (spec.Build): the one read of the step inputs",
	"evidenceBase": "expands evidence.uri for draft, which freezes the result",
	"escalate":     "alert.webhook says where to shout about an unconfirmed destroy; it may hold a token, so it is never frozen",
}

// corePackages hold the lifecycle's shared steps; workflowPackages the
// workflows' own, which never touch Engine.Config at all (nor import
// internal/config: layout pins that).
var (
	corePackages     = []string{"internal/lifecycle"}
	workflowPackages = []string{"internal/workflow/ci", "internal/workflow/canary", "internal/workflow/train"}
)

func TestWorkflowsNeverTouchTheConfig(t *testing.T) {
	for _, pkg := range workflowPackages {
		files, _ := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if len(files) == 0 {
			t.Fatalf("%s: no Go files", pkg)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Config" {
					t.Errorf("%s/%s: reads .Config: a workflow reads the frozen spec (Engine.Frozen)", pkg, filepath.Base(path))
				}
				return true
			})
		}
	}
}

func TestStepsNeverReadTheLiveConfig(t *testing.T) {
	for _, pkg := range corePackages {
		dir := filepath.Join("..", "..", pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", pkg, err)
		}
		seen := map[string]bool{}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				recv := ""
				if fn.Recv != nil && len(fn.Recv.List) == 1 && len(fn.Recv.List[0].Names) == 1 {
					recv = fn.Recv.List[0].Names[0].Name
				}
				// A step's function takes the scope as a parameter.
				for _, p := range fn.Type.Params.List {
					if st, ok := p.Type.(*ast.StarExpr); ok && len(p.Names) == 1 {
						if id, ok := st.X.(*ast.Ident); ok && id.Name == "Scope" {
							recv = p.Names[0].Name
						}
					}
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "Config" {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == recv {
						seen[fn.Name.Name] = true
						if _, ok := configReaders[fn.Name.Name]; !ok {
							t.Errorf("%s: %s reads the live configuration (%s.Config): read the frozen spec instead (e.frozen()), or add it to configReaders with the reason", filepath.Base(path), fn.Name.Name, recv)
						}
					}
					return true
				})
			}
		}
		// The allow list shrinks with the code: an entry nothing uses goes.
		var stale []string
		for name := range configReaders {
			if !seen[name] {
				stale = append(stale, name)
			}
		}
		sort.Strings(stale)
		if len(stale) > 0 && pkg == corePackages[0] {
			t.Errorf("configReaders lists %v, which no longer read the configuration: remove them", stale)
		}
	}
}

// The core names no workflow: no workflow's name appears in its code
// (struct tags aside), so nothing in it can branch on one; what differs
// between workflows is a method of run.Workflow.
func TestTheCoreNamesNoWorkflow(t *testing.T) {
	names := map[string]bool{`"ci"`: true, `"up"`: true, `"canary"`: true, `"train"`: true}
	for _, pkg := range corePackages {
		files, _ := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if lit, ok := n.(*ast.BasicLit); ok && names[lit.Value] {
						t.Errorf("%s: %s names the workflow %s: make the difference a method of run.Workflow", filepath.Base(path), fn.Name.Name, lit.Value)
					}
					return true
				})
			}
		}
	}
}
