package main

import (
	"strings"
	"testing"
)

// TestBenchHelp checks that ndma bench --help describes every benchmark,
// not only one (hidden helpers, such as the switch benchmark's raw loop,
// aside).
func TestBenchHelp(t *testing.T) {
	out, err := execute(t, "bench", "--help")
	if err != nil {
		t.Fatal(err)
	}
	long := findCmd(t, "bench").Long
	for _, sub := range findCmd(t, "bench").Commands() {
		if sub.Hidden {
			continue
		}
		if !strings.Contains(long, "\n  "+sub.Name()+" ") {
			t.Errorf("ndma bench --help does not describe %q:\n%s", sub.Name(), out)
		}
	}
	if !strings.Contains(out, long) {
		t.Errorf("ndma bench --help does not print the description:\n%s", out)
	}
}

// TestTestbedHelp checks that ndma testbed --help lists every variable
// testbed run exports, and the ones it passes on that the ranks read.
func TestTestbedHelp(t *testing.T) {
	out, err := execute(t, "testbed", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"NDMA_RANK", "NDMA_SIZE", "NDMA_SWITCH", "NDMA_JOB", "NDMA_TOKEN", "NDMA_MTU", "NDMA_JOIN_TIMEOUT", "NDMA_LIVENESS", "NDMA_HOST_ID", "NDMA_HIERARCHY"} {
		if !strings.Contains(out, v) {
			t.Errorf("ndma testbed --help does not mention %s", v)
		}
	}
}
