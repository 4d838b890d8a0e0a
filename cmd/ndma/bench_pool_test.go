package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchPool runs ndma bench pool small, as JSON and as a table, and
// checks its flag errors.
func TestBenchPool(t *testing.T) {
	out, err := execute(t, "bench", "pool", "--iters", "20", "--transfer", "512KiB", "--stripe", "16KiB", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d rows, want 6:\n%s", len(lines), out)
	}
	var ops []string
	for _, l := range lines {
		var row struct {
			Op    string  `json:"op"`
			Ratio float64 `json:"ratio"`
			Nodes int     `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		ops = append(ops, row.Op)
	}
	if got := strings.Join(ops, ","); got != "read,pool_read,pool_write,pool_read,pool_write,pool_read" {
		t.Fatalf("rows %s", got)
	}
	out, err = execute(t, "bench", "pool", "--tests", "latency", "--iters", "20", "--nodes", "1")
	if err != nil || !strings.Contains(out, "# NDMA pool READ latency") || !strings.Contains(out, "x\n") {
		t.Fatalf("table: %v\n%s", err, out)
	}
	for _, bad := range [][]string{
		{"bench", "pool", "--tests", "nope"},
		{"bench", "pool", "--size", "0"},
		{"bench", "pool", "--stripe", "100"},
		{"bench", "pool", "--nodes", "0"},
		{"bench", "pool", "--node", "127.0.0.1:1"}, // needs --switch
	} {
		if _, err := execute(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	// NDMA_MTU (set by ndma testbed run) is the default --mtu: a bad one
	// is an error, one that validates runs.
	t.Setenv("NDMA_MTU", "9k")
	if _, err := execute(t, "bench", "pool", "--tests", "latency", "--iters", "5", "--nodes", "1"); err == nil || !strings.Contains(err.Error(), "NDMA_MTU") {
		t.Errorf("NDMA_MTU=9k: %v, want an error naming NDMA_MTU", err)
	}
	t.Setenv("NDMA_MTU", "1472")
	if out, err := execute(t, "bench", "pool", "--tests", "latency", "--iters", "5", "--nodes", "1"); err != nil {
		t.Errorf("NDMA_MTU=1472: %v\n%s", err, out)
	}
}
