package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestDemo runs the demo and checks that every row verified.
func TestDemo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var buf bytes.Buffer
	if err := runDemo(context.Background(), &buf, false); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	out := buf.String()
	for _, s := range []string{"OPERATION", "vector max i64", "read, bad key", "checks passed"} {
		if !strings.Contains(out, s) {
			t.Errorf("demo output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("demo reports a failure:\n%s", out)
	}
}

// TestDemoJSON checks that the --json output is JSON Lines of passing
// rows covering every operation.
func TestDemoJSON(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var buf bytes.Buffer
	if err := runDemo(context.Background(), &buf, true); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	ops := make(map[string]bool)
	for line := range strings.Lines(buf.String()) {
		var row demoRow
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if !row.OK || row.Size <= 0 || row.Op == "" {
			t.Errorf("row %+v", row)
		}
		ops[strings.Fields(row.Op)[0]] = true
	}
	for _, op := range []string{"write", "read", "cas", "fadd", "vector", "read,", "write,", "fadd,"} {
		if !ops[op] {
			t.Errorf("no %q row in %v", op, ops)
		}
	}
}

// TestDemoCommand runs the demo through the command line.
func TestDemoCommand(t *testing.T) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs([]string{"demo", "--json"})
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetArgs(nil) })
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n < 20 {
		t.Fatalf("%d rows:\n%s", n, out.String())
	}
}
