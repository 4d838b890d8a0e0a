package coll

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// TestSimLeaveDuringReduce: a rank whose part of an in-network Reduce is
// done leaves (Close) while a slower rank's contribution is still on its
// way; the switch must still take that contribution and deliver the result
// to the root. (Found on the testbed: the switch refused every
// contribution after any member had left, and the slow rank and the root
// failed with "member N died".)
func TestSimLeaveDuringReduce(t *testing.T) {
	const n = 3
	simWorld(t, n, true, figLink(), 7, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		var sum [n]float32
		simRun(t, comms, func(ctx context.Context, c *Communicator) error {
			send := make([]byte, 4)
			binary.LittleEndian.PutUint32(send, math.Float32bits(float32(c.Rank()+1)))
			recv := make([]byte, 4)
			switch c.Rank() {
			case 1:
				time.Sleep(50 * time.Millisecond) // arrives after rank 2 left
			}
			if err := c.ReduceBytes(ctx, send, recv, wire.DtypeF32, Sum, 0, WithAlgo(AlgoInNet)); err != nil {
				return err
			}
			if c.Rank() == 2 {
				return c.Close(ctx)
			}
			sum[c.Rank()] = math.Float32frombits(binary.LittleEndian.Uint32(recv))
			return nil
		})
		if sum[0] != 6 {
			t.Errorf("root's sum %v, want 6", sum[0])
		}
	})
}
