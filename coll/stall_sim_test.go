package coll

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
)

// TestSimStalledRankResumes: a rank that stops for 5 s (SIGSTOP, a
// debugger, a suspended host: it sends and receives nothing) while the
// ranks run collectives in a loop. The others fail with a RankError, as
// for a dead rank; the stalled rank, once it runs again, must fail too
// within a bound, never hang.
func TestSimStalledRankResumes(t *testing.T) {
	const n, stall = 3, 5 * time.Second
	for i, dc := range []deadCase{{OpAllreduce, AlgoInNet}, {OpAllreduce, AlgoRing}, {OpBcast, AlgoInNet}, {OpBarrier, AlgoAuto}} {
		t.Run(fmt.Sprintf("%s/%s", dc.op, dc.algo), func(t *testing.T) {
			simWorld(t, n, true, figLink(), int64(900+i), func(t *testing.T, net *simnet.Network, comms []*Communicator) {
				const victim = 1
				errs := make([]error, n)
				ended := make([]time.Time, n)
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Go(func() {
						for call := 0; ; call++ {
							if err := dc.run(context.Background(), c, call); err != nil {
								errs[r], ended[r] = err, time.Now()
								return
							}
						}
					})
				}
				time.Sleep(20 * time.Millisecond)
				start := time.Now()
				net.Locked(func() { net.Stall(comms[victim].ep.LocalAddr(), stall) })
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(stall + time.Minute):
					t.Fatalf("a minute after the stall ended some rank still runs: errors %v", errs)
				}
				for r, err := range errs {
					var re *RankError
					took := ended[r].Sub(start)
					t.Logf("rank %d after %v: %v", r, took, err)
					if r != victim && (!errors.As(err, &re) || re.Rank != victim) {
						t.Errorf("rank %d: %v, want a RankError naming rank %d", r, err, victim)
					}
					if r == victim && err == nil {
						t.Errorf("the stalled rank's calls succeeded")
					}
				}
				if took := ended[victim].Sub(start); took > stall+15*time.Second {
					t.Errorf("the stalled rank failed %v after its stall began (%v stall)", took, stall)
				}
			})
		})
	}
}
