package coll

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// TestMismatchAbortsEveryRank: one rank's buffer is longer than the
// others'. With each host algorithm no rank waits: a rank whose part of
// the call completed before the mismatch was found returns (a Gather's
// sender of the long block, a Bcast's root), every other
// fails at once with an argument error — those that exchange no message
// with the odd rank learn it from an abort message — and the
// communicator works again for the next call.
func TestMismatchAbortsEveryRank(t *testing.T) {
	const n = 5
	comms := udpComms(t, n, false)
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, c *Communicator, buf []byte) error
	}{
		{"allreduce ring", func(ctx context.Context, c *Communicator, buf []byte) error {
			return c.AllreduceBytes(ctx, nil, buf, wire.DtypeF32, Sum, WithAlgo(AlgoRing))
		}},
		{"allreduce rabenseifner", func(ctx context.Context, c *Communicator, buf []byte) error {
			return c.AllreduceBytes(ctx, nil, buf, wire.DtypeF32, Sum, WithAlgo(AlgoRabenseifner))
		}},
		{"bcast chain", func(ctx context.Context, c *Communicator, buf []byte) error {
			return c.Bcast(ctx, buf, 0, WithAlgo(AlgoChain))
		}},
		{"reduce binomial", func(ctx context.Context, c *Communicator, buf []byte) error {
			return c.ReduceBytes(ctx, buf, make([]byte, len(buf)), wire.DtypeF32, Sum, 0, WithAlgo(AlgoBinomial))
		}},
		{"gather", func(ctx context.Context, c *Communicator, buf []byte) error {
			blk := len(buf) / n
			return c.Gather(ctx, buf[:blk], make([]byte, 4000/n*n), 0)
		}},
		{"alltoall", func(ctx context.Context, c *Communicator, buf []byte) error {
			blk := len(buf) / n
			return c.Alltoall(ctx, buf[:blk*n], make([]byte, blk*n))
		}},
		{"allgather ring", func(ctx context.Context, c *Communicator, buf []byte) error {
			return c.Allgather(ctx, buf[:len(buf)/n/4*4], make([]byte, len(buf)/n/4*4*n), WithAlgo(AlgoRing))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make([]error, n)
			took := make([]time.Duration, n)
			var wg sync.WaitGroup
			for i, c := range comms {
				wg.Go(func() {
					size := 4000
					if i == 2 {
						size += 40 * n
					}
					t0 := time.Now()
					errs[i] = tc.run(ctx, c, make([]byte, size))
					took[i] = time.Since(t0)
				})
			}
			wg.Wait()
			failed := 0
			for i, err := range errs {
				if err != nil && !errors.Is(err, ErrArg) || took[i] > 5*time.Second {
					t.Errorf("rank %d: %v after %v, want an argument error at once", i, err, took[i])
				}
				if err != nil {
					failed++
				}
			}
			if failed == 0 {
				t.Errorf("%d ranks failed: %v", failed, errs)
			}
			// The next call, with matching buffers, succeeds everywhere.
			runAll(t, comms, func(ctx context.Context, c *Communicator) error {
				buf := make([]byte, 400)
				if err := c.AllreduceBytes(ctx, nil, buf, wire.DtypeI32, Sum, WithAlgo(AlgoRing)); err != nil {
					return fmt.Errorf("after the mismatch: %w", err)
				}
				return nil
			})
		})
	}
	if err := comms[0].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSimSplitMismatchAborts: on a communicator made by Split without a
// switch, a rank's longer buffer fails the call on every rank with an
// argument error, those that exchange nothing with it included (abort
// messages carry the split communicator's own context id), long before
// the liveness bound.
func TestSimSplitMismatchAborts(t *testing.T) {
	const n = 5
	simWorld(t, n, false, figLink(), 51, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		subs := make([]*Communicator, n)
		simRun(t, comms, func(ctx context.Context, c *Communicator) error {
			s, err := c.Split(ctx, 0, n-c.Rank())
			subs[c.Rank()] = s
			return err
		})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range subs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				size := 4000
				if i == 0 {
					size = 8000
				}
				errs[i] = c.AllreduceBytes(ctx, nil, make([]byte, size), wire.DtypeF32, Sum, WithAlgo(AlgoRing))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, ErrArg) {
				t.Errorf("rank %d: %v, want an argument error", i, err)
			}
		}
	})
}
