package fabric

import "time"

// beats is a failure detector's view of one member's (or memory node's)
// heartbeats: when they arrive, how far apart, and how irregularly. A
// member whose heartbeats have come like clockwork is counted dead after
// the heartbeat timeout of silence; one whose heartbeats arrive
// irregularly (its host is busy: its process waits for a CPU, its
// heartbeats queue behind other work) is given longer, in proportion to
// the spread it has shown, up to maxSilenceFactor timeouts. The idea is
// the phi-accrual detector's (Hayashibara et al., as in Cassandra and
// Akka): judge a silence against the distribution of the gaps seen, not
// against one constant; here, as in TCP's retransmission timeout, the
// distribution is summed up by a smoothed mean gap and a smoothed mean
// deviation.
type beats struct {
	last time.Time     // the latest heartbeat (the switch's clock: heard)
	mean time.Duration // smoothed gap between heartbeats
	dev  time.Duration // smoothed mean deviation of the gaps
	n    uint8         // gaps seen, up to beatsWarm
}

const (
	// beatsWarm gaps must be seen before their spread counts.
	beatsWarm = 8
	// beatsSpread is how many mean deviations past the mean gap a
	// silence must reach (with normally distributed gaps, 8 mean
	// deviations are about 6.4 standard deviations: a chance of about
	// 1e-10 that a live member's next heartbeat is that late).
	beatsSpread = 8
	// maxSilenceFactor bounds the silence allowed, in heartbeat
	// timeouts: a member that really died is counted dead within it.
	maxSilenceFactor = 4
)

// beat records a heartbeat at at.
func (b *beats) beat(at time.Time) {
	if !b.last.IsZero() && at.After(b.last) {
		gap := at.Sub(b.last)
		if b.n == 0 {
			b.mean, b.dev = gap, gap/2
		} else {
			d := gap - b.mean
			b.mean += d / 8
			if d < 0 {
				d = -d
			}
			b.dev += (d - b.dev) / 4
		}
		if b.n < beatsWarm {
			b.n++
		}
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
	return min(max(timeout, b.mean+beatsSpread*b.dev), maxSilenceFactor*timeout)
}
