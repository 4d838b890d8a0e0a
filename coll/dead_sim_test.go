package coll

import (
	"context"
	"errors"
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
)

// deadCase is one collective the ranks repeat until a rank dies.
type deadCase struct {
	name string
	run  func(ctx context.Context, c *Communicator) error
}

func deadCases(innet bool) []deadCase {
	buf := func() []float32 { return make([]float32, 20000) }
	cs := []deadCase{
		{"allreduce/ring", func(ctx context.Context, c *Communicator) error {
			b := buf()
			return Allreduce(ctx, c, nil, b, Sum, WithAlgo(AlgoRing))
		}},
		{"allreduce/recursive_doubling", func(ctx context.Context, c *Communicator) error {
			b := buf()
			return Allreduce(ctx, c, nil, b, Sum, WithAlgo(AlgoRecursiveDoubling))
		}},
		{"bcast/binomial", func(ctx context.Context, c *Communicator) error {
			return c.Bcast(ctx, make([]byte, 80000), 0, WithAlgo(AlgoBinomial))
		}},
		{"barrier/dissemination", func(ctx context.Context, c *Communicator) error {
			return c.Barrier(ctx, WithAlgo(AlgoRecursiveDoubling))
		}},
	}
	if innet {
		cs = append(cs,
			deadCase{"allreduce/innet", func(ctx context.Context, c *Communicator) error {
				b := buf()
				return Allreduce(ctx, c, nil, b, Sum, WithAlgo(AlgoInNet))
			}},
			deadCase{"barrier/innet", func(ctx context.Context, c *Communicator) error {
				return c.Barrier(ctx, WithAlgo(AlgoInNet))
			}})
	}
	return cs
}

// TestSimDeadRankFailsEveryRank: a rank crashes (its endpoint closes, no
// Leave) at a random point of a loop of collectives; every surviving
// rank's collective must fail within a bound, with a *RankError — naming
// the dead rank on every survivor when a switch reports it (the crash
// breaks the group for every host algorithm's messages), naming the rank
// it waited on without one (Config.Liveness: a survivor that gave up
// goes silent too). The collectives have no context deadline: only the
// fabric's liveness ends them.
func TestSimDeadRankFailsEveryRank(t *testing.T) {
	const n = 5
	for _, innet := range []bool{true, false} {
		for i, dc := range deadCases(innet) {
			name := dc.name + "/host"
			// With a switch: its heartbeat timeout (1 s) and the endpoint's
			// heartbeat interval; without: one Liveness per survivor a
			// failure can travel through.
			bound := 3 * time.Second
			if innet {
				name = dc.name + "/switch"
			} else {
				bound = (n - 1) * DefaultLiveness
			}
			t.Run(name, func(t *testing.T) {
				seed := int64(100 + i)
				if innet {
					seed += 50
				}
				rng := rand.New(rand.NewPCG(uint64(seed), 0))
				victim := 1 + rng.IntN(n-1)
				killAfter := time.Duration(rng.Int64N(int64(20 * time.Millisecond)))
				simWorld(t, n, innet, figLink(), seed, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
					t.Logf("rank %d dies %v in", victim, killAfter)
					var killed time.Time
					errs := make([]error, n)
					took := make([]time.Duration, n)
					calls := make([]int, n)
					var wg sync.WaitGroup
					for r, c := range comms {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								calls[r]++
								if err := dc.run(context.Background(), c); err != nil {
									errs[r] = err
									took[r] = time.Since(killed)
									return
								}
							}
						}()
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
		s, err := fabric.New(fabric.Config{Transport: transport.Config{MTU: 9000, Seed: 3}})
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
			_, err := New(ctx, Config{Endpoint: eps[0], Rank: 1, Size: 3, Switch: swAddr.String(), Job: "dup"})
			first <- err
		}()
		time.Sleep(10 * time.Millisecond) // the first JOIN is at the switch
		start := time.Now()
		_, err = New(context.Background(), Config{Endpoint: eps[1], Rank: 1, Size: 3, Switch: swAddr.String(), Job: "dup"})
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
