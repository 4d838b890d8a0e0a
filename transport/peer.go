package transport

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Swift-style congestion control constants.
const (
	ccBeta      = 0.8 // multiplicative decrease gain per unit of excess delay
	ccMaxMDF    = 0.5 // largest single decrease (halving)
	dupThresh   = 3   // packets SACKed beyond a hole before it is presumed lost
	maxRTTValid = 60 * time.Second
)

type msgKey struct {
	id   uint64
	resp bool
}

type partialMsg struct {
	got  uint32
	last time.Time
}

// peer is the per-peer sequence state inside a group context. Sender and
// receiver halves are independent: each direction has its own PSN space.
//
// Size: the struct itself is 416 bytes on 64-bit platforms, plus the
// receive bitmap (RecvWindow/8+8 bytes: 136 B at the default) once the
// peer has sent data, the partial-message map while multi-packet messages
// arrive, and — only while packets are in flight to the peer — a send ring
// of SendWindow 48-byte records (48 KiB at the default) that goes back to
// a pool when the peer is idle. TestPeerStateSize pins these numbers; see
// docs/ARCHITECTURE.md.
type peer struct {
	e        *Engine
	id       PeerID
	isActive bool
	removed  bool

	// Sender half.
	sndUna, sndNxt uint32
	ring           []pktRec // nil while nothing is in flight
	qhead, qtail   *outMsg  // messages not yet fully segmented
	inflight       int      // records in state recInflight
	lost           []uint32 // PSNs awaiting retransmission, FIFO; may hold stale entries
	lostHead       int
	synAcked       bool // an ACK has been received from this peer
	rwnd           uint32
	cwnd           float64
	srtt, rttvar   time.Duration
	rto, minRTT    time.Duration // minRTT: lowest RTT of a full-size packet (delay target base)
	minAnyRTT      time.Duration // lowest RTT of any packet (reordering window)
	hasRTT         bool
	delayOK        bool // last delay sample was below target
	// Forward one-way delay base (LEDBAT-style, RFC 6817): the lowest
	// (receiver arrival - sender send) of a full-size packet, with the
	// clocks' offset in it, kept as the minimum of two rotating buckets so
	// that clock drift ages out. Zero bucket: none yet.
	owdBase      [2]int64
	owdRotate    time.Time
	lastDecrease time.Time
	lastBackoff  time.Time
	lastProgress time.Time
	rtoAt        time.Time // earliest sentAt+rto among in-flight records (may be early)
	rackTime     time.Time // send time of the latest-sent packet known delivered

	// Receiver half.
	rcvInit     bool
	rcvNxt      uint32 // every PSN before it has been received
	rcvHigh     uint32 // one past the highest PSN received
	bitmap      []uint64
	partial     map[msgKey]*partialMsg
	ackPending  bool
	nackCum     uint32 // Cum value a NACK was last sent for
	nackSent    bool
	echoTS      uint64
	lastArrival time.Time
	advWindow   uint32 // receive window advertised; zero = Config.RecvWindow
}

func newPeer(e *Engine, id PeerID) *peer {
	isn := e.rng.Uint32()
	return &peer{
		e:      e,
		id:     id,
		sndUna: isn,
		sndNxt: isn,
		rwnd:   uint32(e.cfg.RecvWindow),
		cwnd:   e.cfg.InitialCwnd,
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

func (p *peer) cwndPkts() int {
	c := int(p.cwnd)
	if c < 1 {
		c = 1
	}
	return c
}

func (p *peer) canSendNew() bool {
	w := p.sndNxt - p.sndUna
	return p.inflight < p.cwndPkts() && int(w) < p.e.cfg.SendWindow && w < p.rwnd
}

func (p *peer) lostPending() bool { return p.lostHead < len(p.lost) }

func (p *peer) hasWork() bool {
	if p.ackPending {
		return true
	}
	if p.inflight >= p.cwndPkts() {
		return false
	}
	return p.lostPending() || (p.qhead != nil && p.canSendNew())
}

// deadline is the next time the peer needs Poll without new input.
func (p *peer) deadline(now time.Time) time.Time {
	if p.sndUna == p.sndNxt {
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
		p.e.putRing(p.ring)
		p.ring = nil
		p.lost = p.lost[:0]
		p.lostHead = 0
	}
}

// poll emits up to budget datagrams into out; used is how many of the
// engine's buffers this Poll has handed out already.
func (p *peer) poll(now time.Time, out []netio.Datagram, used, budget int) ([]netio.Datagram, int) {
	n := 0
	if p.ackPending {
		out = append(out, p.buildAck(now, p.e.buf(used)))
		n++
	}
	if p.sndUna != p.sndNxt {
		if since := now.Sub(p.lastProgress); since >= p.e.cfg.DeadTimeout {
			p.e.stats.PeersDead++
			p.failAll(&PeerError{Peer: p.id, Since: since})
			p.e.removePeer(p)
			return out, n
		}
		if p.inflight > 0 && !now.Before(p.rtoAt) {
			p.scanTimeouts(now)
		}
	}
	for n < budget && p.lostPending() && p.inflight < p.cwndPkts() {
		psn := p.lost[p.lostHead]
		p.lostHead++
		rec := &p.ring[psn&p.mask()]
		if rec.state != recLost {
			continue
		}
		rec.retx++
		p.e.stats.PacketsRetransmitted++
		out = p.emit(now, out, used+n, psn, rec, true)
		n++
	}
	if !p.lostPending() {
		p.lost = p.lost[:0]
		p.lostHead = 0
	}
	for n < budget && p.qhead != nil && p.canSendNew() {
		m := p.qhead
		if p.ring == nil {
			p.ring = p.e.getRing()
		}
		if p.sndUna == p.sndNxt {
			p.lastProgress = now // idle time does not count towards DeadTimeout
		}
		psn := p.sndNxt
		p.sndNxt++
		rec := &p.ring[psn&p.mask()]
		seg := uint32(len(m.payload)) - m.next
		if seg > uint32(p.e.seg) {
			seg = uint32(p.e.seg)
		}
		*rec = pktRec{msg: m, off: m.next, n: seg}
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
		out = p.emit(now, out, used+n, psn, rec, false)
		n++
	}
	return out, n
}

func (p *peer) emit(now time.Time, out []netio.Datagram, bufIdx int, psn uint32, rec *pktRec, retx bool) []netio.Datagram {
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
	pkt, _ := wire.AppendPacket(p.e.buf(bufIdx)[:0], &h, m.payload[rec.off:rec.off+rec.n])
	out = append(out, netio.Datagram{Addr: p.id.Addr, Buf: pkt})
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
			p.decrease(now, 1-ccMaxMDF)
		}
	}
}

func (p *peer) decrease(now time.Time, factor float64) {
	p.cwnd *= factor
	if p.cwnd < p.e.cfg.MinCwnd {
		p.cwnd = p.e.cfg.MinCwnd
	}
	p.lastDecrease = now
}

// onRTT takes one RTT sample. The base RTT (minRTT), which the delay
// target is built on, is learnt only from full-size packets: a tiny
// packet's RTT leaves out the serialization a full one pays on every hop
// (720 µs per 9 KB hop at 100 Mbit/s), and a target built on it would
// throttle bulk transfers to a packet per RTT.
// owdBucket is how long one bucket of the forward-delay base lasts: the
// base is the lowest delay of the last one to two buckets, so a drift of
// the clocks' offset ages out of it.
const owdBucket = 30 * time.Second

// onRTT takes one RTT sample r (and, if haveOWD, the forward one-way delay
// with the clocks' offset, owd) for the timeout and the delay signal.
//
// The delay signal is the queueing on the way to the receiver: the
// forward one-way delay above its base, where the ACK says when the
// packet arrived; otherwise (merged ACKs, whose timestamps come from
// different clocks) the RTT above the lowest RTT. Forward delay leaves
// out the ACK's own queueing, behind the receiver's outgoing data on a
// shared link, which is not congestion on this stream's path (ring and
// in-network collectives send and receive at once on every link).
func (p *peer) onRTT(now time.Time, r time.Duration, full bool, owd int64, haveOWD bool) {
	cfg := &p.e.cfg
	if !p.hasRTT {
		p.srtt, p.rttvar, p.hasRTT = r, r/2, true
	} else {
		d := p.srtt - r
		if d < 0 {
			d = -d
		}
		p.rttvar = (3*p.rttvar + d) / 4
		p.srtt = (7*p.srtt + r) / 8
	}
	old := p.rto
	p.rto = min(max(p.srtt+4*p.rttvar, cfg.MinRTO), cfg.MaxRTO)
	if p.rto < old/2 {
		// The timeout came down from a backoff: timers armed with the old
		// value would fire far too late, so rescan at the next Poll.
		p.rtoAt = now
	}
	if p.minAnyRTT == 0 || r < p.minAnyRTT {
		p.minAnyRTT = r
	}
	if full && (p.minRTT == 0 || r < p.minRTT) {
		p.minRTT = r
	}
	if p.minRTT == 0 {
		return // no base yet: no delay signal
	}
	allowed := max(cfg.TargetDelay, p.minRTT)
	queued := r - p.minRTT
	if haveOWD {
		if full {
			if now.Sub(p.owdRotate) >= owdBucket {
				p.owdBase[1], p.owdBase[0], p.owdRotate = p.owdBase[0], 0, now
			}
			if p.owdBase[0] == 0 || owd < p.owdBase[0] {
				p.owdBase[0] = owd
			}
		}
		base := p.owdBase[0]
		if p.owdBase[1] != 0 && (base == 0 || p.owdBase[1] < base) {
			base = p.owdBase[1]
		}
		if base != 0 {
			queued = time.Duration(owd - base)
		}
	}
	if queued <= allowed {
		p.delayOK = true
		return
	}
	p.delayOK = false
	if now.Sub(p.lastDecrease) >= p.srtt {
		// Back off in proportion to the excess, as before on the RTT:
		// (queued - allowed) / (base + queued).
		f := 1 - ccBeta*float64(queued-allowed)/float64(p.minRTT+queued)
		p.decrease(now, max(f, 1-ccMaxMDF))
	}
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
	if p.delayOK {
		p.cwnd = min(p.cwnd+1/p.cwnd, p.e.cfg.MaxCwnd)
	}
	m := rec.msg
	m.unacked--
	if m.unacked == 0 && m.allSent && !m.done {
		p.e.complete(m, p, nil)
	}
}

// onAck applies an ACK. ackTS is the ACK's header timestamp: the
// receiver's clock when it sent the ACK if single (an ACK from the one
// receiver of the stream), the forwarding node's for an ACK it merged.
func (p *peer) onAck(now time.Time, a *wire.Ack, nack bool, ackTS uint64, single bool) {
	p.synAcked = true
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
			if r > 0 && r < maxRTTValid {
				p.onRTT(now, r, echoFull, owd, haveOWD)
			}
		}
	}()
	full := func(rec *pktRec) {
		if !echoFull && rec.n >= uint32(p.e.seg)/2 && uint64(rec.sentAt.UnixNano()) == a.EchoTS {
			echoFull = true
		}
	}
	if p.ring == nil {
		p.e.activate(p)
		return
	}
	progress := false
	m := p.mask()
	// Cumulative part; an ACK for PSNs never sent is ignored.
	if !wire.SeqLess(p.sndNxt, a.Cum) {
		for wire.SeqLess(p.sndUna, a.Cum) {
			rec := &p.ring[p.sndUna&m]
			full(rec)
			p.ackRec(rec)
			*rec = pktRec{}
			p.sndUna++
			progress = true
		}
	}
	// Selective part.
	var highSacked uint32
	haveSack := false
	for i := 0; i < int(a.NBlocks); i++ {
		b := a.Blocks[i]
		for psn := b.Start; psn != b.End; psn++ {
			if wire.SeqLess(psn, p.sndUna) {
				continue
			}
			if !wire.SeqLess(psn, p.sndNxt) {
				break
			}
			rec := &p.ring[psn&m]
			if rec.state == recInflight || rec.state == recLost {
				full(rec)
				p.ackRec(rec)
				progress = true
			}
			if !haveSack || wire.SeqLess(highSacked, psn) {
				highSacked, haveSack = psn, true
			}
		}
	}
	// Loss detection (RACK-like): a hole is lost when a packet sent after
	// it was delivered and either it is dupThresh packets behind the
	// highest SACK, or it was sent more than a reordering window (a
	// quarter of the lowest RTT) before that packet, or the receiver
	// NACKed it. The time rule makes small windows recover without
	// waiting for a timeout.
	reoWnd := p.minAnyRTT / 4
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
	p.e.activate(p)
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
		p.ring[p.sndUna&m] = pktRec{}
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
			*rec = pktRec{}
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
// the packet is new and in the window, and whether there is room to track
// its message. pm is the message's partial state, if any.
func (p *peer) checkData(now time.Time, h *wire.Header) (ok bool, pm *partialMsg) {
	cfg := &p.e.cfg
	if !p.rcvInit || (h.Flags&wire.FlagSyn != 0 && !p.nearWindow(h.AckBase)) {
		p.resetReceiver(h.AckBase)
	}
	// The sender never resends PSNs below its AckBase: skip them.
	if wire.SeqLess(p.rcvNxt, h.AckBase) && h.AckBase-p.rcvNxt < 1<<31 {
		for p.rcvNxt != h.AckBase {
			p.clearBit(p.rcvNxt)
			p.rcvNxt++
		}
		if wire.SeqLess(p.rcvHigh, p.rcvNxt) {
			p.rcvHigh = p.rcvNxt
		}
	}
	p.ackPending = true
	p.echoTS = h.TS
	p.lastArrival = now
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
	if h.MsgLen != uint32(h.Len) {
		pm = p.partial[msgKey{h.MsgID, h.Flags&wire.FlagResp != 0}]
		if pm == nil && len(p.partial) >= cfg.MaxPartial && !p.evictStale(now) {
			p.e.stats.PartialOverflow++
			return false, nil
		}
	}
	return true, pm
}

// commitData marks an accepted packet received and reports whether it
// completes its message.
func (p *peer) commitData(now time.Time, h *wire.Header, pm *partialMsg) (done bool) {
	if h.MsgLen == uint32(h.Len) {
		done = true
	} else {
		k := msgKey{h.MsgID, h.Flags&wire.FlagResp != 0}
		if pm == nil {
			if p.partial == nil {
				p.partial = make(map[msgKey]*partialMsg)
			}
			pm = &partialMsg{}
			p.partial[k] = pm
		}
		pm.got += uint32(h.Len)
		pm.last = now
		if pm.got >= h.MsgLen {
			delete(p.partial, k)
			done = true
		}
	}
	psn := h.PSN
	p.setBit(psn)
	for p.hasBit(p.rcvNxt) {
		p.clearBit(p.rcvNxt)
		p.rcvNxt++
	}
	if wire.SeqLess(p.rcvHigh, psn+1) {
		p.rcvHigh = psn + 1
	}
	if wire.SeqLess(p.rcvHigh, p.rcvNxt) {
		p.rcvHigh = p.rcvNxt
	}
	return done
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
func (p *peer) buildAck(now time.Time, buf []byte) netio.Datagram {
	p.ackPending = false
	a := &p.e.ack
	win := uint32(p.e.cfg.RecvWindow)
	if p.advWindow != 0 {
		win = p.advWindow
	}
	*a = wire.Ack{
		Cum:    p.rcvNxt,
		Window: win,
		EchoTS: p.echoTS,
	}
	if d := now.Sub(p.lastArrival); d > 0 && d < time.Second {
		a.AckDelay = uint32(d)
	}
	// SACK blocks above the cumulative point.
	in := false
	var start uint32
	for psn := p.rcvNxt + 1; wire.SeqLess(psn, p.rcvHigh) || psn == p.rcvHigh; psn++ {
		has := psn != p.rcvHigh && p.hasBit(psn)
		if has && !in {
			in, start = true, psn
		} else if !has && in {
			in = false
			a.Blocks[a.NBlocks] = wire.SackBlock{Start: start, End: psn}
			a.NBlocks++
			if int(a.NBlocks) == wire.MaxSackBlocks {
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
	h.Len = uint16(a.EncodedLen())
	b := buf[:wire.HeaderLen+int(h.Len)]
	h.Encode(b)
	a.Encode(b[wire.HeaderLen:])
	wire.Seal(b)
	p.e.stats.AcksSent++
	return netio.Datagram{Addr: p.id.Addr, Buf: b}
}
