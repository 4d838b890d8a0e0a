package cc

import "time"

// RTT estimates a path's round-trip time from samples, as RFC 6298
// section 2 does, in integer nanoseconds: the first sample R sets
// SRTT = R and RTTVar = R/2; each later one sets
// RTTVar = (3·RTTVar + |SRTT − R|) / 4 and then SRTT = (7·SRTT + R) / 8.
// Min is the lowest sample.
//
// The zero value has no sample yet. A zero SRTT means none: a caller
// that feeds zero samples (a zero-latency simulated path) stays without
// an estimate until a positive one comes.
type RTT struct {
	SRTT, RTTVar time.Duration
	Min          time.Duration // lowest sample; zero: none
}

// Sample takes one round-trip time.
func (r *RTT) Sample(s time.Duration) {
	if r.Min == 0 || s < r.Min {
		r.Min = s
	}
	if r.SRTT == 0 {
		r.SRTT, r.RTTVar = s, s/2
		return
	}
	d := r.SRTT - s
	if d < 0 {
		d = -d
	}
	r.RTTVar = (3*r.RTTVar + d) / 4
	r.SRTT = (7*r.SRTT + s) / 8
}

// Has reports whether the estimator has a sample.
func (r *RTT) Has() bool { return r.SRTT != 0 }

// RTO is the retransmission timeout of RFC 6298, SRTT + 4·RTTVar, plus
// extra (the longest the receiver may hold an ACK), held within
// [lo, hi]. Before any sample the caller uses its initial timeout.
func (r *RTT) RTO(extra, lo, hi time.Duration) time.Duration {
	return min(max(r.SRTT+4*r.RTTVar+extra, lo), hi)
}
