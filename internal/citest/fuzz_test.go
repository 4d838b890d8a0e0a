package citest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeFuzzCoversTargets fails when a fuzz target of the module is
// missing from `make fuzz` (a line `-fuzz Name ... ./dir`).
func TestMakeFuzzCoversTargets(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)`)
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			n++
			line := regexp.MustCompile(`-fuzz ` + m[1] + ` .*\./` + regexp.QuoteMeta(filepath.ToSlash(dir)) + `\n`)
			if !line.Match(mk) {
				t.Errorf("%s (%s) is not run by make fuzz", m[1], dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("found %d fuzz targets", n)
	}
}
