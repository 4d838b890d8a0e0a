package transport

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Admission is how Receive takes a datagram; the zero value admits every
// packet.
type Admission struct {
	// Admit, if not nil, is called for a new data packet before it
	// counts as received; if it returns false the packet is dropped
	// unacknowledged (counted in Stats.Refused) and the sender will
	// resend it. A forwarding node uses it to hold senders back when its
	// aggregation slots are full.
	Admit func(*Delivery) bool
	// Checked says the caller has just verified the packet's checksum
	// (wire.Parse succeeded on these very bytes): the engine does not
	// compute it again.
	Checked bool
}

// Receive processes the datagram d from d.Addr, taken at time now, with
// admission control as adm says. If it carries new data, Receive returns
// it as a Delivery with ok true; ACKs, duplicates and malformed datagrams
// return ok false (and are counted in Stats). d.RxTime is when the kernel
// received it (Unix ns), before this process got to it: the forward
// queueing a receiver reports to the sender (its delay signal) is
// measured to that time, so that a wait of the receiving process for a
// CPU does not read as queueing in the network; the ACK's own delay is
// still counted from now, when the process took the datagram, so the
// sender's timeout covers that wait. Zero, or a time not within
// maxHostDelay before now, means now.
func (e *Engine) Receive(now time.Time, d netio.Datagram, adm Admission) (Delivery, bool) {
	return e.stepAdmit(now, d.Addr, d.Buf, d.RxTime, adm.Admit, adm.Checked || e.cfg.Verified)
}

func (e *Engine) stepAdmit(now time.Time, from netip.AddrPort, pkt []byte, rx int64, admit func(*Delivery) bool, verified bool) (d Delivery, ok bool) {
	e.setNow(now)
	e.arrival = now
	if rx != 0 {
		if t := time.Unix(0, rx); t.Before(now) && now.Sub(t) < maxHostDelay {
			e.arrival = t
		}
	}
	var payload []byte
	var err error
	if verified {
		payload, _, err = wire.ParseVerified(pkt, &d.Header)
	} else {
		payload, _, err = wire.Parse(pkt, &d.Header)
	}
	if err != nil {
		e.stats.Malformed++
		return d, false
	}
	h := &d.Header
	if h.Flags&wire.FlagAuth != 0 ||
		(h.Mode != wire.ModeUnicast && !e.cfg.GroupModes) ||
		(h.Group != 0 && h.Dst != e.local(h.Group) && h.Dst != wire.MemberAll) {
		// No security associations yet; group modes only when enabled;
		// group traffic must be addressed to us or to all members.
		e.stats.Unexpected++
		return d, false
	}
	id := PeerID{Addr: from, Group: h.Group, Member: h.Src, Mode: h.Mode}
	switch h.Op {
	case wire.OpHandshake:
		// The security layer's, in front of the engine: one that
		// reaches the engine finds no layer to answer it. One kind is
		// for an engine without a layer: the peer takes only sealed
		// datagrams. Anyone can forge it, so it fails nothing: it is
		// kept on our unicast stream to that address while nothing of
		// the stream was acknowledged, to explain the stream's failure
		// if it comes (SealRequired, PeerError.SealRequired).
		if len(payload) == 1 && payload[0] == wire.HandshakeSealRequired {
			if p := e.lookup(PeerID{Addr: from}); p != nil && !p.synAcked {
				e.stats.SealRequired++
				p.sealHint = true
				return d, false
			}
		}
		e.stats.Unexpected++
		return d, false
	case wire.OpAck, wire.OpNack:
		if err := e.ack.Decode(payload); err != nil {
			e.stats.Malformed++
			return d, false
		}
		p := e.lookup(id)
		if p == nil {
			e.stats.Unexpected++
			return d, false
		}
		p.received(len(pkt))
		if h.Flags&wire.FlagSyn == 0 && p.onResetEcho(&e.ack) {
			e.stats.AcksReceived++
			e.touch(p, now)
			return d, false
		}
		if !p.onAck(now, &e.ack, h.Op == wire.OpNack, h.TS, h.Src != wire.MemberAll, h.Flags&wire.FlagSyn != 0) {
			e.stats.Unexpected++
			return d, false
		}
		e.stats.AcksReceived++
		e.touch(p, now)
		if h.Flags&wire.FlagSyn != 0 && p.nearSent(e.ack.Cum) {
			// A challenge: the peer has not validated this address yet,
			// or asks whether this side restarted its stream at the
			// cumulative point. Echoed only if that point is near where
			// this side's stream is: a challenge caused by a datagram
			// forged in this side's name names another point.
			p.echoPending, p.challenge = true, h.PSN
			e.activate(p)
		}
		return d, false
	}
	piggy := h.Flags&wire.FlagAck != 0
	if piggy {
		// An ACK of this side's stream rides on the data: taken off here,
		// applied below as an OpAck would be.
		if payload, err = wire.SplitAck(payload, &e.ack); err != nil {
			e.stats.Malformed++
			return d, false
		}
		h.Flags &^= wire.FlagAck
		h.Len -= wire.AckFixedLen
	}
	p := e.lookup(id)
	if p == nil {
		// Incoming data never fails to find room: a stranger evicts an
		// older stranger.
		p, _ = e.create(id, false)
	}
	p.received(len(pkt))
	e.touch(p, now)
	if piggy {
		if p.onAck(now, &e.ack, false, h.TS, true, false) {
			e.stats.AcksReceived++
		} else {
			e.stats.Unexpected++
		}
	}
	e.stats.PacketsReceived++
	wasPending := p.ackPending
	ok, pm := p.checkData(now, h)
	if !ok {
		return d, false
	}
	if admit != nil {
		// A copy kept in the engine, so that d does not escape to the heap.
		e.admitD = Delivery{Header: *h, Payload: payload, Peer: id}
		if !admit(&e.admitD) {
			e.stats.Refused++
			return d, false
		}
	}
	d.MsgDone = p.commitData(now, h, pm)
	if !wasPending && d.MsgDone && !e.cfg.ImmediateAcks && (h.Flags&wire.FlagResp != 0 || h.Mode == wire.ModeAnycast || answered(h)) &&
		h.Offset == 0 && uint32(h.Len) == h.MsgLen && p.piggybacks(false) && !p.limited() {
		// A lone one-packet response: its ACK may wait for the next
		// request to ride on. A lone one-packet anycast request: for its
		// reply (the switch relays the member's; a member answers), which
		// goes back on the same stream. Aggregation likewise: a lone
		// contribution's ACK waits for the result, a result's for the
		// member's next contribution.
		p.ackAt = nanos(now) + int64(MaxAckDelay)
	}
	d.Payload = payload
	d.Peer = id
	e.stats.BytesReceived += uint64(len(payload))
	return d, true
}

// answered reports whether h is aggregation data whose ACK a packet back
// on the same stream can carry soon: a result (from the forwarding node,
// MemberAll), answered by the member's next contribution, or a
// contribution whose sender gets the result: every member's of an
// Allreduce (Operand1 0), the root's only of a rooted one (Operand1 is
// the root's member id + 1). Another member's contribution to a rooted
// aggregation gets nothing back, so its ACK must not wait.
func answered(h *wire.Header) bool {
	if h.Mode != wire.ModeAggregate {
		return false
	}
	return h.Src == wire.MemberAll || h.Operand1 == 0 || h.Operand1 == uint64(h.Src)+1
}

// FlushAcks makes every ACK held back (the delayed ACK of a lone
// response, see Config.ImmediateAcks) due now, so that the next Poll
// sends it: what a process does before it stops, since a peer whose
// response is never acknowledged resends it until DeadTimeout.
func (e *Engine) FlushAcks() {
	for p := range e.allPeers() {
		if p.ackPending && p.ackAt != 0 {
			p.ackAt = 0
			e.activate(p)
		}
	}
}

// Owed reports whether some peer's data was received but not yet
// acknowledged in full: data from an address not validated yet (only a
// challenge went back, and the real ACK waits for its echo), or an ACK
// pending. A process that stops while it owes an ACK leaves the sender
// resending until DeadTimeout: a closing endpoint lingers until it owes
// none (or a bound passes).
func (e *Engine) Owed() bool {
	for p := range e.allPeers() {
		if p.rcvInit && (p.ackPending || (p.limited() && p.rcvNxt != p.peerBase)) {
			return true
		}
	}
	return false
}
