package transport

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

func (p *peer) enqueue(m *outMsg) {
	if p.qtail == nil {
		p.qhead, p.qtail = m, m
	} else {
		p.qtail.next_ = m
		p.qtail = m
	}
}

func (p *peer) mask() uint32 { return uint32(len(p.ring) - 1) }

func (p *peer) cwndPkts() int { return p.win.Packets() }

func (p *peer) canSendNew() bool {
	w := p.sndNxt - p.sndUna
	return p.inflight < p.sendLimit() && int(w) < p.ringCap() && w < p.rwnd
}

// strangerRing is the send ring of an amplification-limited peer, in
// packets: a stranger cannot have more in flight than its budget allows
// anyway, and a full ring each (SendWindow records, 48 KiB at the
// default) would make MaxStrangers strangers cost 48 MiB.
const strangerRing = 32

// ringCap is how many packets may be in flight to the peer: its ring's
// size, or the size the ring it gets will have.
func (p *peer) ringCap() int {
	switch {
	case p.ring != nil:
		return len(p.ring)
	case p.limited():
		return min(strangerRing, p.e.cfg.SendWindow)
	}
	return p.e.cfg.SendWindow
}

// growRing gives a peer that is no longer amplification-limited a full
// send ring in place of its stranger's ring, keeping the packets in
// flight (at most strangerRing records are moved).
func (p *peer) growRing() {
	old, oldMask := p.ring, p.mask()
	p.ring = p.e.getRing(false)
	m := p.mask()
	for psn := p.sndUna; psn != p.sndNxt; psn++ {
		p.ring[psn&m] = old[psn&oldMask]
	}
	p.e.putRing(old, false)
}

func (p *peer) lostPending() bool { return p.lostHead < len(p.lost) }

func (p *peer) sendDeadline() time.Time {
	if p.sndUna == p.sndNxt {
		if p.waiting {
			// Queued messages that cannot go out (a zero window, the
			// amplification budget) fail after DeadTimeout too.
			return p.lastProgress.Add(p.e.cfg.DeadTimeout)
		}
		return time.Time{}
	}
	dead := p.lastProgress.Add(p.e.cfg.DeadTimeout)
	if p.inflight > 0 && !p.rtoAt.IsZero() && p.rtoAt.Before(dead) {
		return p.rtoAt
	}
	return dead
}

func (p *peer) releaseRingIfIdle() {
	if p.ring != nil && p.sndUna == p.sndNxt {
		p.e.putRing(p.ring, true)
		p.ring = nil
		p.lost = p.lost[:0]
		p.lostHead = 0
	}
}

// poll emits up to budget datagrams into out; used is how many of the
// engine's buffers this Poll has handed out already.
func (p *peer) poll(now time.Time, out []netio.Datagram, used, budget int) ([]netio.Datagram, int) {
	n := 0
	limited := p.limited()
	// Challenges (budget permitting) and their echoes go out twice (the
	// same buffer), so that validation is not held up by one lost packet.
	if p.echoPending {
		if d, ok := p.buildEcho(now, p.e.buf(used+n), limited); ok {
			out = append(out, d, d)
			n++
		}
	}
	if p.resetChallenge && (!limited || p.afford(wire.AckFixedLen)) {
		d := p.buildResetChallenge(now, p.e.buf(used+n))
		if limited {
			p.credit -= int64(len(d.Buf))
		}
		out = append(out, d)
		n++
	}
	// A pending ACK goes first, on its own, unless data about to go
	// out takes it along (emit), or it is a delayed one that may still
	// wait for data.
	if p.ackPending && !p.ackWaits(now) && !(p.piggybacks(limited) && p.ackRides()) {
		var ok bool
		if out, ok = p.pollAck(now, out, used+n, limited); ok {
			n++
		}
	}
	if p.sndUna != p.sndNxt || p.waiting {
		if since := now.Sub(p.lastProgress); since >= p.e.cfg.DeadTimeout {
			p.e.stats.PeersDead++
			p.failAll(&PeerError{Peer: p.id, Since: since, SealRequired: p.sealHint && !p.synAcked})
			p.e.removePeer(p)
			return out, n
		}
		if p.inflight > 0 && !now.Before(p.rtoAt) {
			p.scanTimeouts(now)
		}
	}
	blocked := false // by the amplification budget
	for n < budget && p.lostPending() && p.inflight < p.sendLimit() {
		psn := p.lost[p.lostHead]
		rec := &p.ring[psn&p.mask()]
		if rec.state != recLost {
			p.lostHead++
			continue
		}
		if limited && !p.afford(rec.n) {
			blocked = true
			break
		}
		p.lostHead++
		rec.retx++
		p.e.stats.PacketsRetransmitted++
		out = p.emit(now, out, used+n, psn, rec, true, limited)
		n++
	}
	if !p.lostPending() {
		p.lost = p.lost[:0]
		p.lostHead = 0
	}
	for !blocked && n < budget && p.qhead != nil && p.canSendNew() {
		m := p.qhead
		seg := uint32(len(m.payload)) - m.next
		if seg > uint32(p.e.seg) {
			seg = uint32(p.e.seg)
		}
		if limited && !p.afford(seg) {
			// The packet waits whole for the address to be validated
			// (the echo of the challenge): cutting it to fit the budget
			// would turn a one-packet message into two, each exposed to
			// loss, for no gain in time.
			blocked = true
			break
		}
		if p.ring == nil {
			p.ring = p.e.getRing(p.limited())
		} else if len(p.ring) < p.e.cfg.SendWindow && !p.limited() {
			p.growRing()
		}
		if p.sndUna == p.sndNxt {
			p.lastProgress = now // idle time does not count towards DeadTimeout
		}
		psn := p.sndNxt
		p.sndNxt++
		rec := &p.ring[psn&p.mask()]
		*rec = pktRec{msg: m, off: m.next, n: seg}
		m.recs++
		m.next += seg
		m.unacked++
		if m.next == uint32(len(m.payload)) {
			m.allSent = true
			p.qhead = m.next_
			m.next_ = nil
			if p.qhead == nil {
				p.qtail = nil
			}
		}
		out = p.emit(now, out, used+n, psn, rec, false, limited)
		n++
	}
	if blocked {
		p.e.stats.AmplificationLimited++
	}
	if p.ackPending && !p.ackWaits(now) {
		// The data it was to ride on did not go out (or did not fit).
		var ok bool
		if out, ok = p.pollAck(now, out, used+n, limited); ok {
			n++
		}
	}
	if p.sndUna == p.sndNxt && p.qhead != nil {
		if !p.waiting {
			p.waiting, p.lastProgress = true, now
		}
	} else {
		p.waiting = false
	}
	return out, n
}

func (p *peer) emit(now time.Time, out []netio.Datagram, bufIdx int, psn uint32, rec *pktRec, retx, limited bool) []netio.Datagram {
	m := rec.msg
	h := m.hdr
	h.PSN = psn
	h.AckBase = p.sndUna
	h.Offset = m.base + rec.off
	h.TS = uint64(now.UnixNano())
	if retx {
		h.Flags |= wire.FlagRetx
	}
	if !p.synAcked {
		h.Flags |= wire.FlagSyn
	}
	var pkt, tail []byte
	payload := m.payload[rec.off : rec.off+rec.n]
	switch {
	case m.shared && p.e.gather && !p.e.cfg.Verified && !(p.ackPending && p.piggybacks(limited) && p.fits(rec.n)):
		// The header alone in the engine's buffer, the payload as the
		// datagram's Tail: not copied.
		if rec.off == 0 && int(rec.n) == len(m.payload) {
			pkt, _ = wire.AppendHeaderShared(p.e.buf(bufIdx)[:0], &h, payload, m.payloadCRC)
		} else {
			pkt, _ = wire.AppendHeader(p.e.buf(bufIdx)[:0], &h, payload)
		}
		tail = payload
	case p.ackPending && p.piggybacks(limited) && p.fits(rec.n):
		a := &p.e.ack
		p.fillAck(now, a)
		p.ackPending, p.ackAt = false, 0
		p.e.stats.AcksSent++
		p.e.stats.AcksPiggybacked++
		pkt, _ = wire.AppendPacketAck(p.e.buf(bufIdx)[:0], &h, payload, a, !p.e.cfg.Verified)
	case p.e.cfg.Verified:
		pkt, _ = wire.AppendPacketUnchecked(p.e.buf(bufIdx)[:0], &h, payload)
	default:
		pkt, _ = wire.AppendPacket(p.e.buf(bufIdx)[:0], &h, payload)
	}
	out = append(out, netio.Datagram{Addr: p.id.Addr, Buf: pkt, Tail: tail})
	if limited {
		p.credit -= int64(len(pkt) + len(tail))
	}
	rec.sentAt = now
	rec.state = recInflight
	p.inflight++
	if dl := now.Add(p.rto); p.rtoAt.IsZero() || dl.Before(p.rtoAt) || p.inflight == 1 {
		p.rtoAt = dl
	}
	p.e.stats.PacketsSent++
	p.e.stats.BytesSent += uint64(rec.n)
	return out
}

func (p *peer) markLost(psn uint32, rec *pktRec) {
	rec.state = recLost
	p.inflight--
	p.lost = append(p.lost, psn)
}

// scanTimeouts marks every in-flight packet older than the RTO as lost
// (selectively: packets still within their timeout are left alone) and
// recomputes the earliest timeout.
func (p *peer) scanTimeouts(now time.Time) {
	var next time.Time
	expired := false
	m := p.mask()
	for psn := p.sndUna; psn != p.sndNxt; psn++ {
		rec := &p.ring[psn&m]
		if rec.state != recInflight {
			continue
		}
		dl := rec.sentAt.Add(p.rto)
		if !now.Before(dl) {
			p.markLost(psn, rec)
			expired = true
		} else if next.IsZero() || dl.Before(next) {
			next = dl
		}
	}
	p.rtoAt = next
	if expired {
		p.e.stats.Timeouts++
		if now.Sub(p.lastBackoff) >= p.rto {
			p.lastBackoff = now
			p.rto = min(2*p.rto, p.e.cfg.MaxRTO)
			p.win.OnTimeout(now, &p.e.swift)
		}
	}
}

// advanceAcked moves sndUna past records acknowledged locally (Delivered,
// Abandon), so that AckBase tells the receiver to skip them and the
// stream does not wait for ACKs that will never come.
func (p *peer) advanceAcked() {
	if p.ring == nil {
		return
	}
	m := p.mask()
	for p.sndUna != p.sndNxt && p.ring[p.sndUna&m].state == recAcked {
		p.e.releaseRec(&p.ring[p.sndUna&m])
		p.sndUna++
	}
}

// failAll fails every queued and in-flight message with err and resets the
// sender half.
func (p *peer) failAll(err error) {
	if p.ring != nil {
		m := p.mask()
		for psn := p.sndUna; psn != p.sndNxt; psn++ {
			rec := &p.ring[psn&m]
			if rec.msg != nil && !rec.msg.done {
				p.e.complete(rec.msg, p, err)
			}
			p.e.releaseRec(rec)
		}
	}
	for q := p.qhead; q != nil; q = q.next_ {
		if !q.done {
			p.e.complete(q, p, err)
		}
	}
	p.qhead, p.qtail = nil, nil
	p.sndUna = p.sndNxt
	p.inflight = 0
	p.lost = p.lost[:0]
	p.lostHead = 0
}
