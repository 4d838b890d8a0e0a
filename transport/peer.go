package transport

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport/cc"
	"github.com/ndma/ndma/wire"
)

const (
	dupThresh   = 3 // packets SACKed beyond a hole before it is presumed lost
	maxRTTValid = 60 * time.Second
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

// peer is the per-peer sequence state inside a group context. Sender and
// receiver halves are independent: each direction has its own PSN space.
//
// Size: the struct itself is 560 bytes on 64-bit platforms, plus the
// receive bitmap (RecvWindow/8+8 bytes: 136 B at the default) once the
// peer has sent data, the partial-message map while multi-packet messages
// arrive (at most MaxPartial entries of 120 bytes), and — only while
// packets are in flight to the peer — a send ring of SendWindow 48-byte
// records (48 KiB at the default) that goes back to a pool when the peer
// is idle. TestPeerStateSize pins these numbers; see docs/ARCHITECTURE.md.
type peer struct {
	e        *Engine
	id       PeerID
	isActive bool
	removed  bool
	stranger bool // on the strangers list (see Engine.create)
	proven   bool // acknowledged data sent to it: it receives at its address
	waiting  bool // messages queued, nothing in flight: lastProgress is when that began

	nmsgs int32 // messages queued or in flight to the peer

	// Lifetime: the engine's list of strangers or established peers, and
	// the last activity (Unix ns) that orders it.
	prev, next *peer
	lastActive int64
	// credit is the bytes that may still be sent to an
	// amplification-limited peer: ampFactor times the bytes received
	// from it, less the bytes sent.
	credit int64

	// Sender half.
	sndUna, sndNxt uint32
	ring           []pktRec // nil while nothing is in flight
	qhead, qtail   *outMsg  // messages not yet fully segmented
	inflight       int      // records in state recInflight
	lost           []uint32 // PSNs awaiting retransmission, FIFO; may hold stale entries
	lostHead       int
	synAcked       bool // an ACK (not a challenge) has been received from this peer
	sealHint       bool // the peer's address said it takes sealed datagrams only (wire.HandshakeSealRequired), before any ACK
	rwnd           uint32
	// rtt.Min is the lowest RTT of any packet (the reordering window);
	// win.Base that of a full-size packet (the delay target's base).
	rtt cc.RTT
	rto time.Duration
	win cc.Swift
	// The one-way delay bases of both directions: the sender's, of its
	// packets' forward delay (from the ACKs), and the receiver's, of the
	// peer's packets (what its ACKs report as queueing, Ack.QDelay).
	owd          cc.OWD
	lastBackoff  time.Time
	lastProgress time.Time
	rtoAt        time.Time // earliest sentAt+rto among in-flight records (may be early)
	rackTime     time.Time // send time of the latest-sent packet known delivered

	// Receiver half.
	rcvInit    bool
	rcvNxt     uint32 // every PSN before it has been received
	rcvHigh    uint32 // one past the highest PSN received
	bitmap     []uint64
	partial    map[msgKey]*partialMsg
	ackPending bool
	// ackAt, while an ACK is pending, is when (Unix ns) it must go out
	// at the latest if no data to the peer takes it along first (a
	// delayed ACK of a lone response); zero: at once.
	ackAt       int64
	nackCum     uint32 // Cum value a NACK was last sent for
	nackSent    bool
	echoTS      uint64
	lastArrival time.Time
	// The receiver's measure of the forward queueing (Ack.QDelay): the
	// echoed packet's one-way delay (its arrival here less its send
	// time there, with the clocks' offset) above the lowest of a
	// full-size packet on this stream (owd.SampleIn); echoQ is what the
	// next ACK reports (µs + 1; 0 while there is no base).
	echoQ     uint32
	advWindow uint32 // receive window advertised; zero = Config.RecvWindow
	// Address validation (see buildAck): peerBase is the latest AckBase
	// received, acknowledged instead of the data while the peer is
	// amplification-limited; challenge is a PSN to echo in an ACK
	// (echoPending), asked for by a peer that has not validated us.
	peerBase    uint32
	challenge   uint32
	echoPending bool
	// A restart of the sender's stream (a SYN or an AckBase a window or
	// more ahead) on a receiver that has state is applied only once the
	// sender echoes a challenge (resetNonce): a forged datagram cannot
	// move or reset a live stream's window. resetChallenge asks poll to
	// send the challenge, at most once per RTO.
	resetPending, resetChallenge bool
	resetBase, resetNonce        uint32
	lastChallenge                time.Time
}

func newPeer(e *Engine, id PeerID) *peer {
	isn := e.rng.Uint32()
	return &peer{
		e:      e,
		id:     id,
		sndUna: isn,
		sndNxt: isn,
		rwnd:   uint32(e.cfg.RecvWindow),
		win:    cc.Swift{Cwnd: e.cfg.InitialCwnd},
		rto:    e.cfg.InitialRTO,
	}
}

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

// A receiver that is not scheduled for a few milliseconds (a busy
// machine, a hypervisor that stops its virtual CPU) keeps receiving into
// its kernel buffer but acknowledges nothing, and a window sized to the
// path's bandwidth-delay product then idles the sender for the whole
// stall. On a stream whose ACKs the switch merges over a group
// (multicast, aggregation) that happens for every member's stall, since
// the merged ACK waits for the slowest. So once such a stream in flight has
// heard of no progress for its base RTT (at least stallQuiet), the
// sender keeps its ACK clock running: a window's worth of packets more
// in flight per base RTT of silence, for up to stallWindows base RTTs
// (BBR keeps more than the bandwidth-delay product in flight for ACKs
// that come late for the same reason). The allowance ends with
// the next progress; a silence that lasts is a loss or an outage, which
// the retransmission timeout handles as before. The base is the lowest
// RTT, not the smoothed one, which the stalls themselves inflate.
const (
	stallQuiet   = time.Millisecond
	stallWindows = 3
)

// sendLimit is how many packets may be in flight now: the congestion
// window, plus the stall allowance while ACKs have stopped.
func (p *peer) sendLimit() int {
	c := p.cwndPkts()
	start, base, ok := p.stallStart()
	if !ok {
		return c
	}
	silent := p.e.now.Sub(start)
	if silent <= 0 {
		return c
	}
	extra := min(int(float64(c)*float64(silent)/float64(base)), stallWindows*c)
	return c + extra
}

// stallStart is when the stall allowance of a stream in flight whose
// ACKs the switch merges over a group (multicast, aggregation) begins to
// grow if no progress comes: its base RTT, at least stallQuiet, after the
// last progress. base is the RTT it clocks packets out at: the lowest of
// a full-size packet, else of any packet. ok is false for other streams,
// for one with nothing in flight, or before any RTT sample.
func (p *peer) stallStart() (start time.Time, base time.Duration, ok bool) {
	if (p.id.Mode != wire.ModeMulticast && p.id.Mode != wire.ModeAggregate) || p.sndUna == p.sndNxt {
		return time.Time{}, 0, false
	}
	base = p.win.Base
	if base == 0 {
		base = p.rtt.Min
	}
	if base <= 0 {
		return time.Time{}, 0, false
	}
	return p.lastProgress.Add(max(base, stallQuiet)), base, true
}

// stallDeadline is when sendLimit next grows for a peer held by it with
// data to send (zero: it does not).
func (p *peer) stallDeadline() time.Time {
	start, base, ok := p.stallStart()
	if !ok || p.qhead == nil || p.inflight < p.sendLimit() {
		return time.Time{}
	}
	c := p.cwndPkts()
	k := max(p.inflight-c+1, 1) // the allowance that lets one more go
	if k > stallWindows*c {
		return time.Time{}
	}
	at := start.Add(time.Duration(float64(k) * float64(base) / float64(c)))
	if !at.After(p.e.now) {
		at = p.e.now.Add(time.Microsecond)
	}
	return at
}

func (p *peer) canSendNew() bool {
	w := p.sndNxt - p.sndUna
	return p.inflight < p.sendLimit() && int(w) < p.ringCap() && w < p.rwnd
}

// strangerRing is the send ring of an amplification-limited peer, in
// packets: a stranger cannot have more in flight than its budget allows
// anyway, and a full ring each (SendWindow records, 48 KiB at the
// default) would make MaxStrangers strangers cost 48 MiB.
const strangerRing = 32

// strangerPartial bounds the partial messages a stranger may have: its
// first messages, not MaxPartial of them (256 entries of 120 bytes each
// for every one of MaxStrangers strangers would be 30 MiB).
const strangerPartial = 8

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

// limited reports whether the peer is amplification-limited: a stranger
// that has not acknowledged data sent to it, at an address not validated.
func (p *peer) limited() bool {
	return p.stranger && !p.proven && p.e.addrRefs[p.id.Addr] == 0
}

// received credits an incoming datagram of n bytes to the amplification
// budget.
func (p *peer) received(n int) {
	if p.stranger && p.credit < 1<<40 {
		p.credit += ampFactor * int64(n)
	}
}

// afford reports whether a data packet with n payload bytes fits the
// amplification budget.
func (p *peer) afford(n uint32) bool { return p.credit >= int64(wire.HeaderLen)+int64(n) }

// idle reports whether the peer holds nothing to send, resend or
// acknowledge.
func (p *peer) idle() bool { return p.sndUna == p.sndNxt && p.qhead == nil && !p.ackPending }

func (p *peer) hasWork(now time.Time) bool {
	if (p.ackPending && !p.ackWaits(now)) || p.echoPending || p.resetChallenge {
		return true
	}
	if p.inflight >= p.sendLimit() {
		return false
	}
	if !p.limited() {
		return p.lostPending() || (p.qhead != nil && p.canSendNew())
	}
	// Must agree with poll, or Poll would ask to be called again at once
	// with nothing to do.
	if p.lostPending() {
		rec := &p.ring[p.lost[p.lostHead]&p.mask()]
		return rec.state != recLost || p.afford(rec.n)
	}
	if p.qhead != nil && p.canSendNew() {
		return p.afford(min(uint32(len(p.qhead.payload))-p.qhead.next, uint32(p.e.seg)))
	}
	return false
}

// ackWaits reports whether the pending ACK is a delayed one that may
// still wait for data to ride on.
func (p *peer) ackWaits(now time.Time) bool { return p.ackAt != 0 && nanos(now) < p.ackAt }

// piggybacks reports whether a pending ACK can ride on a data packet to
// the peer: on the point-to-point group, whose both ends are engines,
// with nothing to SACK, to a peer whose address is validated.
func (p *peer) piggybacks(limited bool) bool {
	return !limited && p.pointToPoint() && p.rcvHigh == p.rcvNxt
}

// pointToPoint reports whether the peer's stream has an engine at each
// end (wire.EngineToEngine: the point-to-point group and anycast), where
// ACKs ride on data and may be delayed.
func (p *peer) pointToPoint() bool { return wire.EngineToEngine(p.id.Mode, p.id.Group) }

// ackRides reports whether the first data packet poll is about to send
// to the peer has room for the pending ACK (see piggybacks): a full-size
// packet has none, and then the ACK goes alone, before the data.
func (p *peer) ackRides() bool {
	if p.inflight >= p.sendLimit() {
		return false
	}
	var n uint32
	switch {
	case p.lostPending():
		n = p.ring[p.lost[p.lostHead]&p.mask()].n
	case p.qhead != nil && p.canSendNew():
		n = min(uint32(len(p.qhead.payload))-p.qhead.next, uint32(p.e.seg))
	default:
		return false
	}
	return p.fits(n)
}

// fits reports whether a data packet of n payload bytes has room for an
// ACK frame within the MTU.
func (p *peer) fits(n uint32) bool { return wire.HeaderLen+int(n)+wire.AckFixedLen <= p.e.cfg.MTU }

// deadline is the next time the peer needs Poll without new input.
func (p *peer) deadline(now time.Time) time.Time {
	dl := p.sendDeadline()
	if at := p.stallDeadline(); !at.IsZero() && (dl.IsZero() || at.Before(dl)) {
		dl = at
	}
	if p.ackPending && p.ackWaits(now) {
		if at := time.Unix(0, p.ackAt); dl.IsZero() || at.Before(dl) {
			dl = at
		}
	}
	if p.qhead != nil && p.limited() {
		// Held by the amplification budget: another peer at the address
		// may validate it, so look again after a timeout's time.
		if r := now.Add(p.rto); dl.IsZero() || r.Before(dl) {
			dl = r
		}
	}
	return dl
}

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

// pollAck appends the pending ACK, built in buffer bufIdx, to out (twice
// to a peer whose address is not validated, budget permitting); ok
// reports whether it used the buffer.
func (p *peer) pollAck(now time.Time, out []netio.Datagram, bufIdx int, limited bool) (_ []netio.Datagram, ok bool) {
	d, ok := p.buildAck(now, p.e.buf(bufIdx), limited)
	if !ok {
		return out, false
	}
	out = append(out, d)
	if limited && p.credit >= int64(len(d.Buf)) {
		p.credit -= int64(len(d.Buf))
		out = append(out, d)
	}
	return out, true
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

// ackRec marks a packet delivered and completes its message if it was the
// last one outstanding.
func (p *peer) ackRec(rec *pktRec) {
	switch rec.state {
	case recInflight:
		p.inflight--
	case recLost:
	default:
		return
	}
	rec.state = recAcked
	if rec.sentAt.After(p.rackTime) {
		p.rackTime = rec.sentAt
	}
	p.win.OnAck(&p.e.swift)
	m := rec.msg
	m.unacked--
	if m.unacked == 0 && m.allSent && !m.done {
		p.e.complete(m, p, nil)
	}
}

// consistent reports whether ACK a fits what was sent: its cumulative
// point in [sndUna, sndNxt] and its blocks below sndNxt.
func (p *peer) consistent(a *wire.Ack) bool {
	ok := !wire.SeqLess(a.Cum, p.sndUna) && !wire.SeqLess(p.sndNxt, a.Cum)
	for i := 0; i < int(a.NBlocks) && ok; i++ {
		ok = !wire.SeqLess(p.sndNxt, a.Blocks[i].End)
	}
	return ok
}

// plausible reports whether an ACK that is not consistent may still be a
// late one from the peer: its cumulative point within a send window below
// sndUna, its blocks below sndNxt. A blind forgery is plausible with a
// chance of 2^-20 at the default window.
func (p *peer) plausible(a *wire.Ack) bool {
	if !p.nearSent(a.Cum) {
		return false
	}
	for i := 0; i < int(a.NBlocks); i++ {
		if wire.SeqLess(p.sndNxt, a.Blocks[i].End) {
			return false
		}
	}
	return true
}

// nearSent reports whether psn lies within a send window below what is in
// flight, or in it: [sndUna-SendWindow, sndNxt]. A challenge names the
// AckBase of a packet the peer got, which this side may have moved past
// since; a forged one lands there with a chance of 2^-20 at the default.
func (p *peer) nearSent(psn uint32) bool {
	lo := p.sndUna - uint32(p.e.cfg.SendWindow)
	return psn-lo <= p.sndNxt-lo
}

// onAck applies an ACK. ackTS is the ACK's header timestamp: the
// receiver's clock when it sent the ACK if single (an ACK from the one
// receiver of the stream), the forwarding node's for an ACK it merged.
// The work is bounded by what is in
// flight (at most SendWindow), whatever the ACK names: SACK blocks are
// clipped to [sndUna, sndNxt) and merged before they are walked. An ACK
// is applied only if it is consistent with what was sent (cumulative
// point in [sndUna, sndNxt], blocks below sndNxt) or, from a peer that is
// not a stranger, plausibly a late one (cumulative point at most a send
// window below sndUna): the initial sequence number is random, so a blind
// guess hits with a chance of about 2^-20, and a forged ACK (blocks over
// the whole sequence space, say) can neither acknowledge data the peer
// never got nor shrink the window. A consistent ACK also proves that the
// peer receives at its address. A challenge (an ACK with FlagSyn) is
// applied too, but it says only that the peer got a packet, not that it
// took this side's stream: the packets keep their SYN until a real ACK
// comes, so that a receiver whose window a forged datagram started sees
// the start and challenges it. onAck reports whether the ACK was
// applied.
func (p *peer) onAck(now time.Time, a *wire.Ack, nack bool, ackTS uint64, single, challenge bool) bool {
	consistent := p.consistent(a)
	if !consistent && (p.stranger || !p.plausible(a)) {
		return false
	}
	if !challenge {
		p.synAcked = true
	}
	p.rwnd = min(a.Window, uint32(p.e.cfg.SendWindow))
	// The RTT sample is taken after the ACK is applied, so that it can
	// tell whether the echoed packet was a full one (see onRTT).
	echoFull := false
	defer func() {
		if a.EchoTS != 0 {
			r := time.Duration(now.UnixNano()-int64(a.EchoTS)) - time.Duration(a.AckDelay)
			// The receiver's arrival time of the echoed packet, on its
			// clock, less the send time on ours: the forward one-way
			// delay plus the clocks' offset.
			owd, haveOWD := int64(0), single && ackTS != 0
			if haveOWD {
				owd = int64(ackTS) - int64(a.AckDelay) - int64(a.EchoTS)
			}
			// A merged ACK's timestamps come from several clocks: it
			// carries the forward queueing its receiver measured.
			q := time.Duration(-1)
			if !single && a.QDelay != 0 {
				q = time.Duration(a.QDelay-1) * time.Microsecond
			}
			if r > 0 && r < maxRTTValid {
				p.onRTT(now, r, echoFull, owd, haveOWD, q)
			}
		}
	}()
	full := func(rec *pktRec) {
		if !echoFull && rec.n >= uint32(p.e.seg)/2 && uint64(rec.sentAt.UnixNano()) == a.EchoTS {
			echoFull = true
		}
	}
	if p.ring == nil {
		if consistent && p.stranger && !p.proven {
			p.validated()
		}
		p.e.activate(p)
		return true
	}
	progress := false
	m := p.mask()
	// Cumulative part; an ACK for PSNs never sent is ignored. sndUna <
	// Cum <= sndNxt bounds the walk by the packets in flight.
	if !wire.SeqLess(p.sndNxt, a.Cum) {
		for wire.SeqLess(p.sndUna, a.Cum) {
			rec := &p.ring[p.sndUna&m]
			full(rec)
			p.ackRec(rec)
			p.e.releaseRec(rec)
			p.sndUna++
			progress = true
		}
	}
	// Selective part: each block clipped to the packets in flight, as
	// offsets from sndUna, sorted and walked once over their union.
	inflight := p.sndNxt - p.sndUna
	var clip [wire.MaxSackBlocks]span
	nclip := 0
	for i := 0; i < int(a.NBlocks); i++ {
		if lo, hi := clipBlock(a.Blocks[i], p.sndUna, inflight); lo < hi {
			j := nclip
			for j > 0 && clip[j-1].start > lo {
				clip[j] = clip[j-1]
				j--
			}
			clip[j] = span{lo, hi}
			nclip++
		}
	}
	var highSacked uint32
	haveSack := false
	cursor := uint32(0)
	for _, c := range clip[:nclip] {
		for off := max(c.start, cursor); off < c.end; off++ {
			psn := p.sndUna + off
			rec := &p.ring[psn&m]
			if rec.state == recInflight || rec.state == recLost {
				full(rec)
				p.ackRec(rec)
				progress = true
			}
		}
		cursor = max(cursor, c.end)
		highSacked, haveSack = p.sndUna+cursor-1, true
	}
	// Loss detection (RACK-like): a hole is lost when a packet sent after
	// it was delivered and either it is dupThresh packets behind the
	// highest SACK, or it was sent more than a reordering window (a
	// quarter of the lowest RTT) before that packet, or the receiver
	// NACKed it. The time rule makes small windows recover without
	// waiting for a timeout.
	reoWnd := p.rtt.Min / 4
	if haveSack {
		for psn := p.sndUna; wire.SeqLess(psn, highSacked); psn++ {
			rec := &p.ring[psn&m]
			if rec.state != recInflight || !rec.sentAt.Before(p.rackTime) {
				continue
			}
			if nack || highSacked-psn >= dupThresh || (reoWnd > 0 && p.rackTime.Sub(rec.sentAt) > reoWnd) {
				p.markLost(psn, rec)
				p.e.stats.FastRetransmits++
			}
		}
	}
	if progress {
		p.lastProgress = now
	}
	if consistent && p.stranger && !p.proven {
		p.validated()
	}
	p.e.activate(p)
	return true
}

// validated records that the peer proved it receives at its address. If
// its data was answered with challenges so far, a real ACK goes out now.
func (p *peer) validated() {
	p.proven = true
	p.e.promote(p)
	if p.rcvInit {
		p.ackPending, p.ackAt = true, 0
	}
}

// clipBlock intersects SACK block b with the n packets in flight from
// una, as offsets from una: [lo, hi) with hi <= n, empty if lo >= hi. A
// block is at most 2^31 long and n at most 2^16, so the intersection of
// the two arcs of sequence space is one range.
func clipBlock(b wire.SackBlock, una, n uint32) (lo, hi uint32) {
	length := b.End - b.Start
	if length == 0 || length > 1<<31 {
		return 0, 0
	}
	if off := b.Start - una; off < n {
		return off, uint32(min(uint64(off)+uint64(length), uint64(n)))
	}
	// The block starts outside the window: it covers offset 0 only if it
	// reaches past una.
	if before := una - b.Start; before < length {
		return 0, min(length-before, n)
	}
	return 0, 0
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

// checkData runs the receiver half's checks for one data packet: it
// (re)starts the window if needed, schedules an ACK, and reports whether
// the packet is new and in the window, whether it agrees with the message
// it joins, and whether there is room to track that message. pm is the
// message's partial state, if any.
func (p *peer) checkData(now time.Time, h *wire.Header) (ok bool, pm *partialMsg) {
	cfg := &p.e.cfg
	if !p.rcvInit {
		p.resetReceiver(h.AckBase)
	} else if d := h.AckBase - p.rcvNxt; (h.Flags&wire.FlagSyn != 0 && !p.nearWindow(h.AckBase)) ||
		(d >= uint32(cfg.RecvWindow) && d < 1<<31) || (d >= 1<<31 && -d > StaleSpan) {
		// A new incarnation of the sender's stream, a jump past the
		// window, or an AckBase further behind it than the sender's
		// stream can be (the window was started by a datagram forged in
		// the sender's name, and the real stream, whose SYN is
		// acknowledged, would otherwise be taken for duplicates forever):
		// only on the sender's echo of a challenge (on a member's
		// multicast stream, the forwarding node that relays it echoes).
		p.requestReset(now, h.AckBase)
		return false, nil
	}
	// The sender never resends PSNs below its AckBase: skip them.
	if d := h.AckBase - p.rcvNxt; d != 0 && d < 1<<31 {
		p.skipTo(h.AckBase)
	}
	p.ackPending, p.ackAt = true, 0
	p.peerBase = h.AckBase
	p.echoTS = h.TS
	p.lastArrival = now
	arrival := now
	if a := p.e.arrival; !a.IsZero() && a.Before(now) {
		arrival = a // the kernel's receive time (SetArrival)
	}
	p.echoQ = p.forwardQueue(arrival, h)
	p.e.activate(p)
	psn := h.PSN
	if wire.SeqLess(psn, p.rcvNxt) || p.hasBit(psn) {
		p.e.stats.Duplicates++
		return false, nil
	}
	if psn-p.rcvNxt >= uint32(cfg.RecvWindow) {
		p.e.stats.OutOfWindow++
		return false, nil
	}
	// Fragment consistency. A single-packet message (Offset 0, Len ==
	// MsgLen) needs no tracking unless a message with its id is partly
	// received.
	single := h.Offset == 0 && h.MsgLen == uint32(h.Len)
	k := msgKey{h.MsgID, h.Flags&wire.FlagResp != 0}
	if !single || len(p.partial) > 0 {
		pm = p.partial[k]
	}
	if single && pm == nil {
		return true, nil
	}
	start, end := uint64(h.Offset), uint64(h.Offset)+uint64(h.Len)
	room := true
	bad := h.Len == 0 || end > uint64(h.MsgLen)
	if !bad && pm != nil {
		bad = pm.msgLen != h.MsgLen
		if !bad {
			var fits bool
			fits, room = pm.fits(uint32(start), uint32(end))
			bad = !fits
		}
	}
	if bad {
		// Acknowledged but not delivered: a sender that disagrees with
		// itself is not made to resend it forever.
		p.e.stats.Contradicting++
		p.markReceived(psn)
		return false, nil
	}
	maxPartial := cfg.MaxPartial
	if p.stranger {
		maxPartial = min(maxPartial, strangerPartial)
	}
	if (pm == nil && len(p.partial) >= maxPartial && !p.evictStale(now)) || !room {
		p.e.stats.PartialOverflow++
		return false, nil
	}
	return true, pm
}

// commitData marks an accepted packet received and reports whether it
// completes its message.
func (p *peer) commitData(now time.Time, h *wire.Header, pm *partialMsg) (done bool) {
	if pm == nil && h.Offset == 0 && h.MsgLen == uint32(h.Len) {
		done = true
	} else {
		k := msgKey{h.MsgID, h.Flags&wire.FlagResp != 0}
		if pm == nil {
			if p.partial == nil {
				p.partial = make(map[msgKey]*partialMsg)
			}
			pm = &partialMsg{msgLen: h.MsgLen}
			p.partial[k] = pm
		}
		pm.add(h.Offset, h.Offset+uint32(h.Len))
		pm.last = now
		if pm.complete() {
			delete(p.partial, k)
			done = true
		}
	}
	p.markReceived(h.PSN)
	return done
}

// markReceived sets psn (in the window) received and advances the
// cumulative point. rcvHigh - rcvNxt stays at most RecvWindow.
func (p *peer) markReceived(psn uint32) {
	p.setBit(psn)
	p.advance()
	if wire.SeqLess(p.rcvHigh, psn+1) {
		p.rcvHigh = psn + 1
	}
}

// advance moves rcvNxt past PSNs already received (at most RecvWindow).
func (p *peer) advance() {
	for p.hasBit(p.rcvNxt) {
		p.clearBit(p.rcvNxt)
		p.rcvNxt++
	}
	if wire.SeqLess(p.rcvHigh, p.rcvNxt) {
		p.rcvHigh = p.rcvNxt
	}
}

// skipTo moves the cumulative point forward to base (the sender's AckBase:
// it never resends PSNs below it) in O(RecvWindow/64): a jump of at least
// the window empties it, a shorter one clears the bits skipped.
func (p *peer) skipTo(base uint32) {
	w := uint32(p.e.cfg.RecvWindow)
	d := base - p.rcvNxt
	if d >= w {
		clear(p.bitmap)
		p.rcvNxt, p.rcvHigh = base, base
		return
	}
	p.clearBits(p.rcvNxt, d)
	p.rcvNxt = base
	p.advance()
}

// clearBits clears the bits of the n < RecvWindow PSNs from psn, a word at
// a time.
func (p *peer) clearBits(psn, n uint32) {
	w := uint32(p.e.cfg.RecvWindow)
	for n > 0 {
		i := psn & (w - 1)
		bit := i % 64
		k := min(64-bit, n, w-i)
		mask := ^uint64(0)
		if k < 64 {
			mask = (1<<k - 1) << bit
		}
		p.bitmap[i/64] &^= mask
		psn += k
		n -= k
	}
}

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

func (p *peer) nearWindow(psn uint32) bool {
	w := uint32(p.e.cfg.RecvWindow)
	d := psn - p.rcvNxt
	return d < w || -d <= w
}

// requestReset answers a datagram that would restart the receive window
// at base with a challenge (RFC 5961's challenge ACK, in this protocol's
// form: an ACK with FlagSyn whose header PSN is a fresh nonce and whose
// cumulative point is base); the sender echoes the nonce (buildEcho) and
// only then is the window restarted (onResetEcho). At most one challenge
// goes out per RTO, so a flood of forged restarts gets no more answers
// than the real sender needs; under such a flood a sender that really
// restarted gets through once its resend is the first request after a
// timeout.
func (p *peer) requestReset(now time.Time, base uint32) {
	p.e.stats.ResetChallenges++
	if p.resetPending && now.Sub(p.lastChallenge) < p.rto {
		// One challenge in flight: the base it asks about stands until
		// it is echoed or a timeout has passed (the real sender resends).
		return
	}
	p.resetPending, p.resetBase = true, base
	p.resetNonce = p.e.rng.Uint32() | 1
	p.resetChallenge, p.lastChallenge = true, now
	p.e.activate(p)
}

// onResetEcho takes an ACK that may echo the reset challenge: if it does,
// the window restarts at the requested base. It reports whether it did.
func (p *peer) onResetEcho(a *wire.Ack) bool {
	if !p.resetPending || a.Cum != p.resetNonce || a.NBlocks != 0 {
		return false
	}
	p.resetPending = false
	p.resetReceiver(p.resetBase)
	p.e.stats.Resets++
	return true
}

// buildResetChallenge encodes the challenge requestReset asked for.
func (p *peer) buildResetChallenge(now time.Time, buf []byte) netio.Datagram {
	p.resetChallenge = false
	a := wire.Ack{Cum: p.resetBase, Window: uint32(p.e.cfg.RecvWindow)}
	h := wire.Header{
		Version: wire.Version,
		Op:      wire.OpAck,
		Flags:   wire.FlagSyn,
		Mode:    p.id.Mode,
		Group:   p.id.Group,
		Src:     p.e.local(p.id.Group),
		Dst:     p.id.Member,
		PSN:     p.resetNonce,
		TS:      uint64(now.UnixNano()),
	}
	p.e.stats.AcksSent++
	return netio.Datagram{Addr: p.id.Addr, Buf: wire.PutAckPacket(buf, &h, &a), Control: true}
}

func (p *peer) resetReceiver(base uint32) {
	p.rcvInit = true
	p.rcvNxt, p.rcvHigh = base, base
	if p.bitmap == nil {
		p.bitmap = make([]uint64, p.e.cfg.RecvWindow/64+1)
	}
	clear(p.bitmap)
	clear(p.partial)
}

func (p *peer) bitIdx(psn uint32) (int, uint64) {
	i := psn & uint32(p.e.cfg.RecvWindow-1)
	return int(i / 64), 1 << (i % 64)
}

func (p *peer) hasBit(psn uint32) bool {
	if psn-p.rcvNxt >= uint32(p.e.cfg.RecvWindow) {
		return false
	}
	w, b := p.bitIdx(psn)
	return p.bitmap[w]&b != 0
}

func (p *peer) setBit(psn uint32)   { w, b := p.bitIdx(psn); p.bitmap[w] |= b }
func (p *peer) clearBit(psn uint32) { w, b := p.bitIdx(psn); p.bitmap[w] &^= b }

// buildAck encodes an ACK (or NACK) for the receiver half into buf.
//
// For an amplification-limited peer (limited) it is a challenge instead,
// within the budget (none is sent, ok false, if it does not fit): an ACK
// with FlagSyn whose header PSN is this side's sndUna, which the peer
// echoes as the cumulative point of an ACK (buildEcho), proving that it
// receives at its address. The challenge acknowledges only what the
// peer's AckBase says it knows is acknowledged, so the peer keeps
// resending its data, and each resend brings a new challenge (and budget),
// until an echo arrives: validation survives loss without the peer
// knowing about it.
func (p *peer) buildAck(now time.Time, buf []byte, limited bool) (d netio.Datagram, ok bool) {
	p.ackPending, p.ackAt = false, 0
	maxBlocks := wire.MaxSackBlocks
	if limited {
		if p.credit < wire.HeaderLen+wire.AckFixedLen {
			p.e.stats.AmplificationLimited++
			return d, false
		}
		maxBlocks = 0
	}
	a := &p.e.ack
	p.fillAck(now, a)
	if limited {
		// No RTT sample either: nothing is acknowledged.
		a.Cum, a.EchoTS = p.peerBase, 0
	}
	// SACK blocks above the cumulative point (rcvHigh - rcvNxt is at
	// most RecvWindow).
	in := false
	var start uint32
	for psn := p.rcvNxt + 1; maxBlocks > 0 && (wire.SeqLess(psn, p.rcvHigh) || psn == p.rcvHigh); psn++ {
		has := psn != p.rcvHigh && p.hasBit(psn)
		if has && !in {
			in, start = true, psn
		} else if !has && in {
			in = false
			a.Blocks[a.NBlocks] = wire.SackBlock{Start: start, End: psn}
			a.NBlocks++
			if int(a.NBlocks) == maxBlocks {
				break
			}
		}
		if psn == p.rcvHigh {
			break
		}
	}
	op := wire.OpAck
	if a.NBlocks > 0 && p.rcvHigh-p.rcvNxt > dupThresh && (!p.nackSent || p.nackCum != p.rcvNxt) {
		op = wire.OpNack
		p.nackSent, p.nackCum = true, p.rcvNxt
		p.e.stats.NacksSent++
	}
	h := wire.Header{
		Version: wire.Version,
		Op:      op,
		Mode:    p.id.Mode,
		Group:   p.id.Group,
		Src:     p.e.local(p.id.Group),
		Dst:     p.id.Member,
		TS:      uint64(now.UnixNano()),
	}
	if limited {
		h.Flags, h.PSN = wire.FlagSyn, p.sndUna
	}
	b := wire.PutAckPacket(buf, &h, a)
	p.e.stats.AcksSent++
	if limited {
		p.credit -= int64(len(b))
	}
	return netio.Datagram{Addr: p.id.Addr, Buf: b, Control: true}, true
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

// window is the receive window advertised to the peer, in packets.
func (p *peer) window() uint32 {
	if p.advWindow != 0 {
		return p.advWindow
	}
	return uint32(p.e.cfg.RecvWindow)
}

// fillAck sets a to the cumulative ACK of the peer's stream, without
// SACK blocks (what rides on data: see piggybacks; buildAck adds them).
func (p *peer) fillAck(now time.Time, a *wire.Ack) {
	*a = wire.Ack{Cum: p.rcvNxt, Window: p.window(), EchoTS: p.echoTS, QDelay: p.echoQ}
	if d := now.Sub(p.lastArrival); d > 0 && d < time.Second {
		a.AckDelay = uint32(d)
	}
}

// buildEcho encodes the answer to a peer's challenge (see buildAck): an
// ACK whose cumulative point is the challenge, the peer's own oldest
// unacknowledged PSN, so it acknowledges nothing the peer does not know
// is acknowledged.
func (p *peer) buildEcho(now time.Time, buf []byte, limited bool) (d netio.Datagram, ok bool) {
	p.echoPending = false
	if limited && p.credit < wire.HeaderLen+wire.AckFixedLen {
		p.e.stats.AmplificationLimited++
		return d, false
	}
	a := wire.Ack{Cum: p.challenge, Window: p.window()}
	h := wire.Header{
		Version: wire.Version,
		Op:      wire.OpAck,
		Mode:    p.id.Mode,
		Group:   p.id.Group,
		Src:     p.e.local(p.id.Group),
		Dst:     p.id.Member,
		TS:      uint64(now.UnixNano()),
	}
	b := wire.PutAckPacket(buf, &h, &a)
	p.e.stats.AcksSent++
	if limited {
		p.credit -= int64(len(b))
	}
	return netio.Datagram{Addr: p.id.Addr, Buf: b, Control: true}, true
}
