package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestBenchMQ runs ndma bench mq against a peer's server (the targets of
// NDMA's queue start this binary's daemons, which a test binary is not:
// bench's TestRunMQProcesses runs them), as JSON and as a table, and
// checks its flag errors.
func TestBenchMQ(t *testing.T) {
	for _, bad := range [][]string{
		{"bench", "mq", "--targets", "kafka"},
		{"bench", "mq", "--record-size", "10"},
		{"bench", "mq", "--record-size", "1M"},
		{"bench", "mq", "--retain", "0"},
		{"bench", "mq", "--records", "10", "--duration", "1s"},
		{"bench", "mq", "--linger", "1ms"},
		{"bench", "mq", "--subscribers", "0"},
		{"bench", "mq", "--in-flight", "0"},
		{"bench", "mq", "--records", "-1"},
	} {
		if _, err := execute(t, bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	target := ""
	for _, p := range []struct{ target, server string }{{"nats", "nats-server"}, {"redis", "redis-server"}} {
		if _, err := exec.LookPath(p.server); err == nil {
			target = p.target
			break
		}
	}
	if target == "" {
		t.Skip("neither nats-server nor redis-server is installed")
	}
	out, err := execute(t, "bench", "mq", "--targets", target, "--records", "40", "--subscribers", "2", "--batch", "4", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var row struct {
		Target    string             `json:"target"`
		Produced  int                `json:"produced"`
		Delivered int                `json:"delivered"`
		Processes map[string]float64 `json:"server_cpu_us_per_record_each"`
	}
	if err := json.Unmarshal([]byte(out), &row); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if row.Target != target || row.Produced != 40 || row.Delivered != 80 || len(row.Processes) != 1 {
		t.Errorf("row %+v", row)
	}
	out, err = execute(t, "bench", "mq", "--targets", target, "--records", "20", "--subscribers", "1")
	if err != nil || !strings.Contains(out, "e2e p99 µs") || !strings.Contains(out, target+": 20 records produced, 20 delivered to 1 subscribers") {
		t.Fatalf("table: %v\n%s", err, out)
	}
}
