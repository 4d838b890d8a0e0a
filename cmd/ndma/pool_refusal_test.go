package main

import (
	"strconv"
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
	// Four regions of 256 KiB fill the node; two freed, not side by
	// side, leave 512 KiB free in two gaps: a region of 512 KiB is
	// refused, saying the free memory is not in one range.
	var keys [4]string
	for i := range keys {
		out, err := execute(t, "pool", "create", "--switch", addr, "--size", "256KiB", "--json")
		if err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
		k := strings.Index(out, `"key":"`)
		if k < 0 {
			t.Fatalf("region %d: no key in %q", i, out)
		}
		keys[i] = out[k+7 : k+7+strings.IndexByte(out[k+7:], '"')]
	}
	for _, i := range []int{0, 2} {
		if _, err := execute(t, "pool", "rm", strconv.Itoa(i+1), "--switch", addr, "--key", keys[i]); err != nil {
			t.Fatalf("rm region %d: %v", i+1, err)
		}
	}
	_, err = execute(t, "pool", "create", "--switch", addr, "--size", "512KiB")
	if err == nil || !strings.Contains(err.Error(), "512.0 KiB requested and 512.0 KiB free") || !strings.Contains(err.Error(), "not in one range per node") {
		t.Fatalf("a region as large as two gaps: %v", err)
	}
}
