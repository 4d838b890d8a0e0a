package bench

import (
	"context"
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
