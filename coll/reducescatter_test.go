package coll

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/ndma/ndma/wire"
)

// rsCounts are the block sizes in elements the reduce-scatter runs with on
// n ranks: the largest, 65537 int32 (256 KiB + 4 bytes), only for n ≤ 5.
func rsCounts(n int) []int {
	if n <= 5 {
		return []int{0, 1, 7, 4099, 65537}
	}
	return []int{0, 1, 7, 4099}
}

func TestReduceScatter(t *testing.T) {
	for _, w := range worlds(t, OpReduceScatter) {
		for _, algo := range algosFor(OpReduceScatter, w) {
			for _, cnt := range rsCounts(w.n) {
				t.Run(fmt.Sprintf("%s/n=%d/count=%d", algo, w.n, cnt), func(t *testing.T) {
					checkReduceScatter(t, w.comms, algo, cnt, Sum,
						func(r, i int) int32 { return int32(r*1000003 + i*7919) },
						func(a, b int32) int32 { return a + b })
				})
			}
			// Other element types and reductions, on one size. The inputs
			// make every order of reduction exact.
			const cnt = 129
			t.Run(fmt.Sprintf("%s/n=%d/f64-max", algo, w.n), func(t *testing.T) {
				checkReduceScatter(t, w.comms, algo, cnt, Max,
					func(r, i int) float64 { return float64((r*37+i*11)%101) - 50.5 }, math.Max)
			})
			t.Run(fmt.Sprintf("%s/n=%d/i64-min", algo, w.n), func(t *testing.T) {
				checkReduceScatter(t, w.comms, algo, cnt, Min,
					func(r, i int) int64 { return int64((r*37+i*11)%101) << 40 }, func(a, b int64) int64 { return min(a, b) })
			})
			t.Run(fmt.Sprintf("%s/n=%d/f32-sum", algo, w.n), func(t *testing.T) {
				checkReduceScatter(t, w.comms, algo, cnt, Sum,
					func(r, i int) float32 { return float32((r*37+i*11)%101) - 50 }, func(a, b float32) float32 { return a + b })
			})
			t.Run(fmt.Sprintf("%s/n=%d/i32-prod", algo, w.n), func(t *testing.T) {
				checkReduceScatter(t, w.comms, algo, cnt, Prod,
					func(r, i int) int32 { return int32(r*2654435761+i*40503) | 1 }, func(a, b int32) int32 { return a * b })
			})
		}
	}
}

// checkReduceScatter runs one reduce-scatter of cnt elements per block,
// rank r contributing gen(r, i) to element i of the whole buffer, and
// compares every rank's block with the reduction done naively with
// combine in rank order.
func checkReduceScatter[T Number](t *testing.T, comms []*Communicator, algo Algo, cnt int, op ReduceOp, gen func(r, i int) T, combine func(a, b T) T) {
	t.Helper()
	n := len(comms)
	want := make([]T, n*cnt)
	for i := range want {
		want[i] = gen(0, i)
		for r := 1; r < n; r++ {
			want[i] = combine(want[i], gen(r, i))
		}
	}
	recvs := make([][]T, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		send := make([]T, n*cnt)
		for i := range send {
			send[i] = gen(r, i)
		}
		recvs[r] = make([]T, cnt)
		if err := ReduceScatter(ctx, c, send, recvs[r], op, WithAlgo(algo)); err != nil {
			return err
		}
		for i := range send {
			if send[i] != gen(r, i) {
				return fmt.Errorf("send element %d changed", i)
			}
		}
		return nil
	})
	for r, got := range recvs {
		for i := range got {
			if w := want[r*cnt+i]; got[i] != w {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, got[i], w)
			}
		}
	}
}

func TestReduceScatterArgs(t *testing.T) {
	comms := udpComms(t, 2, false)
	c := comms[0]
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		send, recv int
		dt         wire.Dtype
		op         ReduceOp
	}{
		{"send short", 12, 8, wire.DtypeI32, Sum},
		{"not whole elements", 12, 6, wire.DtypeI32, Sum},
		{"unknown dtype", 16, 8, wire.Dtype(200), Sum},
		{"unknown op", 16, 8, wire.DtypeI32, ReduceOp(200)},
	} {
		if err := c.ReduceScatterBytes(ctx, make([]byte, tc.send), make([]byte, tc.recv), tc.dt, tc.op); !errors.Is(err, ErrArg) {
			t.Errorf("%s: %v, want ErrArg", tc.name, err)
		}
	}
	if err := ReduceScatter(ctx, c, make([]float32, 3), make([]float32, 2), Sum); !errors.Is(err, ErrArg) {
		t.Errorf("typed, send short: %v, want ErrArg", err)
	}
	if err := c.IreduceScatterBytes(ctx, make([]byte, 4), make([]byte, 4), wire.DtypeF32, Sum).Wait(ctx); !errors.Is(err, ErrArg) {
		t.Errorf("non-blocking, send short: %v, want ErrArg", err)
	}
}
