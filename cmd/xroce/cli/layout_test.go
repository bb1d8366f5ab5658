package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// internalDir is the import path of the packages of cmd/xroce's tools and
// of the pieces they share.
const internalDir = "github.com/xroce/xroce/cmd/xroce/internal/"

// sharedPackages are the packages under internalDir that are no tool:
// what two or more tools (or their tests) use. Any of them may be imported
// by any tool; none may import a tool.
var sharedPackages = []string{
	"base", "capture", "clitest", "device", "pktfmt", "rdmacm", "rdmacm/cmtest", "seqdiag", "statcount",
}

// TestToolsImportNoTool checks docs/tools-layout.md's rule: no package
// under cmd/xroce/internal, nor its tests, imports (directly or through
// another package) a tool package other than itself. The tool packages are
// those whose Cmd, Server or Client commands.go lists, read from its
// source; the imports are go list -test's. cli imports every tool, so it
// is the check's control: were no tool found among its imports, the check
// would check nothing. A package under internal that is neither a tool nor
// in sharedPackages fails too, so that a new one is put on one side.
func TestToolsImportNoTool(t *testing.T) {
	tools := toolPackages(t)
	if len(tools) == 0 {
		t.Fatal("commands.go lists no tool package")
	}
	pkgs := goListTest(t, "github.com/xroce/xroce/cmd/xroce/...")
	seen := map[string]bool{}
	controlled := false
	var bad []string // "package (or its tests) imports the tool package T"
	for _, p := range pkgs {
		self := p.self()
		seen[self] = true
		imp := toolImports(p, tools)
		switch {
		case self == "github.com/xroce/xroce/cmd/xroce/cli":
			controlled = controlled || len(imp) > 0
		case strings.HasPrefix(self, internalDir):
			for _, tool := range imp {
				if b := self + " (or its tests) imports the tool package " + tool; !slices.Contains(bad, b) {
					bad = append(bad, b)
				}
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	if !controlled {
		t.Errorf("no tool package found among cli's imports (it imports them all): the check sees no imports")
	}
	for tool := range tools {
		if !seen[tool] {
			t.Errorf("go list did not list the tool package %s", tool)
		}
	}
	for p := range seen {
		name, ok := strings.CutPrefix(p, internalDir)
		if ok && !tools[p] && !slices.Contains(sharedPackages, name) {
			t.Errorf("%s is neither a tool package listed in commands.go nor one of layout_test.go's sharedPackages", p)
		}
	}
}

// toolPackages returns the import paths of the packages whose commands
// commands.go's list names (as pkg.Cmd, pkg.Server or pkg.Client).
func toolPackages(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "commands.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{} // the name a file uses -> import path
	for _, is := range f.Imports {
		p, err := strconv.Unquote(is.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		name := path.Base(p)
		if is.Name != nil {
			name = is.Name.Name
		}
		imports[name] = p
	}
	var list *ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && vs.Names[0].Name == "commands" && len(vs.Values) == 1 {
			list, _ = vs.Values[0].(*ast.CompositeLit)
		}
		return list == nil
	})
	if list == nil {
		t.Fatal("commands.go: no var commands = []base.Command{...}")
	}
	tools := map[string]bool{}
	for _, e := range list.Elts {
		sel, ok := e.(*ast.SelectorExpr)
		var x *ast.Ident
		if ok {
			x, ok = sel.X.(*ast.Ident)
		}
		if !ok || !slices.Contains([]string{"Cmd", "Server", "Client"}, sel.Sel.Name) {
			t.Errorf("%s: want pkg.Cmd, pkg.Server or pkg.Client in the list", fset.Position(e.Pos()))
			continue
		}
		p, ok := imports[x.Name]
		if !ok || !strings.HasPrefix(p, internalDir) {
			t.Errorf("%s: %s is no package under %s", fset.Position(e.Pos()), x, internalDir)
			continue
		}
		tools[p] = true
	}
	return tools
}

// listedPackage is what go list -json says of a package (or of a test
// variant of one, or of a test's main package).
type listedPackage struct {
	ImportPath string
	ForTest    string
	Deps       []string
}

// self is the package a listed package is, or is a test variant of.
func (p listedPackage) self() string {
	if p.ForTest != "" {
		return p.ForTest
	}
	return strings.TrimSuffix(variantOf(p.ImportPath), ".test")
}

// variantOf strips go list's " [p.test]" from the import path of a
// package compiled for p's test.
func variantOf(importPath string) string {
	s, _, _ := strings.Cut(importPath, " ")
	return s
}

// toolImports returns the tool packages other than p's own that p depends
// on, sorted.
func toolImports(p listedPackage, tools map[string]bool) []string {
	var bad []string
	for _, d := range p.Deps {
		if d := variantOf(d); tools[d] && d != p.self() && !slices.Contains(bad, d) {
			bad = append(bad, d)
		}
	}
	sort.Strings(bad)
	return bad
}

// goListTest runs go list -test -json on pattern: the packages, their test
// variants and their tests' main packages, each with its dependencies.
func goListTest(t *testing.T, pattern string) []listedPackage {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	cmd := exec.Command(gobin, "list", "-test", "-e", "-json=ImportPath,ForTest,Deps", pattern)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}
