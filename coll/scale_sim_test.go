package coll

import (
	"context"
	"testing"

	"github.com/ndma/ndma/netio/simnet"
)

// TestSimScale256: 256 ranks on simnet (100 Mbit/s, 5 µs, MTU 9000):
// in-network Allreduce of 1 MiB and Bcast are correct, and the allreduce
// stays within 1.15 S/B (host ring would need about 2x).
func TestSimScale256(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("256 endpoints in the simulator")
	}
	const n, size = 256, 1 << 20
	simWorld(t, n, true, figLink(), 3, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		send := make([][]int32, n)
		recv := make([][]int32, n)
		for i := range n {
			send[i] = make([]int32, size/4)
			recv[i] = make([]int32, size/4)
			for j := range send[i] {
				send[i][j] = int32(i + j%3)
			}
		}
		d := measure(t, comms, func(ctx context.Context, c *Communicator) error {
			return Allreduce(ctx, c, send[c.Rank()], recv[c.Rank()], Sum, WithAlgo(AlgoInNet))
		})
		for i := range n {
			for j, v := range recv[i] {
				if want := int32(n*(n-1)/2 + n*(j%3)); v != want {
					t.Fatalf("rank %d element %d: %d, want %d", i, j, v, want)
				}
			}
		}
		ratio := float64(d) / float64(sOverB(size))
		t.Logf("allreduce 1 MiB, 256 ranks: %v = %.3f x S/B", d, ratio)
		if ratio > 1.15 {
			t.Errorf("allreduce at 256 ranks: %.3f x S/B, want <= 1.15", ratio)
		}
		buf := make([][]byte, n)
		for i := range buf {
			buf[i] = make([]byte, size)
		}
		for j := range buf[0] {
			buf[0][j] = byte(j * 7)
		}
		d = measure(t, comms, func(ctx context.Context, c *Communicator) error {
			return c.Bcast(ctx, buf[c.Rank()], 0, WithAlgo(AlgoInNet))
		})
		for i := 1; i < n; i++ {
			if buf[i][size-1] != buf[0][size-1] || buf[i][12345] != buf[0][12345] {
				t.Fatalf("rank %d: bcast data differs", i)
			}
		}
		t.Logf("bcast 1 MiB, 256 ranks: %v = %.3f x S/B", d, float64(d)/float64(sOverB(size)))
	})
}
