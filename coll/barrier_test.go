package coll

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

func TestBarrier(t *testing.T) {
	for _, n := range testRanks {
		testBarrier(t, udpComms(t, n, false))
	}
}

// testBarrier checks that no rank leaves a barrier before every rank has
// entered it, blocking and non-blocking.
func testBarrier(t *testing.T, comms []*Communicator) {
	t.Helper()
	const rounds = 6
	var entered [rounds]atomic.Int32
	n := int32(len(comms))
	runAll(t, comms, func(ctx context.Context, c *Communicator) error {
		for k := range rounds {
			entered[k].Add(1)
			var err error
			if k%2 == 0 {
				err = c.Barrier(ctx)
			} else {
				err = c.Ibarrier(ctx).Wait(ctx)
			}
			if err != nil {
				return err
			}
			if got := entered[k].Load(); got != n {
				return fmt.Errorf("round %d: left with %d of %d ranks entered", k, got, n)
			}
		}
		return nil
	})
}
