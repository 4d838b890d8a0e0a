package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchColl runs a tiny ndma bench coll and checks the JSON rows.
func TestBenchColl(t *testing.T) {
	var out bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetArgs([]string{"bench", "coll", "--op", "allreduce", "--algo", "innet,ring", "--ranks", "3", "--sizes", "8,4K", "--iters", "3", "--json"})
	defer rootCmd.SetArgs(nil)
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d rows:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"op", "algo", "ranks", "size", "avg_us", "min_us", "max_us", "iters"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("row lacks %q: %s", k, l)
			}
		}
		if m["op"] != "allreduce" || m["ranks"].(float64) != 3 || m["avg_us"].(float64) <= 0 || m["min_us"].(float64) > m["max_us"].(float64) {
			t.Fatalf("bad row %s", l)
		}
	}
	rootCmd.SetArgs([]string{"bench", "coll", "--op", "gather", "--algo", "innet"})
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--algo") {
		t.Fatalf("gather has no innet: %v", err)
	}
}
