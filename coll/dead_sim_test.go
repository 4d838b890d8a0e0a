package coll

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// deadSeed is the base of TestSimDeadRankFailsEveryRank's seeds: each
// case's seed (printed) derives from it and picks the rank that dies and
// when.
var deadSeed = flag.Int64("coll.deadseed", 1, "base seed of TestSimDeadRankFailsEveryRank (which rank dies, and when)")

// deadCase is one collective the ranks repeat until a rank dies.
type deadCase struct {
	op   Operation
	algo Algo
}

// deadCases is every operation with every algorithm it implements and
// with AlgoAuto; with innet false, those that need no switch.
func deadCases(innet bool) []deadCase {
	var cs []deadCase
	for _, op := range []Operation{OpBarrier, OpBcast, OpReduce, OpAllreduce, OpAllgather, OpReduceScatter, OpGather, OpScatter, OpAlltoall} {
		for _, a := range append([]Algo{AlgoAuto}, Algorithms[op]...) {
			if a != AlgoInNet || innet {
				cs = append(cs, deadCase{op, a})
			}
		}
	}
	return cs
}

// run runs the case's collective once on c: call numbers the calls, and
// a rooted operation's root moves from call to call, so every rank gets
// to wait for the others' data (a rank that only sends learns of a
// death from the switch, or, without one, when a root it waits on falls
// silent).
func (dc deadCase) run(ctx context.Context, c *Communicator, call int) error {
	const block = 4096 // bytes per rank
	n, w, root := c.Size(), WithAlgo(dc.algo), call%c.Size()
	switch dc.op {
	case OpBarrier:
		return c.Barrier(ctx, w)
	case OpBcast:
		return c.Bcast(ctx, make([]byte, 16*block), root, w)
	case OpReduce:
		return c.ReduceBytes(ctx, make([]byte, 16*block), make([]byte, 16*block), wire.DtypeF32, Sum, root, w)
	case OpAllreduce:
		return c.AllreduceBytes(ctx, nil, make([]byte, 16*block), wire.DtypeF32, Sum, w)
	case OpAllgather:
		return c.Allgather(ctx, make([]byte, block), make([]byte, n*block), w)
	case OpReduceScatter:
		return c.ReduceScatterBytes(ctx, make([]byte, n*block), make([]byte, block), wire.DtypeF32, Sum, w)
	case OpGather:
		return c.Gather(ctx, make([]byte, block), make([]byte, n*block), root, w)
	case OpScatter:
		return c.Scatter(ctx, make([]byte, n*block), make([]byte, block), root, w)
	case OpAlltoall:
		return c.Alltoall(ctx, make([]byte, n*block), make([]byte, n*block), w)
	}
	return fmt.Errorf("no such operation %q", dc.op)
}

// TestSimDeadRankFailsEveryRank: for every operation and algorithm
// (AlgoAuto too), with a switch and without, a rank chosen from the
// case's seed crashes (its endpoint closes, no Leave) at a point drawn
// from the seed within a loop of collectives; every surviving rank's
// collective must fail within a bound, with a *RankError — naming the
// dead rank on every survivor when a switch reports it (the crash breaks
// the group for every host algorithm's messages), naming the rank it
// waited on without one (Config.Liveness: a survivor that gave up goes
// silent too). The collectives have no context deadline: only the
// fabric's liveness ends them. -coll.deadseed draws other crashes.
func TestSimDeadRankFailsEveryRank(t *testing.T) {
	const n = 5
	t.Logf("base seed %d (-coll.deadseed)", *deadSeed)
	for _, innet := range []bool{true, false} {
		for i, dc := range deadCases(innet) {
			name := fmt.Sprintf("%s/%s/host", dc.op, dc.algo)
			// With a switch: its heartbeat timeout (1 s) and the endpoint's
			// heartbeat interval; without: one Liveness per survivor a
			// failure can travel through.
			bound := 3 * time.Second
			if innet {
				name = fmt.Sprintf("%s/%s/switch", dc.op, dc.algo)
			} else {
				bound = (n - 1) * DefaultLiveness
			}
			t.Run(name, func(t *testing.T) {
				seed := *deadSeed*1000 + int64(i)
				if innet {
					seed += 500
				}
				rng := rand.New(rand.NewPCG(uint64(seed), 0))
				victim := rng.IntN(n)
				killAfter := time.Duration(rng.Int64N(int64(30 * time.Millisecond)))
				simWorld(t, n, innet, figLink(), seed, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
					t.Logf("rank %d dies %v in", victim, killAfter)
					var killed time.Time
					errs := make([]error, n)
					took := make([]time.Duration, n)
					calls := make([]int, n)
					var wg sync.WaitGroup
					for r, c := range comms {
						wg.Go(func() {
							for {
								if err := dc.run(context.Background(), c, calls[r]); err != nil {
									errs[r] = err
									took[r] = time.Since(killed)
									return
								}
								calls[r]++
							}
						})
					}
					time.Sleep(killAfter)
					killed = time.Now()
					comms[victim].ep.Close()
					wg.Wait()
					named := 0
					for r, err := range errs {
						if r == victim {
							continue
						}
						var re *RankError
						if !errors.As(err, &re) {
							t.Fatalf("rank %d: %v, want a RankError", r, err)
						}
						if innet && re.Rank != victim {
							t.Errorf("rank %d: %v, want it to name rank %d", r, err, victim)
						}
						if re.Rank == victim {
							named++
						}
						if took[r] > bound {
							t.Errorf("rank %d failed %v after the crash, bound %v", r, took[r], bound)
						}
						t.Logf("rank %d after %d calls, %v: %v", r, calls[r], took[r], err)
					}
					if named == 0 {
						t.Errorf("no survivor names the dead rank %d", victim)
					}
				})
			})
		}
	}
}

// TestSimDuplicateRankRefused: a second process joining with a rank
// another already holds is refused at once, naming the holder, instead
// of waiting for the rendezvous to time out.
func TestSimDuplicateRankRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := simnet.New(3)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- net.Serve(ctx) }()
		swAddr := netip.MustParseAddrPort("10.0.0.1:7471")
		s, err := fabric.New(fabric.Config{Token: testToken, Transport: transport.Config{MTU: 9000, Seed: 3}})
		if err != nil {
			t.Fatal(err)
		}
		srv := fabric.NewServer(net.ListenConn(swAddr, simnet.LinkConfig{}, simnet.LinkConfig{}), s, nil)
		var eps []*endpoint.Endpoint
		for i := range 2 {
			addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 9000)
			ep, err := endpoint.New(net.ListenConn(addr, figLink(), figLink()), endpoint.Config{Transport: transport.Config{MTU: 9000, Seed: uint64(i) + 1}}, endpoint.Options{})
			if err != nil {
				t.Fatal(err)
			}
			eps = append(eps, ep)
		}
		first := make(chan error, 1)
		go func() {
			_, err := New(ctx, Config{Endpoint: eps[0], Rank: 1, Size: 3, Switch: swAddr.String(), Job: "dup", Token: testToken})
			first <- err
		}()
		time.Sleep(10 * time.Millisecond) // the first JOIN is at the switch
		start := time.Now()
		_, err = New(context.Background(), Config{Endpoint: eps[1], Rank: 1, Size: 3, Switch: swAddr.String(), Job: "dup", Token: testToken})
		if !errors.Is(err, endpoint.ErrRankTaken) || !strings.Contains(err.Error(), "rank 1 of job \"dup\" is already taken by 10.1.0.0:9000") {
			t.Fatalf("second rank 1: %v, want it refused naming 10.1.0.0:9000", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("refused after %v", took)
		}
		t.Log(err)
		for _, ep := range eps {
			ep.Close()
		}
		<-first
		srv.Close()
		cancel()
		<-served
	})
}
