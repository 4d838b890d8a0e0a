// Package citest checks the test command itself: that `make test` runs
// every test the race detector makes skip or meaningless.
package citest

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the module root, relative to this package's directory.
const root = "../.."

// makeVar returns the value of the Makefile variable name (one line,
// `NAME = value`), with make's `$$` unescaped.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	for line := range strings.SplitSeq(makefile, "\n") {
		if v, ok := strings.CutPrefix(line, name+" = "); ok {
			return strings.ReplaceAll(strings.TrimSpace(v), "$$", "$")
		}
	}
	t.Fatalf("Makefile defines no %s", name)
	return ""
}

// raceOnlyTests returns, as "dir.TestName", every test function in the
// module that the race detector skips or shrinks (it reads raceEnabled,
// or its file builds only without the race tag) or that counts
// allocations (testing.AllocsPerRun), whose real figure only a run
// without the detector gives.
func raceOnlyTests(t *testing.T) []string {
	t.Helper()
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		noRaceFile := false
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if expr, err := constraint.Parse(c.Text); err == nil {
					withRace := expr.Eval(func(tag string) bool { return tag == "race" || tag == "linux" })
					without := expr.Eval(func(tag string) bool { return tag == "linux" })
					noRaceFile = noRaceFile || without && !withRace
				}
			}
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			hit := noRaceFile
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					hit = hit || n.Name == "raceEnabled"
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "testing" && n.Sel.Name == "AllocsPerRun" {
						hit = true
					}
				}
				return !hit
			})
			if hit {
				found = append(found, dir+"."+fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestNoRaceCoversRaceSkips: the Makefile's norace pass (NORACE_TESTS in
// NORACE_PKGS) selects every test that skips, shrinks or counts
// allocations under the race detector, so that CI checks each of them
// somewhere.
func TestNoRaceCoversRaceSkips(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	run, err := regexp.Compile(makeVar(t, mk, "NORACE_TESTS"))
	if err != nil {
		t.Fatalf("NORACE_TESTS: %v", err)
	}
	var pkgs []string
	for p := range strings.FieldsSeq(makeVar(t, mk, "NORACE_PKGS")) {
		pkgs = append(pkgs, filepath.Clean(p))
	}
	tests := raceOnlyTests(t)
	if len(tests) == 0 {
		t.Fatal("found no test that depends on the race detector; the scan is broken")
	}
	for _, dt := range tests {
		dir, name, _ := strings.Cut(dt, ".")
		if !run.MatchString(name) {
			t.Errorf("%s (%s) skips, shrinks or counts allocations under -race but NORACE_TESTS does not select it", name, dir)
		}
		if !slices.Contains(pkgs, dir) {
			t.Errorf("%s is in %s, which NORACE_PKGS does not list", name, dir)
		}
	}
	t.Logf("norace pass covers %d tests: %v", len(tests), tests)
}
