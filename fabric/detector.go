package fabric

import (
	"time"

	"github.com/ndma/ndma/internal/detector"
)

// The switch judges each member's heartbeats (and each memory node's
// registrations) with a detector.Beats: a member whose heartbeats have
// come like clockwork is counted dead after the heartbeat timeout of
// silence, one whose heartbeats arrive irregularly (its host is busy)
// later, up to maxSilenceFactor timeouts.

// maxSilenceFactor bounds the silence allowed, in heartbeat timeouts: a
// member that really died is counted dead within it.
const maxSilenceFactor = 4

// silenceAllowed is the silence after which the peer b judges counts as
// dead, given the heartbeat timeout.
func silenceAllowed(b *detector.Beats, timeout time.Duration) time.Duration {
	return b.Allowed(timeout, maxSilenceFactor*timeout)
}
