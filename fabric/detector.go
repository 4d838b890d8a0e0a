package fabric

import (
	"math"
	"time"
)

// beats is a failure detector's view of one member's (or memory node's)
// heartbeats: when they arrive and how far apart the recent ones were.
// A member whose heartbeats have come like clockwork is counted dead
// after the heartbeat timeout of silence; one whose heartbeats arrive
// irregularly (its host is busy: its process waits for a CPU, its
// heartbeats queue behind other work) is given longer, in proportion to
// the spread of its recent gaps (the mean plus beatsSpread standard
// deviations, or beatsLongest times the longest gap, whichever is more),
// up to maxSilenceFactor timeouts. This is the phi-accrual detector's
// idea (Hayashibara et al., as in Cassandra and Akka): judge a silence
// against the distribution of the gaps seen over a window of recent
// heartbeats, not against one constant.
type beats struct {
	last  time.Time           // the latest heartbeat (the switch's clock: heard)
	gaps  [beatsWindow]uint32 // the latest gaps, in microseconds, a ring
	n     uint8               // gaps recorded, up to beatsWindow
	next  uint8               // where the next gap goes in gaps
	allow time.Duration       // what the gaps allow: see beat
}

const (
	// beatsWindow gaps are remembered: at 4 heartbeats a timeout, the
	// last 8 timeouts or so. A busy host's long gaps come between runs
	// of regular ones; the window keeps them in view.
	beatsWindow = 32
	// beatsWarm gaps must be seen before their spread counts.
	beatsWarm = 8
	// beatsSpread is how many standard deviations past the mean gap a
	// silence must reach: with normally distributed gaps, the chance
	// that a live member's next heartbeat is that late is about 1e-9
	// (phi-accrual's usual threshold is 8, a chance of 1e-8).
	beatsSpread = 6
	// beatsLongest times the longest recent gap is allowed too: a busy
	// host's pauses come between runs of regular heartbeats, which
	// shrink the deviation, and a pause somewhat longer than the longest
	// seen is still a pause.
	beatsLongest = 3
	// maxSilenceFactor bounds the silence allowed, in heartbeat
	// timeouts: a member that really died is counted dead within it.
	maxSilenceFactor = 4
)

// beat records a heartbeat at at.
func (b *beats) beat(at time.Time) {
	if !b.last.IsZero() && at.After(b.last) {
		gap := min(at.Sub(b.last)/time.Microsecond, math.MaxUint32)
		b.gaps[b.next] = uint32(gap)
		b.next = (b.next + 1) % beatsWindow
		if b.n < beatsWindow {
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
		b.allow = time.Duration(max(mean+beatsSpread*sd, beatsLongest*longest)) * time.Microsecond
	}
	b.last = at
}

// allowed is the silence after which the member counts as dead, given
// the heartbeat timeout: the timeout, or more for a member whose
// heartbeats have come irregularly, up to maxSilenceFactor timeouts.
func (b *beats) allowed(timeout time.Duration) time.Duration {
	if b.n < beatsWarm {
		return timeout
	}
	return min(max(timeout, b.allow), maxSilenceFactor*timeout)
}
