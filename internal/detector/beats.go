// Package detector is the failure detector both ends of a heartbeat use:
// the switch judges its members' and memory nodes' heartbeats with it,
// a member its switch's answers to its own. It keeps no clock: callers
// pass the times (the switch's heard clock, the member's wall clock).
package detector

import (
	"math"
	"time"
)

// Beats is a failure detector's view of one peer's heartbeats: when they
// arrive and how far apart the recent ones were. A peer whose heartbeats
// have come like clockwork is counted dead after the timeout of silence;
// one whose heartbeats arrive irregularly (its host is busy: its process
// waits for a CPU, its heartbeats queue behind other work) is given
// longer, in proportion to the spread of its recent gaps (the mean plus
// Spread standard deviations, or Longest times the longest gap,
// whichever is more), up to the bound the caller gives. This is the
// phi-accrual detector's idea (Hayashibara et al., as in Cassandra and
// Akka): judge a silence against the distribution of the gaps seen over
// a window of recent heartbeats, not against one constant.
//
// The zero value is ready: no heartbeat seen yet.
type Beats struct {
	last  time.Time      // the latest heartbeat
	gaps  [Window]uint32 // the latest gaps, in microseconds, a ring
	n     uint8          // gaps recorded, up to Window
	next  uint8          // where the next gap goes in gaps
	allow time.Duration  // what the gaps allow: see Beat
}

const (
	// Window gaps are remembered: at 4 heartbeats a timeout, the last
	// 8 timeouts or so. A busy host's long gaps come between runs of
	// regular ones; the window keeps them in view.
	Window = 32
	// Warm gaps must be seen before their spread counts.
	Warm = 8
	// Spread is how many standard deviations past the mean gap a
	// silence must reach: with normally distributed gaps, the chance
	// that a live peer's next heartbeat is that late is about 1e-9
	// (phi-accrual's usual threshold is 8, a chance of 1e-8).
	Spread = 6
	// Longest times the longest recent gap is allowed too: a busy
	// host's pauses come between runs of regular heartbeats, which
	// shrink the deviation, and a pause somewhat longer than the
	// longest seen is still a pause.
	Longest = 3
)

// Beat records a heartbeat at at. One not after the latest counts no
// gap.
func (b *Beats) Beat(at time.Time) {
	if !b.last.IsZero() && at.After(b.last) {
		gap := min(at.Sub(b.last)/time.Microsecond, math.MaxUint32)
		b.gaps[b.next] = uint32(gap)
		b.next = (b.next + 1) % Window
		if b.n < Window {
			b.n++
		}
		var sum, sq, longest float64
		for _, g := range b.gaps[:b.n] {
			sum += float64(g)
			longest = max(longest, float64(g))
		}
		mean := sum / float64(b.n)
		for _, g := range b.gaps[:b.n] {
			d := float64(g) - mean
			sq += d * d
		}
		sd := math.Sqrt(sq / float64(b.n))
		b.allow = time.Duration(max(mean+Spread*sd, Longest*longest)) * time.Microsecond
	}
	b.last = at
}

// Allowed is the silence after which the peer counts as dead: timeout,
// or more for a peer whose heartbeats have come irregularly, but never
// more than most (a peer that really died is counted dead within it).
// Before Warm gaps were seen it is timeout.
func (b *Beats) Allowed(timeout, most time.Duration) time.Duration {
	if b.n < Warm {
		return timeout
	}
	return min(max(timeout, b.allow), max(timeout, most))
}
