package coll

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// runOp runs one collective of op with algorithm a (AlgoAuto: the tuner)
// and size bytes per rank.
func runOp(ctx context.Context, c *Communicator, op Operation, a Algo, size int, send, recv []byte) error {
	n := c.Size()
	w := WithAlgo(a)
	e := size &^ 3
	switch op {
	case OpBarrier:
		return c.Barrier(ctx, w)
	case OpBcast:
		return c.Bcast(ctx, send[:size], 0, w)
	case OpReduce:
		return c.ReduceBytes(ctx, send[:e], recv[:e], wire.DtypeF32, Sum, 0, w)
	case OpAllreduce:
		return c.AllreduceBytes(ctx, send[:e], recv[:e], wire.DtypeF32, Sum, w)
	case OpAllgather:
		return c.Allgather(ctx, send[:size], recv[:size*n], w)
	case OpReduceScatter:
		return c.ReduceScatterBytes(ctx, send[:e*n], recv[:e], wire.DtypeF32, Sum, w)
	case OpGather:
		return c.Gather(ctx, send[:size], recv[:size*n], 0, w)
	case OpScatter:
		return c.Scatter(ctx, send[:size*n], recv[:size], 0, w)
	case OpAlltoall:
		return c.Alltoall(ctx, send[:size*n], recv[:size*n], w)
	}
	return fmt.Errorf("unknown op %s", op)
}

// TestSimTuner measures every operation with every algorithm at a few
// sizes (8 ranks, 100 Mbit/s, virtual time) and checks the tuner's choice
// is within 10% of the best algorithm measured.
func TestSimTuner(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("every op x algorithm through the simulator")
	}
	const n = 8
	simWorld(t, n, true, figLink(), 5, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		const maxSize = 256 << 10
		send := make([][]byte, n)
		recv := make([][]byte, n)
		for i := range send {
			send[i] = make([]byte, maxSize*n)
			recv[i] = make([]byte, maxSize*n)
		}
		for _, op := range []Operation{OpBarrier, OpBcast, OpReduce, OpAllreduce, OpAllgather, OpReduceScatter, OpGather, OpScatter, OpAlltoall} {
			sizes := []int{8, 8 << 10, maxSize}
			if op == OpBarrier {
				sizes = []int{0}
			}
			for _, size := range sizes {
				best, bestAlgo := time.Duration(0), Algo("")
				row := fmt.Sprintf("%-13s %7d:", op, size)
				for _, a := range append([]Algo{AlgoAuto}, Algorithms[op]...) {
					// The best of three runs after a warm-up: one run's time
					// depends on the windows the previous one left behind.
					f := func(ctx context.Context, c *Communicator) error {
						return runOp(ctx, c, op, a, size, send[c.Rank()], recv[c.Rank()])
					}
					d := measure(t, comms, f)
					for range 2 {
						d = min(d, simRun(t, comms, f))
					}
					row += fmt.Sprintf(" %s=%v", a, d.Round(time.Microsecond))
					if a == AlgoAuto {
						defer func(auto time.Duration) {
							r := float64(auto) / float64(best)
							t.Logf("%s  best=%s auto/best=%.2f", row, bestAlgo, r)
							if r > 1.10 {
								t.Errorf("%s %d: the tuner's choice takes %.2fx the best (%s)", op, size, r, bestAlgo)
							}
						}(d)
						continue
					}
					if best == 0 || d < best {
						best, bestAlgo = d, a
					}
				}
			}
		}
	})
}
