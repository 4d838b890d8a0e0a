package fabric_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
)

// timeMulticastStalled is timeMulticast with receivers that are not
// scheduled now and then: every period, one receiver drawn at random
// stalls for stall (simnet.Network.Stall), as a process on a busy or
// oversubscribed machine does.
func timeMulticastStalled(t *testing.T, size int, stall, period time.Duration, seed uint64) time.Duration {
	f := newSimFabric(t, 33, figLink(0), fabric.Config{})
	ms := f.addMembers(figMembers)
	gid := f.join("fig", ms)
	data := randBytes(rand.New(rand.NewPCG(1, 1)), size)
	for i := 1; i < figMembers; i++ {
		ms[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: gid, From: 0, Buf: make([]byte, size)}, nil)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	start := f.net.Elapsed()
	var end time.Duration
	ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: gid, Buf: data}, func(op *endpoint.Op) {
		if op.Err != nil {
			t.Fatalf("multicast: %v", op.Err)
		}
		end = f.net.Elapsed()
	})
	for end == 0 {
		if f.net.Elapsed()-start > time.Minute {
			t.Fatalf("multicast not done after a minute")
		}
		if stall > 0 {
			f.net.Stall(ms[1+r.IntN(figMembers-1)].addr, stall)
		}
		f.net.RunFor(period)
	}
	st := ms[0].core.Stats().Transport
	t.Logf("sender: sent %d, retransmitted %d (fast %d, timeouts %d)", st.PacketsSent, st.PacketsRetransmitted, st.FastRetransmits, st.Timeouts)
	return end - start
}

// TestSimMulticastStalls: a 16 MiB multicast whose receivers now and
// then go unscheduled for a few milliseconds (one at a time, drawn at
// random) stays near the link bound: the merged ACK waits for the stalled
// receiver, and the sender keeps clocking packets out meanwhile (the
// transport's stall allowance) instead of idling for every stall.
func TestSimMulticastStalls(t *testing.T) {
	for _, c := range []struct {
		stall, period time.Duration
		max           float64 // time over S/B
	}{
		{0, 30 * time.Millisecond, 1.02},
		// A receiver out for 4 ms in every 30: 1.078x without the
		// allowance, 1.033x with it.
		{4 * time.Millisecond, 30 * time.Millisecond, 1.05},
		// 2 ms in every 10: 1.018x without, 1.013x with.
		{2 * time.Millisecond, 10 * time.Millisecond, 1.02},
	} {
		d := timeMulticastStalled(t, figSize, c.stall, c.period, 1)
		r := float64(d) / float64(bound(figSize))
		t.Logf("stall %v every %v: %v = %.3f S/B", c.stall, c.period, d, r)
		if r > c.max {
			t.Errorf("stall %v every %v: multicast took %.3fx S/B, want at most %.2fx", c.stall, c.period, r, c.max)
		}
	}
}
