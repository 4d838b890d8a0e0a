package pool_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// refStep is the reference optimizer, written from the formulas in float64
// (PyTorch's SGD with momentum and Adam with L2 weight decay).
func refStep(o wire.OptimParams, p, m, v, g []float64) {
	for i := range p {
		gi := g[i] + float64(o.WeightDecay)*p[i]
		switch o.Algo {
		case wire.OptimSGD:
			m[i] = float64(o.Beta1)*m[i] + gi
			p[i] -= float64(o.LR) * m[i]
		case wire.OptimAdam:
			b1, b2 := float64(o.Beta1), float64(o.Beta2)
			m[i] = b1*m[i] + (1-b1)*gi
			v[i] = b2*v[i] + (1-b2)*gi*gi
			mh := m[i] / (1 - math.Pow(b1, float64(o.Step)))
			vh := v[i] / (1 - math.Pow(b2, float64(o.Step)))
			p[i] -= float64(o.LR) * mh / (math.Sqrt(vh) + float64(o.Eps))
		}
	}
}

func f32s(x []float64) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	}
	return b
}

// TestOptimizerStep runs SGD with momentum and Adam in the memory nodes
// for several steps over parameters striped across four nodes and
// compares them with a float64 reference.
func TestOptimizerStep(t *testing.T) {
	c, _ := testPool(t, 4, 4<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const count = 50000 // parameters: 200 KB, over several stripes and nodes
	for _, o := range []wire.OptimParams{
		{Algo: wire.OptimSGD, LR: 0.01, Beta1: 0.9, WeightDecay: 1e-4},
		{Algo: wire.OptimAdam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-2},
	} {
		r, err := c.Alloc(ctx, 3<<20, pool.AllocOptions{Stripe: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		stride := r.StateStride(4 * count)
		rng := rand.New(rand.NewPCG(7, uint64(o.Algo)))
		p, m, v := make([]float64, count), make([]float64, count), make([]float64, count)
		for i := range p {
			p[i] = float64(float32(rng.NormFloat64()))
		}
		if _, err := r.WriteAt(f32s(p), 0); err != nil {
			t.Fatal(err)
		}
		for step := uint32(1); step <= 5; step++ {
			g := make([]float64, count)
			for i := range g {
				g[i] = float64(float32(rng.NormFloat64()))
			}
			o.Step = step
			if err := r.OptimizerStep(ctx, 0, stride, o, f32s(g)); err != nil {
				t.Fatalf("%v step %d: %v", o.Algo, step, err)
			}
			refStep(o, p, m, v, g)
		}
		got := make([]byte, 4*count)
		if _, err := r.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i := range p {
			x := float64(math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])))
			worst = max(worst, math.Abs(x-p[i])/max(1, math.Abs(p[i])))
		}
		t.Logf("%v: 5 steps of %d parameters, largest relative difference from the float64 reference %.2g", o.Algo, count, worst)
		if worst > 1e-5 {
			t.Errorf("%v: differs from the reference by %g", o.Algo, worst)
		}
		// A stride that puts the moments on other nodes is refused.
		if err := r.OptimizerStep(ctx, 0, 16<<10, o, f32s(make([]float64, 8))); !errors.Is(err, wire.StatusBadOperand) {
			t.Errorf("bad stride: %v", err)
		}
		if err := c.Free(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Bad hyperparameters are refused at the switch.
	r, _ := c.Alloc(ctx, 1<<20, pool.AllocOptions{Stripe: 16 << 10})
	bad := wire.OptimParams{Algo: wire.OptimAdam, LR: 1e-3, Beta1: 0.9, Beta2: 1.5, Eps: 1e-8, Step: 1}
	if err := r.OptimizerStep(ctx, 0, r.StateStride(64), bad, make([]byte, 64)); !errors.Is(err, wire.StatusBadOperand) {
		t.Errorf("beta2 1.5: %v", err)
	}
}
