package coll

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// The collectives' target figures on simnet: 8 ranks, 100 Mbit/s links, 5 µs latency,
// MTU 9000, virtual time (synctest). Asserted: in-network Bcast versus the
// host algorithms and S/B, in-network Allreduce versus ring and S/B,
// in-network Allgather of 1 MiB blocks versus the host algorithms and its
// bound. Not yet covered: the tuner's 10% figure and the 256-rank run.

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
			// Figure: in-network Bcast no slower than the best host
			// algorithm at every size, and within 1.1 S/B at 16 MiB.
			if innet > best {
				t.Errorf("bcast %d: innet %v slower than the best host algorithm %v", size, innet, best)
			}
			if size == 16<<20 && float64(innet) > 1.1*float64(sOverB(size)) {
				t.Errorf("bcast 16 MiB: innet %.3f x S/B, want <= 1.1", float64(innet)/float64(sOverB(size)))
			}
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
			// Figure: in-network Allreduce >= 1.6x faster than ring and
			// within 1.1 S/B at 16 MiB.
			if size == 16<<20 {
				if float64(ring) < 1.6*float64(innet) {
					t.Errorf("allreduce 16 MiB: ring/innet %.2f, want >= 1.6", float64(ring)/float64(innet))
				}
				if float64(innet) > 1.1*float64(sOverB(size)) {
					t.Errorf("allreduce 16 MiB: innet %.3f x S/B, want <= 1.1", float64(innet)/float64(sOverB(size)))
				}
			}
		}
		// Allgather of 1 MiB blocks, after the Bcasts above (rank 0's
		// multicast stream has then learnt its base delay uncongested,
		// the other ranks' streams learn theirs in the Allgather): each
		// rank's link carries the other seven blocks down, 7 × S/B of a
		// block. Figure: no slower than the best host algorithm; its
		// bound is not reached (1.12-1.13×: TestSimAllgatherControlFirst
		// says why), and 1.14× guards what the merged ACKs' queueing
		// (Ack.QDelay) brought (1.149× before).
		allgatherFigure(t, comms, bufs, recv, 1<<20, "", 1.14)
	})
}

// allgatherFigure measures the Allgather of block-byte blocks with every
// algorithm and checks the figure: in-network no slower than the best
// host algorithm, and within maxRatio of its bound (each rank's link
// carries the other blocks down, (n-1) × S/B of a block).
func allgatherFigure(t *testing.T, comms []*Communicator, bufs, recv [][]byte, block int, label string, maxRatio float64) {
	t.Helper()
	n := len(comms)
	row := fmt.Sprintf("allgather %8d%s:", block, label)
	bound := time.Duration(n-1) * sOverB(block)
	var innet, best time.Duration
	for _, a := range Algorithms[OpAllgather] {
		d := measure(t, comms, func(ctx context.Context, c *Communicator) error {
			return c.Allgather(ctx, bufs[c.Rank()][:block], recv[c.Rank()][:n*block], WithAlgo(a))
		})
		row += fmt.Sprintf(" %s=%v", a, d)
		if a == AlgoInNet {
			innet = d
		} else if best == 0 || d < best {
			best = d
		}
	}
	t.Logf("%s  innet/best-host=%.3f  innet/bound=%.3f", row, float64(innet)/float64(best), float64(innet)/float64(bound))
	if innet > best {
		t.Errorf("allgather %d: innet %v slower than the best host algorithm %v", block, innet, best)
	}
	if float64(innet) > maxRatio*float64(bound) {
		t.Errorf("allgather %d: innet %.3f x its bound, want <= %.2f", block, float64(innet)/float64(bound), maxRatio)
	}
}

// TestSimAllgatherControlFirst: where the ports send control datagrams
// (ACKs) ahead of queued data (LinkConfig.ControlFirst) and every rank's
// multicast stream has learnt its base delay uncongested (a 1 MiB Bcast
// from each rank first), the in-network Allgather of 1 MiB blocks comes
// within 3% of its bound (1.014×), no slower than every host algorithm.
// On FIFO ports, in the same state, it takes 1.04-1.06×: a merged ACK
// waits behind the data the other streams queued on its sender's
// downlink, and the links idle while the next datagram crosses the
// uplink. With streams whose bases were learnt in different conditions
// (a fresh world, or after rank 0's Bcast only, as in TestSimFigures),
// priority does not help (1.09-1.15× either way): the streams share the
// links unfairly and the last one finishes alone.
func TestSimAllgatherControlFirst(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("moves 8 MiB per rank through the simulator")
	}
	const n, block = 8, 1 << 20
	link := figLink()
	link.ControlFirst = true
	simWorld(t, n, true, link, 1, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		bufs := make([][]byte, n)
		recv := make([][]byte, n)
		for i := range bufs {
			bufs[i] = make([]byte, block)
			recv[i] = make([]byte, n*block)
		}
		for root := range n {
			simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				return c.Bcast(ctx, bufs[c.Rank()], root, WithAlgo(AlgoInNet))
			})
		}
		allgatherFigure(t, comms, bufs, recv, block, ", control first", 1.03)
	})
}

// TestSimDeterministic runs the same in-network calls in two fresh
// simulated worlds with the same seed: a Bcast, Allreduces and an
// Allgather (eight senders at once) must take the same virtual time to the
// nanosecond, or a figure asserted on simnet depends on how goroutines
// happened to be scheduled rather than on the protocol. (The network runs
// with Quiesce: without it, the order in which the ranks' goroutines
// wrote at one virtual instant decided the order in which the switch saw
// their packets, and two Allgathers differed by up to 2%.)
func TestSimDeterministic(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("moves 1 MiB per rank through the simulator, twice")
	}
	const n, size = 8, 1 << 20
	run := func() []time.Duration {
		var ds []time.Duration
		simWorld(t, n, true, figLink(), 7, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
			bufs := make([][]byte, n)
			recv := make([][]byte, n)
			for i := range bufs {
				bufs[i] = make([]byte, size)
				recv[i] = make([]byte, n*size)
			}
			ds = append(ds, simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				return c.Bcast(ctx, bufs[c.Rank()], 0, WithAlgo(AlgoInNet))
			}))
			for range 2 {
				ds = append(ds, simRun(t, comms, func(ctx context.Context, c *Communicator) error {
					return c.AllreduceBytes(ctx, bufs[c.Rank()], recv[c.Rank()][:size], wire.DtypeF32, Sum, WithAlgo(AlgoInNet))
				}))
			}
			ds = append(ds, simRun(t, comms, func(ctx context.Context, c *Communicator) error {
				return c.Allgather(ctx, bufs[c.Rank()], recv[c.Rank()], WithAlgo(AlgoInNet))
			}))
		})
		return ds
	}
	a, b := run(), run()
	t.Logf("bcast, allreduce, allreduce, allgather: %v and %v", a, b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("the same calls with the same seed took %v, then %v", a, b)
	}
}
