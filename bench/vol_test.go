package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunVol runs a few points on an in-process fabric on loopback: every
// point gives a row with I/Os and no error, controller rows their ratios.
func TestRunVol(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fabric on loopback")
	}
	cfg := VolConfig{Patterns: []string{"randwrite", "randread", "seqwrite"}, QDs: []int{1, 4}, Duration: 200 * time.Millisecond,
		VolSize: 16 << 20, Extent: 1 << 20, SeqBS: 256 << 10}
	var rows []VolResult
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := RunVol(ctx, cfg, nil, func(r VolResult) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3*2*2 {
		t.Fatalf("%d rows, want 12", len(rows))
	}
	for _, r := range rows {
		if r.IOs == 0 || r.Errors > 0 || r.P50 <= 0 || r.P99 < r.P50 || r.IOPS <= 0 {
			t.Errorf("row %+v: want I/Os, no error, p50 <= p99", r)
		}
		if r.Mode == VolController && (r.P50Ratio <= 0 || r.IOPSRatio <= 0) {
			t.Errorf("controller row %s qd %d without ratios", r.Pattern, r.QD)
		}
	}
	var b strings.Builder
	tab := NewVolTable(&b)
	for _, r := range rows {
		tab.Write(r)
	}
	if err := tab.Flush(); err != nil || !strings.Contains(b.String(), "randwrite") {
		t.Fatalf("table: %v\n%s", err, b.String())
	}
}

func TestVolConfigRefusesBadInput(t *testing.T) {
	for _, c := range []VolConfig{
		{Modes: []string{"unicast"}},
		{Patterns: []string{"randomread"}},
		{QDs: []int{0}},
		{BS: 100},
		{Clients: 100},
		{VolSize: 3 << 20, Extent: 2 << 20},
	} {
		c.setDefaults()
		if err := c.validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
