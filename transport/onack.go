package transport

import (
	"time"

	"github.com/ndma/ndma/wire"
)

const (
	dupThresh   = 3 // packets SACKed beyond a hole before it is presumed lost
	maxRTTValid = 60 * time.Second
)

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

// span is a range [start, end) of offsets from sndUna.
type span struct{ start, end uint32 }

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
