package fabric_test

import (
	"math/rand/v2"
	"testing"
	"time"
)

// timeMulticastStalled is timeMulticast with receivers that are not
// scheduled now and then: every period, one receiver drawn at random
// stalls for stall (simnet.Network.Stall), as a process on a busy or
// oversubscribed machine does.
func timeMulticastStalled(t *testing.T, size int, stall, period time.Duration, seed uint64) time.Duration {
	r := rand.New(rand.NewPCG(seed, 7))
	return multicastRun(t, 33, 0, size, period, func(ms []*simMember) {
		if stall > 0 {
			ms[0].f.net.Stall(ms[1+r.IntN(figMembers-1)].addr, stall)
		}
	})
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
