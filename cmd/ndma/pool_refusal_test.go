package main

import (
	"strings"
	"testing"
)

// TestPoolCreateRefusals: a region the pool cannot hold is refused with
// what is short, in words a user can act on: too few memory nodes for
// the copies asked for, or not enough free memory.
func TestPoolCreateRefusals(t *testing.T) {
	addr, _, _ := startPool(t, 1, 1<<20)
	waitAlive(t, addr, 1)
	_, err := execute(t, "pool", "create", "--switch", addr, "--size", "64KiB", "--replicas", "2")
	if err == nil || !strings.Contains(err.Error(), "needs 2 memory nodes") || !strings.Contains(err.Error(), "1 are alive") {
		t.Fatalf("two copies on one memory node: %v", err)
	}
	_, err = execute(t, "pool", "create", "--switch", addr, "--size", "4MiB")
	if err == nil || !strings.Contains(err.Error(), "pool full: 4.0 MiB requested, 1.0 MiB free") {
		t.Fatalf("a region larger than the pool: %v", err)
	}
}
