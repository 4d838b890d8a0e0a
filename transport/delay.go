package transport

import (
	"time"

	"github.com/ndma/ndma/wire"
)

// onRTT takes one RTT sample r (and, if haveOWD, the forward one-way delay
// with the clocks' offset, owd; if q >= 0, the forward queueing the
// receiver measured) for the timeout and the delay signal.
//
// The delay signal is the queueing on the way to the receiver: the
// forward one-way delay above its base, where the ACK says when the
// packet arrived; on a merged ACK, whose timestamps come from different
// clocks, the queueing the receiver measured itself (Ack.QDelay);
// otherwise the RTT above the lowest RTT. Forward delay leaves
// out the ACK's own queueing, behind the receiver's outgoing data on a
// shared link, which is not congestion on this stream's path (ring and
// in-network collectives send and receive at once on every link).
func (p *peer) onRTT(now time.Time, r time.Duration, full bool, owd int64, haveOWD bool, q time.Duration) {
	cfg := &p.e.cfg
	// r > 0 (onAck checks), so the estimator has a sample from now on.
	p.rtt.Sample(r)
	old := p.rto
	p.rto = p.rtt.RTO(p.peerAckDelay(), cfg.MinRTO, cfg.MaxRTO)
	if p.rto < old/2 {
		// The timeout came down from a backoff: timers armed with the old
		// value would fire far too late, so rescan at the next Poll.
		p.rtoAt = now
	}
	p.win.SampleBase(r, full)
	if p.win.Base == 0 {
		return // no base yet: no delay signal
	}
	queued := r - p.win.Base
	if haveOWD {
		base := p.owd.SampleOut(now, owd, full)
		if base != 0 {
			queued = time.Duration(owd - base)
		}
	}
	if q >= 0 {
		queued = q
	}
	p.win.OnDelay(now, &p.e.swift, queued, p.rtt.SRTT)
}

// peerAckDelay is how long the peer may hold an ACK of this side's data
// (MaxAckDelay on the point-to-point group, where it delays the ACK of
// a lone response).
func (p *peer) peerAckDelay() time.Duration {
	if p.pointToPoint() {
		return MaxAckDelay
	}
	return 0
}

// forwardQueue returns what an ACK of the data packet h, arrived at now,
// reports as its queueing on the way (Ack.QDelay): its one-way delay less
// the stream's lowest for a full-size packet. The clocks' offset cancels,
// and so does serialization, as long as the base is a full packet's; a
// small packet's delay below that base reports no queueing.
func (p *peer) forwardQueue(now time.Time, h *wire.Header) uint32 {
	if h.TS == 0 {
		return 0
	}
	owd := nanos(now) - int64(h.TS)
	base := p.owd.SampleIn(now, owd, int(h.Len) >= p.e.seg/2)
	if base == 0 {
		return 0
	}
	q := max(owd-base, 0) / 1000
	return uint32(min(q+1, wire.MaxQDelay))
}
