package transport

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// ackWaits reports whether the pending ACK is a delayed one that may
// still wait for data to ride on.
func (p *peer) ackWaits(now time.Time) bool { return p.ackAt != 0 && nanos(now) < p.ackAt }

// piggybacks reports whether a pending ACK can ride on a data packet to
// the peer: on the point-to-point group, whose both ends are engines,
// with nothing to SACK, to a peer whose address is validated.
func (p *peer) piggybacks(limited bool) bool {
	return !limited && p.pointToPoint() && p.rcvHigh == p.rcvNxt
}

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
