package coll

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/reduce"
	"github.com/ndma/ndma/wire"
)

// hierLayout is a job's ranks per host: host[r] is rank r's host.
type hierLayout struct {
	name  string
	host  []int
	hosts int
}

// hierLayouts: one host of 4, 4 hosts of 1 (no hierarchy: nothing to
// share) and an uneven 3+1+2.
var hierLayouts = []hierLayout{
	{"1x4", []int{0, 0, 0, 0}, 1},
	{"4x1", []int{0, 1, 2, 3}, 4},
	{"3+1+2", []int{0, 0, 0, 1, 2, 2}, 3},
}

// needShm skips where there is no /dev/shm to share.
func needShm(t *testing.T) {
	t.Helper()
	if shmNamespace() == "" {
		t.Skip("no /dev/shm: two-level collectives need shared memory")
	}
}

// simShm is needShm for a test in a synctest bubble: its waits sleep
// (in virtual time) instead of blocking on a futex.
func simShm(t *testing.T) {
	t.Helper()
	needShm(t)
	old := shmSleepWaits
	shmSleepWaits = true
	t.Cleanup(func() { shmSleepWaits = old })
}

// hierConfig runs the ranks of layout l with HierarchyAuto, each host a
// HostID of its own.
func hierConfig(l hierLayout, more func(*Config)) func(*Config) {
	return func(cfg *Config) {
		cfg.Hierarchy = HierarchyAuto
		cfg.HostID = fmt.Sprintf("test host %d", l.host[cfg.Rank])
		if more != nil {
			more(cfg)
		}
	}
}

// segmentsLeft lists the segments this process created that are still
// in /dev/shm.
func segmentsLeft(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(shmDir, fmt.Sprintf("%s%d-*", shmPrefix, os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkLayout checks what the communicators learned of the layout, and
// that no segment is left in /dev/shm once they are made.
func checkLayout(t *testing.T, l hierLayout, comms []*Communicator) {
	t.Helper()
	for r, c := range comms {
		want := 0
		if l.hosts < len(l.host) {
			want = l.hosts
		}
		if c.Hosts() != want {
			t.Fatalf("rank %d: %d hosts, want %d", r, c.Hosts(), want)
		}
		var local []int
		for q, h := range l.host {
			if h == l.host[r] && want > 0 {
				local = append(local, q)
			}
		}
		if got := c.LocalRanks(); fmt.Sprint(got) != fmt.Sprint(local) && (len(got) > 0 || len(local) > 0) {
			t.Fatalf("rank %d: local ranks %v, want %v", r, got, local)
		}
	}
	if left := segmentsLeft(t); len(left) > 0 {
		t.Fatalf("segments left in %s after setup: %v", shmDir, left)
	}
}

// closeComms closes every communicator (the segments are unmapped).
func closeComms(t *testing.T, comms []*Communicator) {
	for _, c := range comms {
		if c != nil {
			c.Close(context.Background())
		}
	}
}

// hierVal is rank r's element i: small integers, so that every order of
// a float Sum or Prod over a few ranks is exact.
func hierVal(r, i int) int64 { return []int64{1, -2, 3, 2, -1, 4, -3}[(r*3+i*5)%7] }

// encodeVals lays vals out as dt elements.
func encodeVals(dt wire.Dtype, vals []int64) []byte {
	b := make([]byte, 0, len(vals)*dt.Size())
	for _, v := range vals {
		switch dt {
		case wire.DtypeF32:
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
		case wire.DtypeF64:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
		case wire.DtypeI32:
			b = binary.LittleEndian.AppendUint32(b, uint32(int32(v)))
		case wire.DtypeI64:
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

// rankInput is rank r's input of n elements.
func rankInput(dt wire.Dtype, r, n int) []byte {
	vals := make([]int64, n)
	for i := range vals {
		vals[i] = hierVal(r, i)
	}
	return encodeVals(dt, vals)
}

// hierReference reduces every rank's input with op, in int64 (exact for
// these values), as dt elements.
func hierReference(dt wire.Dtype, op ReduceOp, ranks, n int) []byte {
	vals := make([]int64, n)
	for i := range vals {
		acc := hierVal(0, i)
		for r := 1; r < ranks; r++ {
			v := hierVal(r, i)
			switch op {
			case Sum:
				acc += v
			case Prod:
				acc *= v
			case Min:
				acc = min(acc, v)
			case Max:
				acc = max(acc, v)
			}
		}
		vals[i] = acc
	}
	return encodeVals(dt, vals)
}

var (
	hierDtypes = []wire.Dtype{wire.DtypeF32, wire.DtypeF64, wire.DtypeI32, wire.DtypeI64}
	hierOps    = []ReduceOp{Sum, Prod, Min, Max}
	// hierSizes, in elements: one, a few, and more than two chunks of
	// the segment at 8 bytes an element.
	hierSizes = []int{1, 1000, 2*shmChunk/8 + 1001}
)

// TestSimHierarchyMatrix: every two-level collective (Allreduce, in place
// or not, Reduce, Bcast, Allgather, ReduceScatter, Gather, Scatter,
// Alltoall, Barrier) × element type × reduction × root × size, on one
// host of 4, 4 hosts of 1 and hosts of 3+1+2 ranks, with a switch
// (in-network steps between the leaders) and without, against a
// reference computed here; no segment is left in /dev/shm.
func TestSimHierarchyMatrix(t *testing.T) {
	simShm(t)
	for _, l := range hierLayouts {
		for _, innet := range []bool{false, true} {
			name := l.name + "/host"
			if innet {
				name = l.name + "/switch"
			}
			t.Run(name, func(t *testing.T) {
				simWorldConfig(t, len(l.host), innet, figLink(), 7, hierConfig(l, nil), func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
					defer closeComms(t, comms)
					checkLayout(t, l, comms)
					hierMatrixReductions(t, comms)
					if l.hosts > 1 && l.hosts < len(l.host) {
						// More than two of the leaders' pieces.
						for _, dt := range hierDtypes {
							checkAllreduce(t, comms, dt, Sum, 2*leaderPiece*shmChunk/dt.Size()+77, dt == wire.DtypeF64)
						}
					}
					hierMatrixBcast(t, comms)
					hierMatrixAllgather(t, comms)
					hierMatrixReduceScatter(t, comms)
					hierMatrixGatherScatter(t, comms)
					hierMatrixAlltoall(t, comms)
					for range 3 {
						simRun(t, comms, func(ctx context.Context, c *Communicator) error { return c.Barrier(ctx) })
					}
				})
				if left := segmentsLeft(t); len(left) > 0 {
					t.Fatalf("segments left: %v", left)
				}
			})
		}
	}
}

// hierMatrixReductions runs Allreduce and Reduce over the matrix.
func hierMatrixReductions(t *testing.T, comms []*Communicator) {
	t.Helper()
	n := len(comms)
	for _, dt := range hierDtypes {
		for _, op := range hierOps {
			for _, size := range hierSizes {
				want := hierReference(dt, op, n, size)
				for _, inPlace := range []bool{false, true} {
					checkAllreduce(t, comms, dt, op, size, inPlace)
				}
				roots := []int{0, n - 1, n / 2}
				if size > 1000 {
					roots = roots[:1]
				}
				for _, root := range roots {
					var got []byte
					simRun(t, comms, func(ctx context.Context, c *Communicator) error {
						in := rankInput(dt, c.Rank(), size)
						if c.Rank() != root {
							return c.ReduceBytes(ctx, in, nil, dt, op, root)
						}
						if root%2 == 1 { // in place at some roots
							got = in
							return c.ReduceBytes(ctx, nil, in, dt, op, root)
						}
						got = make([]byte, len(in))
						return c.ReduceBytes(ctx, in, got, dt, op, root)
					})
					if !bytes.Equal(got, want) {
						t.Fatalf("reduce %v %v %d elements to root %d: wrong result", dt, op, size, root)
					}
				}
			}
		}
	}
}

// checkAllreduce runs one Allreduce of size elements on every rank and
// checks every rank's result against the reference.
func checkAllreduce(t *testing.T, comms []*Communicator, dt wire.Dtype, op ReduceOp, size int, inPlace bool) {
	t.Helper()
	n := len(comms)
	want := hierReference(dt, op, n, size)
	got := make([][]byte, n)
	simRun(t, comms, func(ctx context.Context, c *Communicator) error {
		in := rankInput(dt, c.Rank(), size)
		if inPlace {
			got[c.Rank()] = in
			return c.AllreduceBytes(ctx, nil, in, dt, op)
		}
		got[c.Rank()] = make([]byte, len(in))
		return c.AllreduceBytes(ctx, in, got[c.Rank()], dt, op)
	})
	for r := range n {
		if !bytes.Equal(got[r], want) {
			t.Fatalf("allreduce %v %v %d elements (in place %v): rank %d got a wrong result", dt, op, size, inPlace, r)
		}
	}
}

// hierMatrixAllgather gathers blocks of every size, in place or not.
func hierMatrixAllgather(t *testing.T, comms []*Communicator) {
	t.Helper()
	n := len(comms)
	for _, size := range []int{1, 1000, 2*shmChunk + 3} {
		var want []byte
		for r := range n {
			want = append(want, rankInput(wire.DtypeI32, r+7, size/4+1)[:size]...)
		}
		for _, inPlace := range []bool{false, true} {
			got := make([][]byte, n)
			simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				r := c.Rank()
				mine := rankInput(wire.DtypeI32, r+7, size/4+1)[:size]
				got[r] = make([]byte, n*size)
				if inPlace {
					copy(got[r][r*size:], mine)
					return c.Allgather(ctx, nil, got[r])
				}
				return c.Allgather(ctx, mine, got[r])
			})
			for r := range n {
				if !bytes.Equal(got[r], want) {
					t.Fatalf("allgather of %d bytes a rank (in place %v): rank %d got other bytes", size, inPlace, r)
				}
			}
		}
	}
}

// hierMatrixBcast broadcasts from every root, at every size.
func hierMatrixBcast(t *testing.T, comms []*Communicator) {
	t.Helper()
	n := len(comms)
	for root := range n {
		for _, size := range []int{1, 1000, 2*shmChunk + 77} {
			want := rankInput(wire.DtypeI32, 100+root, size/4+1)[:size]
			got := make([][]byte, n)
			simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				buf := make([]byte, size)
				if c.Rank() == root {
					copy(buf, want)
				}
				got[c.Rank()] = buf
				return c.Bcast(ctx, buf, root)
			})
			for r := range n {
				if !bytes.Equal(got[r], want) {
					t.Fatalf("bcast of %d bytes from %d: rank %d got other bytes", size, root, r)
				}
			}
		}
	}
}

// TestSimHierarchyDeterministic: float sums of random values come out
// bitwise the same on every rank and from call to call; on one host they
// are the left fold in rank order, x0 ⊕ x1 ⊕ x2 ⊕ x3.
func TestSimHierarchyDeterministic(t *testing.T) {
	simShm(t)
	for _, l := range []hierLayout{hierLayouts[0], hierLayouts[2]} {
		for _, innet := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/innet=%v", l.name, innet), func(t *testing.T) {
				simWorldConfig(t, len(l.host), innet, figLink(), 3, hierConfig(l, nil), func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
					defer closeComms(t, comms)
					const size = shmChunk/4 + 333 // float32s: two chunks
					inputs := make([][]byte, len(comms))
					rng := rand.New(rand.NewPCG(9, 9))
					for r := range inputs {
						v := make([]float32, size)
						for i := range v {
							v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8))))
						}
						inputs[r] = asBytes(v)
					}
					var first []byte
					for run := range 2 {
						got := make([][]byte, len(comms))
						simRun(t, comms, func(ctx context.Context, c *Communicator) error {
							got[c.Rank()] = make([]byte, len(inputs[0]))
							return c.AllreduceBytes(ctx, inputs[c.Rank()], got[c.Rank()], wire.DtypeF32, Sum, WithDeterministic(true))
						})
						if run == 0 {
							first = got[0]
						}
						for r := range got {
							if !bytes.Equal(got[r], first) {
								t.Fatalf("run %d: rank %d's sum differs from rank 0's in the first run", run, r)
							}
						}
					}
					if l.hosts == 1 {
						want := append([]byte(nil), inputs[0]...)
						for _, in := range inputs[1:] {
							reduce.Apply(want, in, wire.DtypeF32, Sum)
						}
						if !bytes.Equal(first, want) {
							t.Fatal("one host: the sum is not the left fold in rank order")
						}
					}
				})
			})
		}
	}
}

// TestSimHierarchyOneHostNoNetwork: on one host without a switch, the
// two-level collectives send no datagram.
func TestSimHierarchyOneHostNoNetwork(t *testing.T) {
	simShm(t)
	l := hierLayouts[0]
	simWorldConfig(t, len(l.host), false, figLink(), 5, hierConfig(l, nil), func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		defer closeComms(t, comms)
		before := make([]uint64, len(comms))
		for r, c := range comms {
			before[r] = c.ep.Stats().Transport.PacketsSent
		}
		simRun(t, comms, func(ctx context.Context, c *Communicator) error {
			buf := rankInput(wire.DtypeF64, c.Rank(), 5000)
			if err := c.AllreduceBytes(ctx, nil, buf, wire.DtypeF64, Sum); err != nil {
				return err
			}
			send, recv := buf, []byte(nil)
			if c.Rank() == 2 {
				send, recv = nil, buf
			}
			if err := c.ReduceBytes(ctx, send, recv, wire.DtypeF64, Max, 2); err != nil {
				return err
			}
			if err := c.Bcast(ctx, buf, 3); err != nil {
				return err
			}
			if err := c.Allgather(ctx, buf[:64], make([]byte, 64*c.Size())); err != nil {
				return err
			}
			if err := c.ReduceScatterBytes(ctx, buf[:64*c.Size()], make([]byte, 64), wire.DtypeF64, Sum); err != nil {
				return err
			}
			if err := c.Gather(ctx, buf[:64], make([]byte, 64*c.Size()), 1); err != nil {
				return err
			}
			if err := c.Scatter(ctx, buf[:64*c.Size()], make([]byte, 64), 3); err != nil {
				return err
			}
			if err := c.Alltoall(ctx, buf[:64*c.Size()], make([]byte, 64*c.Size())); err != nil {
				return err
			}
			return c.Barrier(ctx)
		})
		for r, c := range comms {
			if sent := c.ep.Stats().Transport.PacketsSent - before[r]; sent != 0 {
				t.Fatalf("rank %d sent %d datagrams", r, sent)
			}
		}
	})
}

// TestSimHierarchyNonBlocking: overlapping non-blocking two-level calls
// (every operation that has two levels) complete in call order with the
// right results.
func TestSimHierarchyNonBlocking(t *testing.T) {
	simShm(t)
	l := hierLayouts[2]
	n := len(l.host)
	simWorldConfig(t, n, true, figLink(), 11, hierConfig(l, nil), func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		defer closeComms(t, comms)
		const size = 3000
		wantSum, wantMax := hierReference(wire.DtypeI64, Sum, n, size), hierReference(wire.DtypeI64, Max, n, size)
		bc := rankInput(wire.DtypeI32, 42, size)
		sums, maxes, bcs, gathered := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
		scattered, blocks, exchanged := make([][]byte, n), make([][]byte, n), make([][]byte, n)
		var wantGather, atRoot []byte
		for r := range n {
			wantGather = append(wantGather, rankInput(wire.DtypeI64, r, 1)...)
		}
		simRun(t, comms, func(ctx context.Context, c *Communicator) error {
			r := c.Rank()
			sums[r], bcs[r] = make([]byte, size*8), make([]byte, len(bc))
			if r == 4 {
				copy(bcs[r], bc)
				maxes[r] = make([]byte, size*8)
			}
			gathered[r] = make([]byte, n*8)
			scattered[r], blocks[r], exchanged[r] = make([]byte, 8), make([]byte, 8*size), make([]byte, 8*n)
			toAll := make([]byte, 8*n) // block j: 100·r + j
			for j := range n {
				binary.LittleEndian.PutUint64(toAll[8*j:], uint64(100*r+j))
			}
			var toRoot []byte
			if r == 2 {
				atRoot = make([]byte, n*8)
				toRoot = atRoot
			}
			reqs := []*Request{
				c.IreduceScatterBytes(ctx, rankInput(wire.DtypeI64, r, n*size), blocks[r], wire.DtypeI64, Sum),
				c.Igather(ctx, rankInput(wire.DtypeI64, r, 1), toRoot, 2),
				c.Ialltoall(ctx, toAll, exchanged[r]),
				c.Iscatter(ctx, wantGather, scattered[r], 5),
				c.Iallgather(ctx, rankInput(wire.DtypeI64, r, 1), gathered[r]),
				c.IallreduceBytes(ctx, rankInput(wire.DtypeI64, r, size), sums[r], wire.DtypeI64, Sum),
				c.Ibarrier(ctx),
				c.Ibcast(ctx, bcs[r], 4),
				c.IreduceBytes(ctx, rankInput(wire.DtypeI64, r, size), maxes[r], wire.DtypeI64, Max, 4),
			}
			for _, q := range reqs {
				if err := q.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		wantBlocks := hierReference(wire.DtypeI64, Sum, n, n*size)
		for r := range n {
			if !bytes.Equal(sums[r], wantSum) || !bytes.Equal(bcs[r], bc) || !bytes.Equal(gathered[r], wantGather) {
				t.Fatalf("rank %d: wrong allreduce, bcast or allgather result", r)
			}
			if !bytes.Equal(blocks[r], wantBlocks[r*8*size:(r+1)*8*size]) || !bytes.Equal(scattered[r], wantGather[r*8:(r+1)*8]) {
				t.Fatalf("rank %d: wrong reducescatter or scatter result", r)
			}
			for j := range n {
				if v := binary.LittleEndian.Uint64(exchanged[r][8*j:]); v != uint64(100*j+r) {
					t.Fatalf("rank %d: alltoall block from rank %d is %d, want %d", r, j, v, 100*j+r)
				}
			}
		}
		if !bytes.Equal(atRoot, wantGather) {
			t.Fatal("gather to rank 2: wrong result")
		}
		if !bytes.Equal(maxes[4], wantMax) {
			t.Fatal("reduce to rank 4: wrong result")
		}
	})
}

// hierMatrixReduceScatter reduce-scatters every element type and
// reduction, at blocks of one element, a few, and more than a chunk of
// the segment over all ranks.
func hierMatrixReduceScatter(t *testing.T, comms []*Communicator) {
	t.Helper()
	n := len(comms)
	for _, dt := range hierDtypes {
		for _, op := range hierOps {
			for _, size := range []int{1, 100, shmChunk/8 + 5} {
				b := size * dt.Size()
				want := hierReference(dt, op, n, n*size)
				got := make([][]byte, n)
				simRun(t, comms, func(ctx context.Context, c *Communicator) error {
					got[c.Rank()] = make([]byte, b)
					return c.ReduceScatterBytes(ctx, rankInput(dt, c.Rank(), n*size), got[c.Rank()], dt, op)
				})
				for r := range n {
					if !bytes.Equal(got[r], want[r*b:(r+1)*b]) {
						t.Fatalf("reducescatter %v %v %d elements a rank: rank %d got a wrong block", dt, op, size, r)
					}
				}
			}
		}
	}
}

// hierMatrixGatherScatter gathers and scatters blocks of every size from
// and to every root, in place at some roots.
func hierMatrixGatherScatter(t *testing.T, comms []*Communicator) {
	t.Helper()
	n := len(comms)
	block := func(r, size int) []byte { return rankInput(wire.DtypeI32, r+11, size/4+1)[:size] }
	for root := range n {
		for _, size := range []int{1, 1000, 2*shmChunk + 3} {
			var all []byte
			for r := range n {
				all = append(all, block(r, size)...)
			}
			inPlace := root%2 == 1
			var gathered []byte
			simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				r := c.Rank()
				if r != root {
					return c.Gather(ctx, block(r, size), nil, root)
				}
				gathered = make([]byte, n*size)
				if inPlace {
					copy(gathered[r*size:], block(r, size))
					return c.Gather(ctx, nil, gathered, root)
				}
				return c.Gather(ctx, block(r, size), gathered, root)
			})
			if !bytes.Equal(gathered, all) {
				t.Fatalf("gather of %d bytes a rank to root %d (in place %v): other bytes", size, root, inPlace)
			}
			got := make([][]byte, n)
			simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				r := c.Rank()
				if r != root {
					got[r] = make([]byte, size)
					return c.Scatter(ctx, nil, got[r], root)
				}
				send := append([]byte(nil), all...)
				if inPlace {
					got[r] = send[r*size : (r+1)*size]
					return c.Scatter(ctx, send, nil, root)
				}
				got[r] = make([]byte, size)
				return c.Scatter(ctx, send, got[r], root)
			})
			for r := range n {
				if !bytes.Equal(got[r], all[r*size:(r+1)*size]) {
					t.Fatalf("scatter of %d bytes a rank from root %d (in place %v): rank %d got other bytes", size, root, inPlace, r)
				}
			}
		}
	}
}

// hierMatrixAlltoall exchanges blocks of one byte, a few and more than a
// chunk of the segment per rank.
func hierMatrixAlltoall(t *testing.T, comms []*Communicator) {
	t.Helper()
	n := len(comms)
	block := func(from, to, size int) []byte { return rankInput(wire.DtypeI32, from*31+to, size/4+1)[:size] }
	for _, size := range []int{1, 1000, shmChunk/2 + 7} {
		got := make([][]byte, n)
		simRun(t, comms, func(ctx context.Context, c *Communicator) error {
			r := c.Rank()
			var send []byte
			for to := range n {
				send = append(send, block(r, to, size)...)
			}
			got[r] = make([]byte, n*size)
			return c.Alltoall(ctx, send, got[r])
		})
		for r := range n {
			for from := range n {
				if !bytes.Equal(got[r][from*size:(from+1)*size], block(from, r, size)) {
					t.Fatalf("alltoall of %d bytes a block: rank %d got other bytes from rank %d", size, r, from)
				}
			}
		}
	}
}

// TestSimHierarchyDisagreement: ranks whose hierarchy settings differ
// (one launched with NDMA_HIERARCHY=off) would wait for each other's
// collectives forever; every rank's New fails instead, saying which
// ranks chose what.
func TestSimHierarchyDisagreement(t *testing.T) {
	simShm(t)
	l := hierLayouts[2]
	auto := hierConfig(l, nil)
	configure := func(cfg *Config) {
		auto(cfg)
		if cfg.Rank == 1 || cfg.Rank == 4 {
			cfg.Hierarchy = HierarchyOff
		}
	}
	for _, innet := range []bool{false, true} {
		simWorldJoin(t, len(l.host), innet, figLink(), 9, configure, func(t *testing.T, _ *simnet.Network, comms []*Communicator, errs []error) {
			for r, err := range errs {
				if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "auto on ranks 0,2-3,5, off on ranks 1,4") {
					t.Errorf("in-network %v: rank %d: %v", innet, r, err)
				}
				if comms[r] != nil {
					t.Errorf("rank %d: a communicator despite the disagreement", r)
				}
			}
			if left := segmentsLeft(t); len(left) > 0 {
				t.Errorf("segments left: %v", left)
			}
		})
	}
}

func TestRankList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"}} {
		if got := rankList(c.in); got != c.want {
			t.Errorf("rankList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	var many []int
	for r := 0; r < 100; r += 2 {
		many = append(many, r)
	}
	if got := rankList(many); strings.Count(got, ",") != 16 || !strings.HasSuffix(got, ",…") {
		t.Errorf("50 runs: %q", got)
	}
}
