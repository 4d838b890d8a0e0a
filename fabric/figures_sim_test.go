package fabric_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// The forwarding node's target figures, on simnet (deterministic, so they are tests):
// 8 members, 100 Mbit/s links, 5 µs latency, MTU 9000.

const (
	figRate    = 100e6
	figLatency = 5 * time.Microsecond
	figMembers = 8
	figSize    = 16 << 20
)

func figLink(loss float64) simnet.LinkConfig {
	return simnet.LinkConfig{Rate: figRate, Latency: figLatency, Loss: loss}
}

func bound(size int) time.Duration {
	return time.Duration(float64(size*8) / figRate * float64(time.Second))
}

// timeMulticast returns the virtual time from posting a multicast of size
// bytes to the sender's completion (every member has it).
func timeMulticast(t *testing.T, loss float64, size int) time.Duration {
	return multicastRun(t, 31, loss, size, 0, nil)
}

// multicastRun is timeMulticast on a fabric of the given seed; with
// every > 0 the run advances every at a time and calls between(members)
// before each step.
func multicastRun(t *testing.T, seed int64, loss float64, size int, every time.Duration, between func([]*simMember)) time.Duration {
	f := newSimFabric(t, seed, figLink(loss), fabric.Config{})
	ms := f.addMembers(figMembers)
	gid := f.join("fig", ms)
	data := randBytes(rand.New(rand.NewPCG(1, 1)), size)
	for i := 1; i < figMembers; i++ {
		ms[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: gid, From: 0, Buf: make([]byte, size)}, nil)
	}
	start := f.net.Elapsed()
	var end time.Duration
	ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: gid, Buf: data}, func(op *endpoint.Op) {
		if op.Err != nil {
			t.Fatalf("multicast: %v", op.Err)
		}
		end = f.net.Elapsed()
	})
	if every <= 0 {
		f.run(func() bool { return end != 0 }, 10*time.Minute, "multicast")
	}
	for every > 0 && end == 0 {
		if f.net.Elapsed()-start > 10*time.Minute {
			t.Fatalf("seed %d: multicast not done after 10 minutes", seed)
		}
		between(ms)
		f.net.RunFor(every)
	}
	st := ms[0].core.Stats().Transport
	t.Logf("sender: sent %d, retransmitted %d (fast %d, timeouts %d)", st.PacketsSent, st.PacketsRetransmitted, st.FastRetransmits, st.Timeouts)
	return end - start
}

func timeAllreduce(t *testing.T, loss float64, size int) time.Duration {
	f := newSimFabric(t, 32, figLink(loss), fabric.Config{})
	ms := f.addMembers(figMembers)
	gid := f.join("fig", ms)
	start := f.net.Elapsed()
	var end time.Duration
	pending := figMembers
	for _, m := range ms {
		m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: gid, Buf: make([]byte, size), Recv: make([]byte, size), Root: -1,
			Dtype: wire.DtypeF32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
			if op.Err != nil {
				t.Fatalf("allreduce: %v", op.Err)
			}
			if pending--; pending == 0 {
				end = f.net.Elapsed()
			}
		})
	}
	f.run(func() bool { return end != 0 }, 10*time.Minute, "allreduce")
	return end - start
}

// TestFigures checks the target figures and logs them for
// docs/BENCHMARKS.md.
func TestFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 16 MiB per member through the simulator")
	}
	sb := bound(figSize)
	mc := timeMulticast(t, 0, figSize)
	mcLimit := sb + 2*figLatency
	t.Logf("multicast 16 MiB, 8 members: %v = %.3f x (S/B + 2 lat) [limit 1.08]", mc, float64(mc)/float64(mcLimit))
	if float64(mc) > 1.08*float64(mcLimit) {
		t.Errorf("multicast %.3f x (S/B + 2 lat), want <= 1.08", float64(mc)/float64(mcLimit))
	}
	ar := timeAllreduce(t, 0, figSize)
	t.Logf("allreduce 16 MiB f32 sum, 8 members: %v = %.3f x S/B [limit 1.10]", ar, float64(ar)/float64(sb))
	if float64(ar) > 1.10*float64(sb) {
		t.Errorf("allreduce %.3f x S/B, want <= 1.10", float64(ar)/float64(sb))
	}
	mcl := timeMulticast(t, 0.01, figSize)
	arl := timeAllreduce(t, 0.01, figSize)
	t.Logf("1%% loss on every link: multicast %v = %.3f x lossless, allreduce %v = %.3f x lossless [limit 1.3]",
		mcl, float64(mcl)/float64(mc), arl, float64(arl)/float64(ar))
	for _, x := range []struct {
		name string
		r    float64
	}{{"multicast", float64(mcl) / float64(mc)}, {"allreduce", float64(arl) / float64(ar)}} {
		if x.r > 1.3 {
			t.Errorf("%s at 1%% loss: %.3f x lossless, want <= 1.3", x.name, x.r)
		}
	}
}
