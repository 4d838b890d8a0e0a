package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/testbed"
)

// TestSuiteGlooTestbed runs the Gloo rows of a suite on a 2-host testbed:
// one row per operation, in bench coll's format, judged by the fidelity
// monitor with the Python processes' CPU counted as the ranks'.
func TestSuiteGlooTestbed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a testbed of network namespaces and runs PyTorch processes on it")
	}
	prefix := fmt.Sprintf("ndmagl%d", os.Getpid()%100000)
	if err := testbed.Check(t.Context(), prefix); err != nil {
		t.Skipf("no testbed here: %v", err)
	}
	if err := GlooAvailable(t.Context()); err != nil {
		t.Skipf("no Gloo here: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ops := []coll.Operation{coll.OpAllreduce, coll.OpBcast, coll.OpBarrier}
	rows, err := RunSuite(ctx, SuiteConfig{
		Testbed: testbed.Config{Prefix: prefix, Hosts: 2, Rate: "100mbit", MTU: 9000, StateDir: filepath.Join(t.TempDir(), "state"), Binary: ndmaBinary(t)},
		Ops:     ops,
		Sizes:   []int{64 << 10},
		Iters:   3,
		Gloo:    true,
		Algos:   []coll.Algo{AlgoGloo},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(ops) {
		t.Fatalf("%d rows, want one per operation: %+v", len(rows), rows)
	}
	for i, r := range rows {
		size := 64 << 10
		if ops[i] == coll.OpBarrier {
			size = 0
		}
		if r.Op != string(ops[i]) || r.Algo != "gloo" || r.Ranks != 2 || r.Size != size || r.Iters != 3 || r.Sync != "gloo" {
			t.Errorf("row %d: %+v, want %s/gloo, 2 ranks, %d bytes, 3 iterations", i, r, ops[i], size)
		}
		if r.AvgUS <= 0 || r.MinUS > r.AvgUS || r.MaxUS < r.AvgUS || r.CPURanksS <= 0 {
			t.Errorf("row %d: implausible %+v", i, r)
		}
		if v := r.Fidelity; v == nil || v.ProcessS["ranks"] != r.CPURanksS || v.Window == nil || v.Window.ToS <= v.Window.FromS {
			t.Errorf("row %d: verdict %+v", i, v)
		}
	}
}
