package transport

import (
	"github.com/ndma/ndma/wire"
)

// Send queues a message for reliable delivery to the peer. h is a template:
// the engine fills Version, Src, PSN, AckBase, Offset, MsgLen, Len and TS;
// Group, Dst and Mode are taken from to; a zero MsgID is replaced by a
// fresh one (callers that need an agreed id, such as a response or an
// aggregation, set it). payload must not be modified until the message's
// Completion is returned by Poll. The token comes back in that Completion.
// Send returns the message id.
func (e *Engine) Send(to PeerID, h *wire.Header, payload []byte, token uint64) (uint64, error) {
	if uint64(len(payload)) > MaxMessage {
		return 0, ErrTooLarge
	}
	return e.send(to, h, payload, token, 0, uint32(len(payload)), false, 0)
}

// SendFragment queues one piece of a larger message: payload is bytes
// [h.Offset, h.Offset+len(payload)) of a message of h.MsgLen bytes with id
// h.MsgID (which must be set). The receiver reassembles fragments sent by
// separate calls into one message. payload must fit in one packet
// (SegmentSize). A forwarding node uses it to send each reduced chunk as
// soon as it is ready.
func (e *Engine) SendFragment(to PeerID, h *wire.Header, payload []byte, token uint64) (uint64, error) {
	return e.sendFragment(to, h, payload, token, false, 0)
}

func (e *Engine) sendFragment(to PeerID, h *wire.Header, payload []byte, token uint64, shared bool, payloadCRC uint32) (uint64, error) {
	if len(payload) > e.seg || h.MsgID == 0 || uint64(h.Offset)+uint64(len(payload)) > uint64(h.MsgLen) {
		return 0, ErrFragment
	}
	return e.send(to, h, payload, token, h.Offset, h.MsgLen, shared, payloadCRC)
}

// SendFragmentShared is SendFragment for a payload the caller leaves
// unchanged until the message completes and the Poll after that, with its
// wire.PayloadCRC: with SetGather on, the engine then sends it without
// copying it into each packet (a datagram's Tail) and checksums each
// packet over its header only (wire.AppendHeaderShared), so that one
// payload sent to many peers (a forwarding node's reduced chunk) is
// neither copied nor checksummed once per peer.
func (e *Engine) SendFragmentShared(to PeerID, h *wire.Header, payload []byte, payloadCRC uint32, token uint64) (uint64, error) {
	return e.sendFragment(to, h, payload, token, true, payloadCRC)
}

// SetGather lets Poll send the payloads of SendFragmentShared messages as
// datagrams' Tails, after a header of their own, instead of copying them:
// only for a caller whose Conn sends Tails, and that leaves Poll's
// datagrams alone until it has written them.
func (e *Engine) SetGather(on bool) { e.gather = on }

func (e *Engine) send(to PeerID, h *wire.Header, payload []byte, token uint64, base, msgLen uint32, shared bool, payloadCRC uint32) (uint64, error) {
	if e.nmsgs >= e.cfg.MaxMessages {
		return 0, ErrQueueFull
	}
	p := e.lookup(to)
	if p == nil {
		var err error
		if p, err = e.create(to, true); err != nil {
			return 0, err
		}
	}
	limit := e.cfg.MaxPeerMessages
	if p.limited() {
		limit = e.cfg.MaxStrangerMessages
	}
	if int(p.nmsgs) >= limit {
		return 0, ErrPeerQueueFull
	}
	// Strangers together hold at most a quarter of MaxMessages, so that
	// answers to a flood of them cannot leave established peers without
	// room.
	if p.stranger && e.strangerMsgs >= e.cfg.MaxMessages/4 {
		return 0, ErrPeerQueueFull
	}
	m := e.newMsg()
	*m = outMsg{hdr: *h, payload: payload, token: token, base: base, stranger: p.stranger, shared: shared, payloadCRC: payloadCRC}
	if p.stranger {
		e.strangerMsgs++
	}
	m.hdr.Version = wire.Version
	m.hdr.Src = e.local(to.Group)
	m.hdr.Group = to.Group
	m.hdr.Dst = to.Member
	m.hdr.Mode = to.Mode
	m.hdr.MsgLen = msgLen
	m.hdr.Flags &^= wire.FlagRetx | wire.FlagSyn
	if m.hdr.MsgID == 0 {
		e.msgSeq++
		m.hdr.MsgID = e.msgSeq
	}
	e.nmsgs++
	p.nmsgs++
	e.touch(p, e.now)
	p.enqueue(m)
	e.activate(p)
	return m.hdr.MsgID, nil
}

// Delivered tells the engine that the peer holds message msgID in full —
// the layer above knows it, for instance from the peer's response — so its
// packets count as acknowledged and its payload is released at once (the
// caller may reuse the buffer, and the engine will not read it again).
// Messages carrying FlagResp are not matched.
func (e *Engine) Delivered(to PeerID, msgID uint64) {
	p := e.lookup(to)
	if p == nil || p.ring == nil {
		return
	}
	m := p.mask()
	for psn := p.sndUna; psn != p.sndNxt; psn++ {
		rec := &p.ring[psn&m]
		if rec.msg != nil && rec.msg.hdr.MsgID == msgID && rec.msg.hdr.Flags&wire.FlagResp == 0 {
			p.ackRec(rec)
		}
	}
	p.advanceAcked()
}

// Abandon gives up on message msgID to the peer: packets not yet sent are
// dropped, packets in flight are no longer retransmitted (the receiver
// skips them through AckBase), the payload is released at once, and the
// message completes with ErrAbandoned. The receiver may have got part of
// it. Messages carrying FlagResp are not matched.
func (e *Engine) Abandon(to PeerID, msgID uint64) {
	p := e.lookup(to)
	if p == nil {
		return
	}
	var msg *outMsg
	// Unsent remainder: unlink the message from the queue.
	var prev *outMsg
	for q := p.qhead; q != nil; prev, q = q, q.next_ {
		if q.hdr.MsgID == msgID && q.hdr.Flags&wire.FlagResp == 0 {
			msg = q
			if prev == nil {
				p.qhead = q.next_
			} else {
				prev.next_ = q.next_
			}
			if p.qtail == q {
				p.qtail = prev
			}
			q.next_ = nil
			q.allSent = true
			break
		}
	}
	if p.ring != nil {
		m := p.mask()
		for psn := p.sndUna; psn != p.sndNxt; psn++ {
			rec := &p.ring[psn&m]
			if rec.msg != nil && rec.msg.hdr.MsgID == msgID && rec.msg.hdr.Flags&wire.FlagResp == 0 {
				msg = rec.msg
				if !msg.done {
					// Complete before ackRec so the message counts as failed.
					e.complete(msg, p, ErrAbandoned)
				}
				p.ackRec(rec)
			}
		}
	}
	if msg != nil && !msg.done {
		e.complete(msg, p, ErrAbandoned)
	}
	p.advanceAcked()
}
