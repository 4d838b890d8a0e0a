package coll

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// TestSimMatrix: every operation × every algorithm × rank counts × sizes
// on simnet, lossless and with 5% loss (plus reordering, duplication and
// corruption), each checked against a naive reference. Reductions use
// int64 sums (exact in any order) and 0, 1, 7 and 4099-byte-class sizes.
func TestSimMatrix(t *testing.T) {
	ranks := []int{1, 2, 3, 5, 8, 16}
	if raceEnabled {
		ranks = []int{3, 8}
	}
	for _, loss := range []float64{0, 0.05} {
		for _, n := range ranks {
			t.Run(fmt.Sprintf("loss=%v/ranks=%d", loss, n), func(t *testing.T) {
				link := figLink()
				link.Rate = 1e9
				if loss > 0 {
					link.Loss, link.Reorder, link.Dup, link.Corrupt = loss, 0.02, 0.01, 0.01
				}
				simWorld(t, n, true, link, int64(1000*n+int(loss*100)), func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
					for _, op := range []Operation{OpBarrier, OpBcast, OpReduce, OpAllreduce, OpAllgather, OpReduceScatter, OpGather, OpScatter, OpAlltoall} {
						for _, a := range Algorithms[op] {
							for _, elems := range []int{0, 1, 7, 513} { // 513 int64 = 4104 bytes
								checkOp(t, comms, op, a, elems)
							}
						}
					}
				})
			})
		}
	}
}

// checkOp runs one collective on every rank with int64 data and compares
// with the reference.
func checkOp(t *testing.T, comms []*Communicator, op Operation, a Algo, elems int) {
	t.Helper()
	n := len(comms)
	size := 8 * elems
	val := func(rank, i int) int64 { return int64(rank*1000003 + i*7 + 1) }
	block := func(rank, blk int) []byte { // rank's block number blk
		b := make([]byte, size)
		for i := range elems {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(val(rank, blk*elems+i)))
		}
		return b
	}
	sum := func(blk int) []byte {
		b := make([]byte, size)
		for i := range elems {
			var s int64
			for r := range n {
				s += val(r, blk*elems+i)
			}
			binary.LittleEndian.PutUint64(b[8*i:], uint64(s))
		}
		return b
	}
	concat := func(f func(blk int) []byte, k int) []byte {
		var out []byte
		for blk := range k {
			out = append(out, f(blk)...)
		}
		return out
	}
	recvs := make([][]byte, n)
	simRun(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		w := WithAlgo(a)
		switch op {
		case OpBarrier:
			return c.Barrier(ctx, w)
		case OpBcast:
			buf := make([]byte, size)
			if r == 0 {
				buf = block(0, 0)
			}
			recvs[r] = buf
			return c.Bcast(ctx, buf, 0, w)
		case OpReduce:
			recvs[r] = make([]byte, size)
			return c.ReduceBytes(ctx, block(r, 0), recvs[r], wire.DtypeI64, Sum, n-1, w)
		case OpAllreduce:
			recvs[r] = make([]byte, size)
			return c.AllreduceBytes(ctx, block(r, 0), recvs[r], wire.DtypeI64, Sum, w)
		case OpAllgather:
			recvs[r] = make([]byte, size*n)
			return c.Allgather(ctx, block(r, 0), recvs[r], w)
		case OpReduceScatter:
			recvs[r] = make([]byte, size)
			return c.ReduceScatterBytes(ctx, concat(func(blk int) []byte { return block(r, blk) }, n), recvs[r], wire.DtypeI64, Sum, w)
		case OpGather:
			recvs[r] = make([]byte, size*n)
			return c.Gather(ctx, block(r, 0), recvs[r], 0, w)
		case OpScatter:
			recvs[r] = make([]byte, size)
			var send []byte
			if r == 0 {
				send = concat(func(blk int) []byte { return block(0, blk) }, n)
			}
			return c.Scatter(ctx, send, recvs[r], 0, w)
		case OpAlltoall:
			recvs[r] = make([]byte, size*n)
			return c.Alltoall(ctx, concat(func(blk int) []byte { return block(r, blk) }, n), recvs[r], w)
		}
		return nil
	})
	for r := range n {
		var want []byte
		switch op {
		case OpBarrier:
			continue
		case OpBcast:
			want = block(0, 0)
		case OpReduce:
			if r != n-1 {
				continue
			}
			want = sum(0)
		case OpAllreduce:
			want = sum(0)
		case OpAllgather:
			want = concat(func(blk int) []byte { return block(blk, 0) }, n)
		case OpReduceScatter:
			want = sum(r)
		case OpGather:
			if r != 0 {
				continue
			}
			want = concat(func(blk int) []byte { return block(blk, 0) }, n)
		case OpScatter:
			want = block(0, r)
		case OpAlltoall:
			want = concat(func(src int) []byte { return block(src, r) }, n)
		}
		if !bytes.Equal(recvs[r], want) {
			t.Fatalf("%s/%s, %d ranks, %d elements: rank %d got a wrong result", op, a, n, elems, r)
		}
	}
}

// TestSimLarge: the data-movement collectives with 1 MiB + 5 bytes per
// rank (not a multiple of anything), every algorithm, 5 ranks, 5% loss.
func TestSimLarge(t *testing.T) {
	if raceEnabled {
		t.Skip("1 MiB per rank through the simulator")
	}
	const n, size = 5, 1<<20 + 5
	link := figLink()
	link.Rate = 1e9
	link.Loss, link.Reorder, link.Dup, link.Corrupt = 0.05, 0.02, 0.01, 0.01
	simWorld(t, n, true, link, 77, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		pat := func(rank, blk int) []byte {
			b := make([]byte, size)
			for i := range b {
				b[i] = byte(rank*31 + blk*7 + i*13)
			}
			return b
		}
		for _, op := range []Operation{OpBcast, OpAllgather, OpGather, OpScatter} {
			for _, a := range Algorithms[op] {
				recvs := make([][]byte, n)
				simRun(t, comms, func(ctx context.Context, c *Communicator) error {
					r, w := c.Rank(), WithAlgo(a)
					switch op {
					case OpBcast:
						recvs[r] = make([]byte, size)
						if r == 0 {
							copy(recvs[r], pat(0, 0))
						}
						return c.Bcast(ctx, recvs[r], 0, w)
					case OpAllgather:
						recvs[r] = make([]byte, size*n)
						return c.Allgather(ctx, pat(r, 0), recvs[r], w)
					case OpGather:
						recvs[r] = make([]byte, size*n)
						return c.Gather(ctx, pat(r, 0), recvs[r], 0, w)
					case OpScatter:
						recvs[r] = make([]byte, size)
						var send []byte
						if r == 0 {
							for blk := range n {
								send = append(send, pat(0, blk)...)
							}
						}
						return c.Scatter(ctx, send, recvs[r], 0, w)
					}
					return nil
				})
				for r := range n {
					var want []byte
					switch op {
					case OpBcast:
						want = pat(0, 0)
					case OpAllgather:
						for src := range n {
							want = append(want, pat(src, 0)...)
						}
					case OpGather:
						if r != 0 {
							continue
						}
						for src := range n {
							want = append(want, pat(src, 0)...)
						}
					case OpScatter:
						want = pat(0, r)
					}
					if !bytes.Equal(recvs[r], want) {
						t.Fatalf("%s/%s 1 MiB+5: rank %d got a wrong result", op, a, r)
					}
				}
			}
		}
	})
}
