package transport

import (
	"time"
)

type msgKey struct {
	id   uint64
	resp bool
}

// maxSpans bounds the disjoint byte ranges tracked per partial message.
// In-order arrival keeps one; a fragment that would open one more than
// this is dropped unacknowledged, and the sender's retransmissions of the
// gaps merge the ranges back.
const maxSpans = 8

// span is a received byte range [start, end) of a message.
type span struct{ start, end uint32 }

// partialMsg is the reassembly state of one message being received: its
// length and the byte ranges delivered so far, sorted, disjoint and not
// adjacent.
type partialMsg struct {
	msgLen uint32
	n      uint8
	spans  [maxSpans]span
	last   time.Time
}

// fits reports whether [s, e) overlaps no byte already delivered (ok), and
// whether it can be recorded without exceeding maxSpans (room).
func (pm *partialMsg) fits(s, e uint32) (ok, room bool) {
	room = int(pm.n) < maxSpans
	for _, sp := range pm.spans[:pm.n] {
		if s < sp.end && sp.start < e {
			return false, false
		}
		if sp.end == s || sp.start == e {
			room = true
		}
	}
	return true, room
}

// add records [s, e), which fits, merging it with its neighbours.
func (pm *partialMsg) add(s, e uint32) {
	n := int(pm.n)
	i := 0
	for i < n && pm.spans[i].start < s {
		i++
	}
	switch {
	case i > 0 && pm.spans[i-1].end == s:
		pm.spans[i-1].end = e
		if i < n && pm.spans[i].start == e {
			pm.spans[i-1].end = pm.spans[i].end
			copy(pm.spans[i:n-1], pm.spans[i+1:n])
			pm.n--
		}
	case i < n && pm.spans[i].start == e:
		pm.spans[i].start = s
	default:
		copy(pm.spans[i+1:n+1], pm.spans[i:n])
		pm.spans[i] = span{s, e}
		pm.n++
	}
}

// complete reports whether every byte of [0, msgLen) has been delivered.
func (pm *partialMsg) complete() bool {
	return pm.n == 1 && pm.spans[0] == span{0, pm.msgLen}
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
