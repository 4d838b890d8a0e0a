package cc

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// TestRTTSamples follows RFC 6298's formulas through a sample sequence.
func TestRTTSamples(t *testing.T) {
	var r RTT
	if r.Has() {
		t.Fatal("zero value has a sample")
	}
	for i, c := range []struct {
		sample, srtt, rttvar, min, rto time.Duration
	}{
		{100 * ms, 100 * ms, 50 * ms, 100 * ms, 300 * ms},               // first: R, R/2
		{60 * ms, 95 * ms, 47500 * time.Microsecond, 60 * ms, 285 * ms}, // (3·50+40)/4, (7·100+60)/8
		{200 * ms, 108125 * time.Microsecond, 61875 * time.Microsecond, 60 * ms, 355625 * time.Microsecond},
		{108125 * time.Microsecond, 108125 * time.Microsecond, 46406250, 60 * ms, 108125*time.Microsecond + 4*46406250},
	} {
		r.Sample(c.sample)
		if r.SRTT != c.srtt || r.RTTVar != c.rttvar || r.Min != c.min || !r.Has() {
			t.Errorf("sample %d (%v): srtt %v rttvar %v min %v, want %v %v %v", i, c.sample, r.SRTT, r.RTTVar, r.Min, c.srtt, c.rttvar, c.min)
		}
		if got := r.RTO(0, time.Millisecond, time.Minute); got != c.rto {
			t.Errorf("sample %d: rto %v, want %v", i, got, c.rto)
		}
	}
}

func TestRTTRTOBounds(t *testing.T) {
	r := RTT{SRTT: 10 * ms, RTTVar: 2 * ms}
	for _, c := range []struct {
		extra, lo, hi, want time.Duration
	}{
		{0, 0, time.Second, 18 * ms},
		{ms, 0, time.Second, 19 * ms},         // the peer's ACK delay on top
		{0, 20 * ms, time.Second, 20 * ms},    // floor
		{0, 2 * r.SRTT, time.Second, 20 * ms}, // the pool lanes' floor of twice SRTT
		{0, 0, 15 * ms, 15 * ms},              // ceiling
		{5 * ms, 30 * ms, 25 * ms, 25 * ms},   // the ceiling wins
	} {
		if got := r.RTO(c.extra, c.lo, c.hi); got != c.want {
			t.Errorf("RTO(%v, %v, %v) = %v, want %v", c.extra, c.lo, c.hi, got, c.want)
		}
	}
}

// TestRTTZeroSample: a zero sample leaves an empty estimator empty, so the
// next positive one starts it.
func TestRTTZeroSample(t *testing.T) {
	var r RTT
	r.Sample(0)
	if r.Has() || r.Min != 0 {
		t.Fatalf("after a zero sample: %+v", r)
	}
	r.Sample(8 * ms)
	if r.SRTT != 8*ms || r.RTTVar != 4*ms || r.Min != 8*ms {
		t.Fatalf("after 8ms: %+v", r)
	}
}
