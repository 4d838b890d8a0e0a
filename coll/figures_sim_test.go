package coll

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// The figures on simnet: 8 ranks, 100 Mbit/s links, 5 µs latency,
// MTU 9000, virtual time (synctest).

func figLink() simnet.LinkConfig {
	return simnet.LinkConfig{Rate: 100e6, Latency: 5 * time.Microsecond}
}

func sOverB(size int) time.Duration {
	return time.Duration(float64(size*8) / 100e6 * float64(time.Second))
}

// measure returns the virtual time of one collective (after one warm-up
// call), as the slowest rank sees it.
func measure(t *testing.T, comms []*Communicator, f func(ctx context.Context, c *Communicator) error) time.Duration {
	simRun(t, comms, f) // warm-up: connections, windows
	return simRun(t, comms, f)
}

func TestSimFigures(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("moves up to 16 MiB per rank through the simulator")
	}
	const n = 8
	simWorld(t, n, true, figLink(), 1, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		bufs := make([][]byte, n)
		recv := make([][]byte, n)
		for i := range bufs {
			bufs[i] = make([]byte, 16<<20)
			recv[i] = make([]byte, 16<<20)
		}
		for _, size := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
			row := fmt.Sprintf("bcast %8d:", size)
			best := time.Duration(0)
			var innet time.Duration
			for _, a := range Algorithms[OpBcast] {
				d := measure(t, comms, func(ctx context.Context, c *Communicator) error {
					return c.Bcast(ctx, bufs[c.Rank()][:size], 0, WithAlgo(a))
				})
				row += fmt.Sprintf(" %s=%v", a, d)
				if a == AlgoInNet {
					innet = d
				} else if best == 0 || d < best {
					best = d
				}
			}
			t.Logf("%s  innet/best-host=%.2f  innet/(S/B)=%.3f", row, float64(innet)/float64(best), float64(innet)/float64(sOverB(size)))
		}
		for _, size := range []int{64 << 10, 16 << 20} {
			row := fmt.Sprintf("allreduce %8d:", size)
			var innet, ring time.Duration
			for _, a := range Algorithms[OpAllreduce] {
				d := measure(t, comms, func(ctx context.Context, c *Communicator) error {
					return c.AllreduceBytes(ctx, bufs[c.Rank()][:size], recv[c.Rank()][:size], wire.DtypeF32, Sum, WithAlgo(a))
				})
				row += fmt.Sprintf(" %s=%v", a, d)
				switch a {
				case AlgoInNet:
					innet = d
				case AlgoRing:
					ring = d
				}
			}
			t.Logf("%s  ring/innet=%.2f  innet/(S/B)=%.3f", row, float64(ring)/float64(innet), float64(innet)/float64(sOverB(size)))
		}
	})
}
