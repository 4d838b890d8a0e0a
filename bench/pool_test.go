package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestRunPool runs the pool benchmark small: a direct READ baseline and a
// pool ReadAt with their ratio, then a transfer through a one-node and a
// four-node region, verified byte for byte, with their ratios.
func TestRunPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows []Result
	err := RunPool(ctx, PoolConfig{Iters: 50, Transfer: 1 << 20, Stripe: 16 << 10}, func(r Result) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		op    string
		kind  Kind
		nodes int
		ratio bool
	}{
		{OpRead, Latency, 0, false}, {OpPoolRead, Latency, 0, true},
		{OpPoolWrite, Bandwidth, 1, false}, {OpPoolRead, Bandwidth, 1, false},
		{OpPoolWrite, Bandwidth, 4, true}, {OpPoolRead, Bandwidth, 4, true},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if r.Op != w.op || r.Kind != w.kind || r.Nodes != w.nodes || (r.Ratio > 0) != w.ratio {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
		if r.Kind == Latency && (r.P50 <= 0 || r.P99 < r.P50) || r.Kind == Bandwidth && r.Gbps <= 0 {
			t.Errorf("row %d: no figure: %+v", i, r)
		}
	}
	if err := RunPool(ctx, PoolConfig{Nodes: 65}, func(Result) error { return nil }); err == nil {
		t.Error("65 nodes: no error")
	}
}

// TestRunPoolProcesses runs the pool benchmark with the switch and two
// memory nodes as their own processes (the ndma binary, built here).
func TestRunPoolProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds ndma and starts its daemons")
	}
	bin := ndmaBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var rows []Result
	err := RunPool(ctx, PoolConfig{Binary: bin, Nodes: 2, Iters: 30, Transfer: 256 << 10, Stripe: 16 << 10}, func(r Result) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 || rows[0].Op != OpRead || rows[1].Op != OpPoolRead || rows[1].Ratio <= 0 || rows[5].Nodes != 2 || rows[5].Ratio <= 0 {
		t.Fatalf("rows %+v", rows)
	}
	// Nothing left running: the daemons' ports are free again.
	if out, _ := exec.Command("pgrep", "-f", bin).Output(); len(out) > 0 {
		t.Fatalf("daemons left running: %s", out)
	}
}
