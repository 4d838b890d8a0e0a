package citest

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeImports are the packages README snippets may use, by name.
var readmeImports = map[string]string{
	"errors":    "errors",
	"fmt":       "fmt",
	"os":        "os",
	"netip":     "net/netip",
	"endpoint":  "github.com/ndma/ndma/endpoint",
	"fabric":    "github.com/ndma/ndma/fabric",
	"coll":      "github.com/ndma/ndma/coll",
	"wire":      "github.com/ndma/ndma/wire",
	"ctrl":      "github.com/ndma/ndma/wire/ctrl",
	"secure":    "github.com/ndma/ndma/secure",
	"pool":      "github.com/ndma/ndma/pool",
	"kv":        "github.com/ndma/ndma/kv",
	"mq":        "github.com/ndma/ndma/mq",
	"time":      "time",
	"memnode":   "github.com/ndma/ndma/memnode",
	"transport": "github.com/ndma/ndma/transport",
}

// readmeSnippet turns one Go block of the README, a function body with
// ctx in scope that returns error, into a source file: package readme,
// the imports it names, the body in a function, and each variable it
// declares marked used (a snippet shows calls, not what is done with
// their results).
func readmeSnippet(t *testing.T, i int, body string) string {
	t.Helper()
	var imports []string
	for name, path := range readmeImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(body) {
			imports = append(imports, fmt.Sprintf("%q", path))
		}
	}
	fn := fmt.Sprintf("func snippet%d(ctx context.Context) error {\n%s\n", i, body)
	src := "package readme\n\nimport (\n\"context\"\n" + strings.Join(imports, "\n") + "\n)\n\n" + fn + "return nil\n}\n"
	f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		t.Fatalf("README Go block %d does not parse as a function body: %v\n%s", i, err, body)
	}
	var used []string
	for _, st := range f.Decls[len(f.Decls)-1].(*ast.FuncDecl).Body.List {
		if as, ok := st.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
			for _, l := range as.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
					used = append(used, id.Name)
				}
			}
		}
	}
	return "package readme\n\nimport (\n\"context\"\n" + strings.Join(imports, "\n") + "\n)\n\n" + fn +
		"_ = []any{" + strings.Join(used, ", ") + "}\nreturn nil\n}\n"
}

// TestReadmeGoCompiles compiles (go build) every Go block of README.md as
// written, against this module.
func TestReadmeGoCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)\n```go\n(.*?)\n```\n").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go blocks")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// The snippets go into a package that exists only in an overlay.
	dir, tmp := filepath.Join(abs, "internal", "citest", "readmesnippets"), t.TempDir()
	overlay := map[string]map[string]string{"Replace": {}}
	for i, b := range blocks {
		file := filepath.Join(tmp, fmt.Sprintf("snippet%d.go", i))
		if err := os.WriteFile(file, []byte(readmeSnippet(t, i, b[1])), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay["Replace"][filepath.Join(dir, filepath.Base(file))] = file
	}
	ov, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ovFile, "./internal/citest/readmesnippets")
	cmd.Dir = abs
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("README.md's Go blocks (snippetN is the Nth, from 0) do not compile: %v\n%s", err, out)
	}
}
