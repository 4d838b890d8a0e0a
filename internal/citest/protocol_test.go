package citest

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// codeConsts returns the exported constants of the given types declared
// in the Go files of dir (tests excluded), as type → NAME → value, NAME
// being the constant's name without its prefix, upper-cased (OpFetchAdd:
// FETCHADD). A constant of a wanted type whose value is not a plain
// integer expression fails the test rather than being skipped.
func codeConsts(t *testing.T, dir string, types map[string]string) map[string]map[string]uint64 {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]map[string]uint64)
	vals := make(map[string]constant.Value) // every constant seen, for references
	var eval func(e ast.Expr) (constant.Value, bool)
	eval = func(e ast.Expr) (constant.Value, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			v := constant.MakeFromLiteral(e.Value, e.Kind, 0)
			return v, v.Kind() == constant.Int
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.Ident:
			v, ok := vals[e.Name]
			return v, ok
		case *ast.BinaryExpr:
			x, ok1 := eval(e.X)
			y, ok2 := eval(e.Y)
			if !ok1 || !ok2 {
				return nil, false
			}
			if e.Op == token.SHL || e.Op == token.SHR {
				n, _ := constant.Uint64Val(y)
				return constant.Shift(x, e.Op, uint(n)), true
			}
			return constant.BinaryOp(x, e.Op, y), true
		}
		return nil, false
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				typ := ""
				if id, ok := vs.Type.(*ast.Ident); ok {
					typ = id.Name
				}
				for i, name := range vs.Names {
					var v constant.Value
					ok := i < len(vs.Values)
					if ok {
						v, ok = eval(vs.Values[i])
					}
					if ok {
						vals[name.Name] = v
					}
					prefix, want := types[typ]
					if !want || !name.IsExported() {
						continue
					}
					if !ok {
						t.Errorf("%s: constant %s: value is not a plain integer expression", dir, name.Name)
						continue
					}
					n, _ := constant.Uint64Val(v)
					if out[typ] == nil {
						out[typ] = make(map[string]uint64)
					}
					out[typ][strings.ToUpper(strings.TrimPrefix(name.Name, prefix))] = n
				}
			}
		}
	}
	return out
}

// docSection returns the text of PROTOCOL.md from the heading to the next
// heading of the same or a higher level.
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("PROTOCOL.md has no heading %q", heading)
	}
	rest := doc[i+len(heading)+2:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	for j := 0; j < len(rest); {
		k := strings.Index(rest[j:], "\n#")
		if k < 0 {
			break
		}
		line := rest[j+k+1:]
		if h := strings.TrimLeft(line, "#"); len(line)-len(h) <= len(level)-1 && strings.HasPrefix(h, " ") {
			return rest[:j+k]
		}
		j += k + 2
	}
	return rest
}

// docPairs returns the (value, NAME) pairs re finds in text; re's first
// group is the value (decimal or 0x hex), its second the name. NAME is
// upper-cased without underscores (OUT_OF_BOUNDS: OUTOFBOUNDS).
func docPairs(t *testing.T, what, text string, re *regexp.Regexp, valueGroup, nameGroup int) map[string]uint64 {
	t.Helper()
	m := make(map[string]uint64)
	for _, g := range re.FindAllStringSubmatch(text, -1) {
		v, err := strconv.ParseUint(g[valueGroup], 0, 8)
		if err != nil {
			t.Fatalf("PROTOCOL.md %s: value %q: %v", what, g[valueGroup], err)
		}
		name := strings.ToUpper(strings.ReplaceAll(g[nameGroup], "_", ""))
		if old, ok := m[name]; ok && old != v {
			t.Errorf("PROTOCOL.md %s: %s is both %d and %d", what, name, old, v)
		}
		m[name] = v
	}
	if len(m) == 0 {
		t.Fatalf("PROTOCOL.md %s: no entries found", what)
	}
	return m
}

// compareConsts checks doc against code both ways: every documented name
// exists in the code with the same value, and every constant of the code
// is documented. Names in skip (zero values meaning none) are not
// expected in the doc.
func compareConsts(t *testing.T, what string, doc, code map[string]uint64, skip ...string) {
	t.Helper()
	for name, v := range doc {
		cv, ok := code[name]
		switch {
		case !ok:
			t.Errorf("%s: PROTOCOL.md documents %s = %d; the code has no such constant", what, name, v)
		case cv != v:
			t.Errorf("%s: PROTOCOL.md says %s = %d; the code says %d", what, name, v, cv)
		}
	}
	for name, v := range code {
		if _, ok := doc[name]; !ok && !slices.Contains(skip, name) {
			t.Errorf("%s: the code defines %s = %d; PROTOCOL.md does not document it", what, name, v)
		}
	}
}

// TestProtocolDocConstants checks the constant tables of docs/PROTOCOL.md
// (opcodes, delivery modes, header flags, status codes, dtypes, ALU ops,
// chain ops and control message types) against packages wire and
// wire/ctrl, both ways.
func TestProtocolDocConstants(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	wire := codeConsts(t, "wire", map[string]string{
		"Opcode": "Op", "Mode": "Mode", "Flags": "Flag", "Status": "Status", "Dtype": "Dtype", "Alu": "Alu", "ChainOp": "Chain",
	})
	ctrl := codeConsts(t, "wire/ctrl", map[string]string{"Type": ""})

	row := func(valueFirst bool) *regexp.Regexp {
		if valueFirst {
			return regexp.MustCompile("(?m)^[|] (0x[0-9a-f]+|[0-9]+) [|] ([A-Za-z_]+) [|]")
		}
		return regexp.MustCompile("(?m)^[|] ([A-Z_]+) [|] ([0-9]+) [|]")
	}
	compareConsts(t, "opcodes", docPairs(t, "Opcodes", docSection(t, doc, "### Opcodes"), row(true), 1, 2), wire["Opcode"], "INVALID")
	compareConsts(t, "modes", docPairs(t, "Delivery modes", docSection(t, doc, "### Delivery modes"), row(true), 1, 2), wire["Mode"])
	compareConsts(t, "status codes", docPairs(t, "Status codes", docSection(t, doc, "### Status codes"), row(true), 1, 2), wire["Status"])
	compareConsts(t, "chain ops", docPairs(t, "Chained instructions", docSection(t, doc, "### Chained instructions"), row(false), 2, 1), wire["ChainOp"])

	// Flags: "bit N `NAME`" in the Flags row of the header's field table.
	header := docSection(t, doc, "## Fixed header (96 bytes)")
	flagsRow := regexp.MustCompile("(?m)^[|] Flags [|] .*$").FindString(header)
	flags := docPairs(t, "header Flags", flagsRow, regexp.MustCompile("bit ([0-7]) `([A-Z]+)`"), 1, 2)
	for name, bit := range flags {
		flags[name] = 1 << bit
	}
	compareConsts(t, "header flags", flags, wire["Flags"])

	// Dtype and Alu: "Dtype: `1` f32, ... Alu: `1` ADD, ..." after the opcodes.
	ops := docSection(t, doc, "### Opcodes")
	dt := regexp.MustCompile("(?s)Dtype: (.*?)[.] Alu:").FindStringSubmatch(ops)
	alu := regexp.MustCompile("(?s)Alu: (.*?)[.]").FindStringSubmatch(ops)
	if dt == nil || alu == nil {
		t.Fatal("PROTOCOL.md: no Dtype or Alu list after the opcodes")
	}
	pair := regexp.MustCompile("`([0-9]+)` ([A-Za-z0-9]+)")
	compareConsts(t, "dtypes", docPairs(t, "Dtype", dt[1], pair, 1, 2), wire["Dtype"], "NONE")
	compareConsts(t, "ALU ops", docPairs(t, "Alu", alu[1], pair, 1, 2), wire["Alu"], "NONE")

	// Control types: the Fields by type table, and any type the Type row
	// of the control message layout names.
	ctrlDoc := docPairs(t, "Fields by type", docSection(t, doc, "### Fields by type"), regexp.MustCompile("(?m)^[|] ([0-9]+) ([A-Z]+) [|]"), 1, 2)
	compareConsts(t, "control types", ctrlDoc, ctrl["Type"])
	typeRow := regexp.MustCompile("(?m)^[|] Type [|] .*$").FindString(docSection(t, doc, "## Control messages (forwarding node)"))
	// It says which values are valid: it must reach the highest type.
	var named []uint64
	for _, g := range regexp.MustCompile("`([0-9]+)` ([A-Z]+)").FindAllStringSubmatch(typeRow, -1) {
		if v := fmt.Sprint(ctrlDoc[g[2]]); v != g[1] {
			t.Errorf("PROTOCOL.md control message Type row: %s is %s, Fields by type says %s", g[2], g[1], v)
		}
		n, _ := strconv.ParseUint(g[1], 10, 8)
		named = append(named, n)
	}
	var highest uint64
	for _, v := range ctrl["Type"] {
		highest = max(highest, v)
	}
	if len(named) > 0 && slices.Max(named) != highest {
		t.Errorf("PROTOCOL.md control message Type row names types up to %d; the code's go up to %d:\n%s", slices.Max(named), highest, typeRow)
	}
}
