package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
)

// TestRunCollEveryOp runs every operation with every algorithm it has
// through RunColl on loopback (3 ranks, odd sizes), so each operation's
// buffers fit its MPI counts.
func TestRunCollEveryOp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := NewCollWorld(ctx, 3, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for op, algos := range coll.Algorithms {
		cfg := CollConfig{Op: op, Algos: algos, Ranks: 3, Sizes: []int{7, 4099}, Iters: 1, Warmup: 1}
		rows := 0
		err := RunColl(ctx, w, cfg, func(r CollResult) {
			rows++
			if r.Op != string(op) || r.Ranks != 3 || r.Iters != 1 || !(r.AvgUS > 0) || r.MinUS > r.MaxUS {
				t.Errorf("%s: bad row %+v", op, r)
			}
			if auto := r.Algo == string(coll.AlgoAuto); auto != (r.Chosen != "") || (auto && !coll.Supported(op, coll.Algo(r.Chosen))) {
				t.Errorf("%s: row %+v: chosen %q", op, r, r.Chosen)
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if want := len(algos) * len(cfg.sizes()); rows != want {
			t.Errorf("%s: %d rows, want %d", op, rows, want)
		}
	}
}

// TestRunCollSim: the simulated run reports virtual times that follow the
// link model, and refuses a bad link.
func TestRunCollSim(t *testing.T) {
	cfg := CollConfig{Op: coll.OpAllreduce, Algos: []coll.Algo{coll.AlgoInNet}, Ranks: 4, Sizes: []int{1 << 20}, Iters: 2, Warmup: 1}
	var got []CollResult
	if err := RunCollSim(cfg, CollSimLink{}, func(r CollResult) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	// 1 MiB at the default 100 Mbit/s: S/B = 83.9 ms; in-network
	// Allreduce needs one S/B plus the pipeline's fill.
	const sOverBUS = 1 << 20 * 8 / 100e6 * 1e6
	if len(got) != 1 || got[0].AvgUS < sOverBUS || got[0].AvgUS > 1.2*sOverBUS {
		t.Fatalf("rows %+v, want one with avg in [%.0f, %.0f] us", got, sOverBUS, 1.2*sOverBUS)
	}
	for _, l := range []CollSimLink{{Rate: -1}, {Loss: 1}, {Latency: -time.Second}} {
		if err := RunCollSim(cfg, l, func(CollResult) {}); err == nil || !strings.Contains(err.Error(), "bench: ") {
			t.Errorf("%+v: error %v", l, err)
		}
	}
}

// TestRunCollSimTree: on a tree of a root and 3 leaves, the in-network
// Allreduce of 1 MiB over 6 ranks still needs about one S/B (the links
// of the ranks bind it, not the tree), every row counts the datagrams of
// the 4 switches, each leaf's about the same, and bad trees are refused.
func TestRunCollSimTree(t *testing.T) {
	cfg := CollConfig{Op: coll.OpAllreduce, Algos: []coll.Algo{coll.AlgoInNet}, Ranks: 6, Sizes: []int{1 << 20}, Iters: 2, Warmup: 1}
	var got []CollResult
	if err := RunCollSim(cfg, CollSimLink{Leaves: 3}, func(r CollResult) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	const sOverBUS = 1 << 20 * 8 / 100e6 * 1e6
	if len(got) != 1 || got[0].AvgUS < sOverBUS || got[0].AvgUS > 1.2*sOverBUS || len(got[0].SwitchPackets) != 4 {
		t.Fatalf("rows %+v, want one with avg in [%.0f, %.0f] us and 4 switches' counts", got, sOverBUS, 1.2*sOverBUS)
	}
	leaves := got[0].SwitchPackets[1:]
	if lo, hi := slices.Min(leaves), slices.Max(leaves); lo == 0 || float64(hi) > 1.1*float64(lo) {
		t.Errorf("packets per leaf %v, want an even share", leaves)
	}
	for _, c := range []struct {
		leaves, ranks, switches int
	}{{-1, 6, 1}, {7, 6, 1}, {2, 6, 2}} {
		cfg := cfg
		cfg.Ranks, cfg.Switches = c.ranks, c.switches
		if err := RunCollSim(cfg, CollSimLink{Leaves: c.leaves}, func(CollResult) {}); err == nil {
			t.Errorf("%d leaves, %d ranks, %d switches: no error", c.leaves, c.ranks, c.switches)
		}
	}
}

// TestRunCollSimSwitches: sharded over 3 switches, each row reports
// every switch's datagrams, and the stripes share the load evenly. (The
// first row also carries the ranks' first datagrams to the second and
// third switch, about 40 more there than on the first, which set-up
// used: enough calls that this stays within the 10%.)
func TestRunCollSimSwitches(t *testing.T) {
	cfg := CollConfig{Op: coll.OpAllreduce, Algos: []coll.Algo{coll.AlgoInNet}, Ranks: 4, Sizes: []int{256 << 10, 3 << 20}, Iters: 8, Warmup: 1, Switches: 3}
	var got []CollResult
	if err := RunCollSim(cfg, CollSimLink{}, func(r CollResult) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d rows, want 2", len(got))
	}
	for _, r := range got {
		if len(r.SwitchPackets) != 3 {
			t.Fatalf("size %d: packets per switch %v, want 3 counts", r.Size, r.SwitchPackets)
		}
		lo, hi := slices.Min(r.SwitchPackets), slices.Max(r.SwitchPackets)
		if lo == 0 || float64(hi) > 1.1*float64(lo) {
			t.Errorf("size %d: packets per switch %v, want an even share", r.Size, r.SwitchPackets)
		} else {
			t.Logf("size %d: packets per switch %v", r.Size, r.SwitchPackets)
		}
	}
	cfg.Switches = coll.MaxSwitches + 1
	if err := RunCollSim(cfg, CollSimLink{}, func(CollResult) {}); err == nil {
		t.Errorf("%d switches: no error", cfg.Switches)
	}
}
