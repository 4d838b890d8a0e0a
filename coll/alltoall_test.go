package coll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

func TestAlltoall(t *testing.T) {
	for _, w := range worlds(t, OpAlltoall) {
		for _, algo := range algosFor(OpAlltoall, w) {
			for _, b := range sizesFor(w.n) {
				t.Run(fmt.Sprintf("%s/n=%d/b=%d", algo, w.n, b), func(t *testing.T) {
					checkAlltoall(t, w.comms, algo, b)
				})
			}
		}
	}
}

// checkAlltoall runs one all-to-all where rank r's block j is
// pattern(r, j) and checks that rank j's block r is it.
func checkAlltoall(t *testing.T, comms []*Communicator, algo Algo, b int) {
	t.Helper()
	n := len(comms)
	recvs := make([][]byte, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		var send []byte
		for j := range n {
			send = append(send, pattern(r, j, b, 4)...)
		}
		recvs[r] = make([]byte, n*b)
		return c.Alltoall(ctx, send, recvs[r], WithAlgo(algo))
	})
	for j, got := range recvs {
		var want []byte
		for r := range n {
			want = append(want, pattern(r, j, b, 4)...)
		}
		sameBytes(t, fmt.Sprintf("rank %d", j), got, want)
	}
}

func TestAlltoallArgs(t *testing.T) {
	comms := udpComms(t, 3, false)
	c := comms[0]
	ctx := context.Background()
	if err := c.Alltoall(ctx, make([]byte, 12), make([]byte, 9)); !errors.Is(err, ErrArg) {
		t.Errorf("recv short: %v, want ErrArg", err)
	}
	if err := c.Ialltoall(ctx, make([]byte, 10), make([]byte, 10)).Wait(ctx); !errors.Is(err, ErrArg) {
		t.Errorf("not a multiple: %v, want ErrArg", err)
	}
	if err := c.Alltoall(ctx, nil, nil, WithAlgo(AlgoRing)); !errors.Is(err, ErrArg) {
		t.Errorf("unsupported algorithm: %v, want ErrArg", err)
	}
}

// TestNonBlockingInFlight starts every data-movement collective, with
// every algorithm, at once on each rank (in the same order everywhere),
// then waits for all and checks each result.
func TestNonBlockingInFlight(t *testing.T) {
	for _, tc := range []struct {
		n     int
		innet bool
	}{{5, false}, {5, true}} {
		t.Run(fmt.Sprintf("n=%d/innet=%v", tc.n, tc.innet), func(t *testing.T) {
			comms := udpComms(t, tc.n, tc.innet)
			checkInFlight(t, comms)
		})
	}
}

func checkInFlight(t *testing.T, comms []*Communicator) {
	n := len(comms)
	const b = 1031 // bytes per block
	const root = 2
	innet := comms[0].InNetwork()
	type result struct {
		name      string
		got, want []byte
	}
	results := make([][]result, n)
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		r := c.Rank()
		var reqs []*Request
		var res []result
		add := func(name string, req *Request, got, want []byte) {
			reqs = append(reqs, req)
			res = append(res, result{name, got, want})
		}
		var all []byte // every rank's block 0 in rank order
		for i := range n {
			all = append(all, pattern(i, 0, b, 5)...)
		}
		algos := func(op Operation) []Algo {
			if innet && Supported(op, AlgoInNet) {
				return []Algo{AlgoInNet, AlgoInNet} // two in-network calls overlapping
			}
			var as []Algo
			for _, a := range Algorithms[op] {
				if a != AlgoInNet {
					as = append(as, a)
				}
			}
			return as
		}
		for k, a := range algos(OpAllgather) {
			recv := make([]byte, n*b)
			add(fmt.Sprintf("allgather %d %s", k, a), c.Iallgather(ctx, pattern(r, 0, b, 5), recv, WithAlgo(a)), recv, all)
		}
		for k, a := range algos(OpReduceScatter) {
			const cnt = 257 // int32 elements per block
			send := make([]int32, n*cnt)
			for i := range send {
				send[i] = int32(r*100003 + i*3 + k)
			}
			want := make([]int32, cnt)
			for i := range want {
				for rr := range n {
					want[i] += int32(rr*100003 + (r*cnt+i)*3 + k)
				}
			}
			recv := make([]int32, cnt)
			add(fmt.Sprintf("reducescatter %d %s", k, a), c.IreduceScatterBytes(ctx, asBytes(send), asBytes(recv), wire.DtypeI32, Sum, WithAlgo(a)), asBytes(recv), asBytes(want))
		}
		for _, a := range algos(OpGather) {
			var recv, want []byte
			if r == root {
				recv, want = make([]byte, n*b), all
			}
			add("gather "+string(a), c.Igather(ctx, pattern(r, 0, b, 5), recv, root, WithAlgo(a)), recv, want)
		}
		for _, a := range algos(OpScatter) {
			var send []byte
			if r == root {
				send = all
			}
			recv := make([]byte, b)
			add("scatter "+string(a), c.Iscatter(ctx, send, recv, root, WithAlgo(a)), recv, pattern(r, 0, b, 5))
		}
		for _, a := range algos(OpAlltoall) {
			var send, want []byte
			for j := range n {
				send = append(send, pattern(r, j, b, 6)...)
				want = append(want, pattern(j, r, b, 6)...)
			}
			recv := make([]byte, n*b)
			add("alltoall "+string(a), c.Ialltoall(ctx, send, recv, WithAlgo(a)), recv, want)
		}
		for i, req := range reqs {
			if err := req.Wait(ctx); err != nil {
				return fmt.Errorf("%s: %w", res[i].name, err)
			}
		}
		results[r] = res
		return nil
	})
	for r, res := range results {
		for _, x := range res {
			sameBytes(t, fmt.Sprintf("rank %d: %s", r, x.name), x.got, x.want)
		}
	}
}

// TestDataMovementLossy runs every algorithm of Allgather, ReduceScatter,
// Gather, Scatter and Alltoall on a simulated network that loses 2% of
// datagrams (virtual time, deterministic by seed).
func TestDataMovementLossy(t *testing.T) {
	link := simnet.LinkConfig{Rate: 10e9, Latency: 20 * time.Microsecond, Loss: 0.02}
	for _, tc := range []struct {
		innet bool
		seed  int64
	}{{false, 1}, {false, 2}, {true, 1}, {true, 2}} {
		innet := tc.innet
		t.Run(fmt.Sprintf("innet=%v/seed=%d", innet, tc.seed), func(t *testing.T) {
			simWorld(t, 5, innet, link, tc.seed, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
				w := world{5, innet, comms}
				const b = 20011 // several datagrams per block
				for _, a := range algosFor(OpAllgather, w) {
					checkAllgather(t, comms, a, b, false)
				}
				for _, a := range algosFor(OpReduceScatter, w) {
					checkReduceScatter(t, comms, a, b/4, Sum,
						func(r, i int) int32 { return int32(r*1000003 + i*7919) },
						func(a, b int32) int32 { return a + b })
				}
				if innet {
					return // the rest have no in-network algorithm
				}
				for _, a := range Algorithms[OpGather] {
					checkGather(t, comms, a, b, 3, false)
				}
				for _, a := range Algorithms[OpScatter] {
					checkScatter(t, comms, a, b, 4, false)
				}
				for _, a := range Algorithms[OpAlltoall] {
					checkAlltoall(t, comms, a, b)
				}
			})
		})
	}
}
