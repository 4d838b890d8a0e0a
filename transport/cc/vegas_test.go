package cc

import (
	"math"
	"testing"
	"time"
)

func TestVegas(t *testing.T) {
	l := VegasLimits{QueueLow: 2, QueueHigh: 8, Min: 2, Max: 64}
	for _, c := range []struct {
		name               string
		cwnd, ssthresh     float64
		rtt                RTT
		wantCwnd, wantSsth float64
	}{
		{"no estimate: slow start", 16, 64, RTT{}, 17, 64},
		{"short queue: slow start", 16, 64, RTT{SRTT: 100 * ms, Min: 90 * ms}, 17, 64}, // 1.6 queued
		{"short queue: avoidance", 32, 16, RTT{SRTT: 100 * ms, Min: 95 * ms}, 32 + 1.0/32, 16},
		{"between the bounds", 32, 64, RTT{SRTT: 100 * ms, Min: 80 * ms}, 32, 64}, // 6.4 queued
		{"long queue", 50, 64, RTT{SRTT: 100 * ms, Min: 50 * ms}, 50 - 1.0/50, 50},
		{"long queue, below ssthresh", 50, 20, RTT{SRTT: 100 * ms, Min: time.Millisecond}, 50 - 1.0/50, 20},
		{"cap", 64, 128, RTT{SRTT: 100 * ms, Min: 100 * ms}, 64, 128},
	} {
		v := Vegas{Cwnd: c.cwnd, Ssthresh: c.ssthresh}
		v.OnAnswer(&l, &c.rtt)
		if math.Abs(v.Cwnd-c.wantCwnd) > 1e-12 || v.Ssthresh != c.wantSsth {
			t.Errorf("%s: cwnd %v ssthresh %v, want %v %v", c.name, v.Cwnd, v.Ssthresh, c.wantCwnd, c.wantSsth)
		}
	}
}

func TestVegasLoss(t *testing.T) {
	l := VegasLimits{QueueLow: 2, QueueHigh: 8, Min: 2, Max: 64}
	v := Vegas{Cwnd: 10, Ssthresh: 64}
	v.OnLoss(&l)
	if v.Cwnd != 5 || v.Ssthresh != 5 {
		t.Fatalf("halving: %+v", v)
	}
	v.Cwnd = 3
	v.OnLoss(&l)
	if v.Cwnd != 2 || v.Ssthresh != 2 {
		t.Fatalf("floor: %+v", v)
	}
}
