package cc

import (
	"math"
	"testing"
	"time"
)

const us = time.Microsecond

func TestSwiftDelay(t *testing.T) {
	l := SwiftLimits{Min: 1, Max: 64, Target: 50 * us}
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name        string
		cwnd        float64
		base        time.Duration
		queued      time.Duration
		sinceDecr   time.Duration // since the last decrease
		srtt        time.Duration
		wantCwnd    float64
		wantDelayOK bool
	}{
		{"within target", 10, 20 * us, 50 * us, time.Second, 100 * us, 10, true},
		{"within base", 10, 100 * us, 100 * us, time.Second, 100 * us, 10, true}, // the base raises the target
		// allowed 100 µs, excess 200 µs: 1 − 0.8·200/400 = 0.6.
		{"excess", 10, 100 * us, 300 * us, time.Second, 100 * us, 6, false},
		// 1 − 0.8·1000/1200 < 0.5: halved.
		{"largest decrease", 10, 100 * us, 1100 * us, time.Second, 100 * us, 5, false},
		{"once per srtt", 10, 100 * us, 300 * us, 99 * us, 100 * us, 10, false},
		{"floor", 1.5, 100 * us, 1100 * us, time.Second, 100 * us, 1, false},
	} {
		s := Swift{Cwnd: c.cwnd, Base: c.base, LastDecrease: t0}
		now := t0.Add(c.sinceDecr)
		s.OnDelay(now, &l, c.queued, c.srtt)
		if math.Abs(s.Cwnd-c.wantCwnd) > 1e-9 || s.DelayOK != c.wantDelayOK {
			t.Errorf("%s: cwnd %v delayOK %v, want %v %v", c.name, s.Cwnd, s.DelayOK, c.wantCwnd, c.wantDelayOK)
		}
		if c.wantCwnd != c.cwnd && !s.LastDecrease.Equal(now) {
			t.Errorf("%s: decrease not recorded", c.name)
		}
	}
}

func TestSwiftGrowth(t *testing.T) {
	l := SwiftLimits{Min: 1, Max: 5, Target: 50 * us}
	s := Swift{Cwnd: 4}
	s.OnAck(&l) // no delay sample yet: no growth
	if s.Cwnd != 4 {
		t.Fatalf("grew without a delay sample: %v", s.Cwnd)
	}
	s.Base = 10 * us
	s.OnDelay(time.Unix(0, 0), &l, 10*us, 20*us)
	for range 4 { // a window of ACKs: about a packet more
		s.OnAck(&l)
	}
	if want := 4 + 1/4.0 + 1/4.25 + 1/(4.25+1/4.25); math.Abs(s.Cwnd-(want+1/want)) > 1e-12 || s.Packets() != 4 {
		t.Fatalf("after a window of ACKs: %v (%d packets)", s.Cwnd, s.Packets())
	}
	s.OnAck(&l)
	if s.Cwnd != 5 || s.Packets() != 5 {
		t.Fatalf("not capped at Max: %v", s.Cwnd)
	}
	now := time.Unix(5, 0)
	s.OnTimeout(now, &l)
	if s.Cwnd != 2.5 || !s.LastDecrease.Equal(now) {
		t.Fatalf("timeout: %v", s.Cwnd)
	}
	s.Cwnd = 0.5
	if s.Packets() != 1 {
		t.Fatalf("Packets below one: %d", s.Packets())
	}
}

func TestSwiftBase(t *testing.T) {
	var s Swift
	s.SampleBase(10*us, false)
	if s.Base != 0 {
		t.Fatal("a small packet set the base")
	}
	s.SampleBase(30*us, true)
	s.SampleBase(40*us, true)
	s.SampleBase(5*us, false)
	if s.Base != 30*us {
		t.Fatalf("base %v, want 30µs", s.Base)
	}
}
