package transport

import (
	"time"

	"github.com/ndma/ndma/transport/reasm"
)

type msgKey struct {
	id   uint64
	resp bool
}

// partialMsg is the reassembly state of one message being received: its
// length and the byte ranges delivered so far (at most reasm.MaxRanges; a
// fragment that would open one more is dropped unacknowledged, and the
// sender's retransmissions of the gaps merge the ranges back), and when a
// fragment last arrived.
type partialMsg struct {
	reasm.Msg
	last time.Time
}

// strangerPartial bounds the partial messages a stranger may have: its
// first messages, not MaxPartial of them (256 entries of 120 bytes each
// for every one of MaxStrangers strangers would be 30 MiB).
const strangerPartial = 8

// evictStale drops partial messages not touched for DeadTimeout (their
// sender gave up); it reports whether room was made.
func (p *peer) evictStale(now time.Time) bool {
	freed := false
	for k, pm := range p.partial {
		if now.Sub(pm.last) >= p.e.cfg.DeadTimeout {
			delete(p.partial, k)
			freed = true
		}
	}
	return freed
}
