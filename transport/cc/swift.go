package cc

import "time"

// Swift's constants: the multiplicative decrease gain per unit of excess
// delay, and the largest single decrease (halving).
const (
	Beta   = 0.8
	MaxMDF = 0.5
)

// SwiftLimits configures a Swift window.
type SwiftLimits struct {
	// Min and Max bound the window, in packets.
	Min, Max float64
	// Target is the queueing delay a stream may cause before its window
	// shrinks; the base RTT raises it (a path's own delay is allowed).
	Target time.Duration
}

// Swift is a delay-based congestion window in the manner of Google's
// Swift (SIGCOMM 2020): it grows by one packet per window of
// acknowledgements while the last delay sample was within the target,
// and shrinks in proportion to the excess, at most once per smoothed RTT
// and by at most MaxMDF, when one was not. A timeout halves it.
type Swift struct {
	Cwnd float64 // the window, in packets
	// Base is the lowest RTT of a full-size packet, the base the delay
	// target is built on (zero: none yet). A small packet's RTT leaves
	// out the serialization a full one pays on every hop (720 µs per
	// 9 KB hop at 100 Mbit/s), and a target built on it would throttle
	// bulk transfers to a packet per RTT.
	Base         time.Duration
	LastDecrease time.Time
	// DelayOK: the last delay sample was within the target.
	DelayOK bool
}

// Packets is the window in whole packets, at least one.
func (s *Swift) Packets() int { return max(int(s.Cwnd), 1) }

// SampleBase takes one RTT into Base if full (a full-size packet's).
func (s *Swift) SampleBase(r time.Duration, full bool) {
	if full && (s.Base == 0 || r < s.Base) {
		s.Base = r
	}
}

// OnDelay takes one delay sample, queued (the queueing the stream's
// packets met), once there is a Base; srtt is the smoothed RTT, which
// spaces decreases. Within max(l.Target, Base) the window may grow;
// beyond it, it shrinks by Beta·excess/(Base+queued), at most MaxMDF.
func (s *Swift) OnDelay(now time.Time, l *SwiftLimits, queued, srtt time.Duration) {
	allowed := max(l.Target, s.Base)
	if queued <= allowed {
		s.DelayOK = true
		return
	}
	s.DelayOK = false
	if now.Sub(s.LastDecrease) >= srtt {
		f := 1 - Beta*float64(queued-allowed)/float64(s.Base+queued)
		s.Decrease(now, l, max(f, 1-MaxMDF))
	}
}

// OnAck takes one packet acknowledged: while the delay is within the
// target, the window grows by 1/Cwnd (a packet per window), up to l.Max.
func (s *Swift) OnAck(l *SwiftLimits) {
	if s.DelayOK {
		s.Cwnd = min(s.Cwnd+1/s.Cwnd, l.Max)
	}
}

// OnTimeout takes a retransmission timeout: the window shrinks by MaxMDF.
func (s *Swift) OnTimeout(now time.Time, l *SwiftLimits) { s.Decrease(now, l, 1-MaxMDF) }

// Decrease multiplies the window by factor, down to l.Min, at now.
func (s *Swift) Decrease(now time.Time, l *SwiftLimits, factor float64) {
	s.Cwnd *= factor
	if s.Cwnd < l.Min {
		s.Cwnd = l.Min
	}
	s.LastDecrease = now
}
