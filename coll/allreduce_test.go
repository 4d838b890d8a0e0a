package coll

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// Shared by the reduction tests.

var (
	testRanks  = []int{1, 2, 3, 5, 8}
	testDtypes = []wire.Dtype{wire.DtypeF32, wire.DtypeF64, wire.DtypeI32, wire.DtypeI64}
	testOps    = []ReduceOp{Sum, Max}
)

// bigRanks is the only rank count the ~1 MiB sizes run on: they cost
// seconds under -race, and 5 ranks (not a power of two, blocks of
// unequal length) exercise every code path the smaller counts do.
const bigRanks = 5

// testElems are the buffer lengths tried, in elements of dt: none, one
// and a few for every dtype and op; about 4 KiB for the pairs (f32, Sum),
// (f64, Max), (i32, Max), (i64, Sum), which cover each dtype, each op and
// each element size with each op; and about 1 MiB only for f32 sums on
// bigRanks ranks. The cuts keep the package's time under -race down.
func testElems(dt wire.Dtype, op ReduceOp, ranks int) []int {
	es := dt.Size()
	l := []int{0, 1, 7}
	if (dt == wire.DtypeF32 || dt == wire.DtypeI64) == (op == Sum) {
		l = append(l, 4099/es+1)
	}
	if ranks == bigRanks && dt == wire.DtypeF32 && op == Sum {
		l = append(l, (1<<20+4099)/es)
	}
	return l
}

// input is rank's deterministic input of elems elements: floats with
// fractional parts in [-1, 1], small integers.
func input(dt wire.Dtype, elems, rank, salt int) []byte {
	b := make([]byte, elems*dt.Size())
	for i := range elems {
		v := (rank*7919+i*104729+salt*31)%2001 - 1000
		switch dt {
		case wire.DtypeF32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)/997))
		case wire.DtypeF64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(v)/997))
		case wire.DtypeI32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
		case wire.DtypeI64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
		}
	}
	return b
}

// elem decodes element i of b as a float64 (exact for the test values).
func elem(dt wire.Dtype, b []byte, i int) float64 {
	switch dt {
	case wire.DtypeF32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case wire.DtypeF64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	case wire.DtypeI32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	default:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
}

// reference reduces ins naively, element by element in rank order, in
// float64 (exact for the integer test values).
func reference(dt wire.Dtype, op ReduceOp, ins [][]byte) []float64 {
	elems := len(ins[0]) / dt.Size()
	out := make([]float64, elems)
	for i := range elems {
		acc := elem(dt, ins[0], i)
		for _, in := range ins[1:] {
			x := elem(dt, in, i)
			switch op {
			case Sum:
				acc += x
			case Max:
				acc = math.Max(acc, x)
			}
		}
		out[i] = acc
	}
	return out
}

// checkResult compares got with want: exactly for integers and Max,
// within rounding for float sums of `ranks` terms of magnitude ≤ 1.
func checkResult(dt wire.Dtype, op ReduceOp, got []byte, want []float64, ranks int) error {
	if len(got) != len(want)*dt.Size() {
		return fmt.Errorf("result of %d bytes, want %d elements", len(got), len(want))
	}
	tol := 0.0
	if op == Sum {
		switch dt {
		case wire.DtypeF32:
			tol = float64(ranks) * 1e-6
		case wire.DtypeF64:
			tol = float64(ranks) * 1e-14
		}
	}
	for i, w := range want {
		if g := elem(dt, got, i); math.Abs(g-w) > tol {
			return fmt.Errorf("element %d of %d: got %v, want %v", i, len(want), g, w)
		}
	}
	return nil
}

func TestAllreduce(t *testing.T) {
	for _, n := range testRanks {
		comms := udpComms(t, n, false)
		for _, algo := range Algorithms[OpAllreduce] {
			if algo == AlgoInNet {
				continue
			}
			for _, dt := range testDtypes {
				for _, op := range testOps {
					for _, elems := range testElems(dt, op, n) {
						if elems > 4096 && algo == AlgoRecursiveDoubling {
							continue // a latency algorithm: 4 KiB covers its paths
						}
						name := fmt.Sprintf("n%d/%s/%v/%v/%d", n, algo, dt, op, elems)
						if err := allreduceCase(comms, elems, dt, op, WithAlgo(algo)); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
					}
				}
			}
		}
	}
}

// allreduceCase runs one allreduce twice (with separate buffers, then in
// place) and checks the result against the reference, the send buffers
// unchanged, and every rank's results in both runs bitwise equal.
func allreduceCase(comms []*Communicator, elems int, dt wire.Dtype, op ReduceOp, opts ...CallOption) error {
	n := len(comms)
	ins := make([][]byte, n)
	for r := range ins {
		ins[r] = input(dt, elems, r, elems)
	}
	want := reference(dt, op, ins)
	outs := make([][]byte, 2*n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for run := range 2 {
		errs := make(chan error, n)
		for r, c := range comms {
			go func() {
				send := append([]byte(nil), ins[r]...)
				recv := make([]byte, len(send))
				if run == 1 {
					copy(recv, send)
					send = nil
				}
				err := c.AllreduceBytes(ctx, send, recv, dt, op, opts...)
				if err == nil && run == 0 && !bytes.Equal(send, ins[r]) {
					err = errors.New("send buffer modified")
				}
				outs[run*n+r] = recv
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				return err
			}
		}
	}
	if err := checkResult(dt, op, outs[0], want, n); err != nil {
		return err
	}
	for i, o := range outs {
		if !bytes.Equal(o, outs[0]) {
			return fmt.Errorf("run %d rank %d: result differs bitwise from run 0 rank 0", i/n, i%n)
		}
	}
	return nil
}

func TestAllreduceTyped(t *testing.T) {
	comms := udpComms(t, 3, false)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		in := []float64{1, 2, float64(c.Rank())}
		out := make([]float64, 3)
		if err := Iallreduce(ctx, c, in, out, Sum).Wait(ctx); err != nil {
			return err
		}
		if out[0] != 3 || out[1] != 6 || out[2] != 3 {
			return fmt.Errorf("got %v", out)
		}
		if err := Iallreduce(ctx, c, in, out[:2], Sum).Wait(ctx); !errors.Is(err, ErrArg) {
			return fmt.Errorf("mismatched lengths: %v", err)
		}
		return nil
	})
}

func TestReductionArgs(t *testing.T) {
	comms := udpComms(t, 1, false)
	c := comms[0]
	ctx := context.Background()
	for name, err := range map[string]error{
		"partial element":  c.AllreduceBytes(ctx, nil, make([]byte, 6), wire.DtypeF32, Sum),
		"length mismatch":  c.AllreduceBytes(ctx, make([]byte, 4), make([]byte, 8), wire.DtypeF32, Sum),
		"unknown dtype":    c.AllreduceBytes(ctx, nil, make([]byte, 8), wire.DtypeNone, Sum),
		"unknown op":       c.AllreduceBytes(ctx, nil, make([]byte, 8), wire.DtypeF32, ReduceOp(99)),
		"reduce root":      c.ReduceBytes(ctx, nil, make([]byte, 8), wire.DtypeF32, Sum, 1),
		"reduce mismatch":  c.ReduceBytes(ctx, make([]byte, 4), make([]byte, 8), wire.DtypeF32, Sum, 0),
		"reduce partial":   c.ReduceBytes(ctx, nil, make([]byte, 7), wire.DtypeI64, Max, 0),
		"bcast root":       c.Bcast(ctx, make([]byte, 8), -1),
		"unsupported algo": c.Bcast(ctx, make([]byte, 8), 0, WithAlgo(AlgoRing)),
	} {
		if !errors.Is(err, ErrArg) {
			t.Errorf("%s: got %v, want ErrArg", name, err)
		}
	}
}

// TestNoSwitch: asking for AlgoInNet without a switch fails with
// ErrNoSwitch; an in-network choice by environment falls back to a host
// algorithm.
func TestNoSwitch(t *testing.T) {
	comms := udpComms(t, 2, false)
	// Every rank makes the failing calls, so their call counts stay equal.
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		buf := make([]byte, 8)
		for name, err := range map[string]error{
			"bcast":      c.Bcast(ctx, buf, 0, WithAlgo(AlgoInNet)),
			"reduce":     c.ReduceBytes(ctx, nil, buf, wire.DtypeF64, Sum, 0, WithAlgo(AlgoInNet)),
			"allreduce":  c.AllreduceBytes(ctx, nil, buf, wire.DtypeF64, Sum, WithAlgo(AlgoInNet)),
			"iallreduce": c.IallreduceBytes(ctx, nil, buf, wire.DtypeF64, Sum, WithAlgo(AlgoInNet)).Wait(ctx),
		} {
			if !errors.Is(err, ErrNoSwitch) {
				return fmt.Errorf("%s: got %v, want ErrNoSwitch", name, err)
			}
		}
		return nil
	})
	// Algorithm names what a call would run: the host fallback here.
	c0 := comms[0]
	for _, tc := range []struct {
		op   Operation
		opts []CallOption
		want Algo
	}{
		{OpAllreduce, nil, c0.tuner.Choose(OpAllreduce, 1<<20, 2, false)},
		{OpBcast, []CallOption{WithAlgo(AlgoChain)}, AlgoChain},
	} {
		if a, err := c0.Algorithm(tc.op, 1<<20, tc.opts...); err != nil || a != tc.want || a == AlgoInNet {
			t.Errorf("Algorithm(%s): %v, %v; want %s", tc.op, a, err, tc.want)
		}
	}
	if _, err := c0.Algorithm(OpAllreduce, 8, WithAlgo(AlgoInNet)); !errors.Is(err, ErrNoSwitch) {
		t.Errorf("Algorithm(allreduce, innet) without a switch: %v, want ErrNoSwitch", err)
	}
	if _, err := c0.Algorithm("sort", 8); !errors.Is(err, ErrArg) {
		t.Errorf("Algorithm(sort): %v, want ErrArg", err)
	}
	t.Setenv("NDMA_ALGO_ALLREDUCE", "innet")
	t.Setenv("NDMA_ALGO_BCAST", "innet")
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		x := []int64{int64(c.Rank()) + 1}
		if err := Allreduce(ctx, c, nil, x, Sum); err != nil {
			return err
		}
		if x[0] != 3 {
			return fmt.Errorf("allreduce: got %d", x[0])
		}
		b := []byte{byte(c.Rank())}
		if err := c.Bcast(ctx, b, 1); err != nil {
			return err
		}
		if b[0] != 1 {
			return fmt.Errorf("bcast: got %d", b[0])
		}
		return nil
	})
}

// TestInNet runs every collective of this file set through a switch,
// deterministic reductions twice for bitwise equality, blocking and
// non-blocking calls overlapping.
func TestInNet(t *testing.T) {
	for _, n := range []int{2, 5} {
		comms := udpComms(t, n, true)
		for _, elems := range []int{0, 1, 7, 1025, (1<<20 + 4099) / 4} {
			for _, dt := range []wire.Dtype{wire.DtypeF32, wire.DtypeI64} {
				op := Sum
				if dt == wire.DtypeI64 {
					op = Max
				}
				if elems > 2000 && (dt == wire.DtypeI64 || n != bigRanks) {
					continue
				}
				name := fmt.Sprintf("n%d/%v/%v/%d", n, dt, op, elems)
				if err := allreduceCase(comms, elems, dt, op, WithAlgo(AlgoInNet), WithDeterministic(true)); err != nil {
					t.Fatalf("allreduce %s: %v", name, err)
				}
				if err := reduceCase(comms, elems, dt, op, n-1, WithAlgo(AlgoInNet), WithDeterministic(true)); err != nil {
					t.Fatalf("reduce %s: %v", name, err)
				}
			}
			if err := bcastCase(comms, elems, n/2, WithAlgo(AlgoInNet)); err != nil {
				t.Fatalf("bcast n%d/%d: %v", n, elems, err)
			}
		}
		testBarrier(t, comms)
		testOverlap(t, comms, true)
	}
}

// TestOverlap keeps several non-blocking collectives of different kinds
// and algorithms in flight on one communicator.
func TestOverlap(t *testing.T) {
	testOverlap(t, udpComms(t, 3, false), false)
}

func testOverlap(t *testing.T, comms []*Communicator, innet bool) {
	t.Helper()
	n := len(comms)
	algo := func(a Algo) CallOption {
		if innet {
			return WithAlgo(AlgoInNet)
		}
		return WithAlgo(a)
	}
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		const elems = 3000
		a1 := make([]float64, elems)
		a2 := make([]int32, elems)
		a3 := make([]int64, 5)
		red := make([]int32, elems)
		bc := make([]byte, 10000)
		for i := range elems {
			a1[i] = float64(r + i)
			a2[i] = int32(r * i)
			red[i] = int32(r)
		}
		for i := range a3 {
			a3[i] = int64(r)
		}
		root := n - 1
		if r == root {
			for i := range bc {
				bc[i] = byte(i * 7)
			}
		}
		var recv []int32
		if r == 0 {
			recv = make([]int32, elems)
		}
		reqs := []*Request{
			Iallreduce(ctx, c, nil, a1, Sum, algo(AlgoRing)),
			c.Ibcast(ctx, bc, root, algo(AlgoChain), WithSegment(1000)),
			Iallreduce(ctx, c, nil, a2, Max, algo(AlgoRabenseifner)),
			c.Ibarrier(ctx),
			Ireduce(ctx, c, red, recv, Sum, 0, algo(AlgoBinomial)),
			Iallreduce(ctx, c, nil, a3, Sum, algo(AlgoRecursiveDoubling)),
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for i, q := range reqs {
			if err := q.Wait(ctx); err != nil {
				return fmt.Errorf("request %d: %w", i, err)
			}
		}
		s := n * (n - 1) / 2
		for i := range elems {
			if a1[i] != float64(s+n*i) || a2[i] != int32((n-1)*i) {
				return fmt.Errorf("allreduce element %d: %v %v", i, a1[i], a2[i])
			}
			if r == 0 && recv[i] != int32(s) {
				return fmt.Errorf("reduce element %d: %v", i, recv[i])
			}
		}
		for i := range bc {
			if bc[i] != byte(i*7) {
				return fmt.Errorf("bcast byte %d: %d", i, bc[i])
			}
		}
		if a3[4] != int64(s) {
			return fmt.Errorf("small allreduce: %v", a3)
		}
		return nil
	})
}

// TestCancel: a collective the other ranks never join ends with ctx's
// error instead of hanging, blocking or not, host or in-network.
func TestCancel(t *testing.T) {
	for _, innet := range []bool{false, true} {
		comms := udpComms(t, 3, innet)
		c := comms[1]
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		buf := make([]byte, 4096)
		algo := AlgoRing
		if innet {
			algo = AlgoInNet
		}
		if err := c.AllreduceBytes(ctx, nil, buf, wire.DtypeF32, Sum, WithAlgo(algo)); err == nil {
			t.Errorf("innet=%v: allreduce alone succeeded", innet)
		}
		cancel()
		ctx, cancel = context.WithCancel(context.Background())
		q := c.Ibcast(ctx, make([]byte, 4096), 0)
		q2 := c.Ibarrier(ctx)
		cancel()
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, r := range []*Request{q, q2} {
			if err := r.Wait(wctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("innet=%v: canceled request: %v", innet, err)
			}
		}
		wcancel()
	}
}
