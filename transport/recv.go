package transport

import (
	"time"

	"github.com/ndma/ndma/wire"
)

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
		arrival = a // the kernel's receive time (Receive's RxTime)
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
	room := true
	bad := h.Len == 0 || uint64(h.Offset)+uint64(h.Len) > uint64(h.MsgLen)
	if !bad && pm != nil {
		var fits bool
		fits, room = pm.Check(h.MsgLen, h.Offset, int(h.Len))
		bad = !fits
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
			pm = &partialMsg{}
			pm.Start(h.MsgLen)
			p.partial[k] = pm
		}
		pm.Add(h.Offset, h.Offset+uint32(h.Len))
		pm.last = now
		if pm.Complete() {
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
