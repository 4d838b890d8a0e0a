package fabric

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Reassembly of control requests that span several packets.
//
// The transport delivers a message's packets as they arrive, each with
// its Offset and the message's MsgLen; a control request is parsed and
// authenticated only once all of its bytes are in. A request of one packet
// (the common case) is handled at once without being copied. A longer one
// is collected here, under bounds: at most MaxControlMessage bytes, at
// most MaxControlPartial requests (MaxControlPartialBytes declared bytes)
// in all and MaxControlPartialPerSource per address, each dropped after
// ControlReassemblyTimeout without a packet. A packet that contradicts the
// request it joins (another MsgLen, bytes beyond MsgLen, bytes it already
// has) or that the transport reports as completing a request still
// missing bytes ends that request: it is answered StatusBadOperand.

type asmKey struct {
	peer  transport.PeerID
	msgID uint64
}

type asmMsg struct {
	buf         []byte
	have        []uint64 // bit per byte of buf received
	got         int      // bytes received
	last        time.Time
	established bool // from a known member or memory node
}

// ctrlAssembler holds the partial control requests. The zero value is
// empty and ready to use.
type ctrlAssembler struct {
	msgs    map[asmKey]*asmMsg
	perAddr map[netip.AddrPort]int
	bytes   int // sum of len(buf)
}

func (a *ctrlAssembler) len() int { return len(a.msgs) }

func (a *ctrlAssembler) drop(k asmKey) {
	m := a.msgs[k]
	if m == nil {
		return
	}
	delete(a.msgs, k)
	a.bytes -= len(m.buf)
	if a.perAddr[k.peer.Addr]--; a.perAddr[k.peer.Addr] <= 0 {
		delete(a.perAddr, k.peer.Addr)
	}
}

// sweepLim drops the partial requests idle for longer than the timeout.
func (a *ctrlAssembler) sweepLim(now time.Time, timeout time.Duration) {
	for k, m := range a.msgs {
		if now.Sub(m.last) > timeout {
			a.drop(k)
		}
	}
}

// oldestStranger returns the key of the least recently fed partial request
// from a stranger.
func (a *ctrlAssembler) oldestStranger() (asmKey, bool) {
	var best asmKey
	var at time.Time
	found := false
	for k, m := range a.msgs {
		if !m.established && (!found || m.last.Before(at)) {
			best, at, found = k, m.last, true
		}
	}
	return best, found
}

// controlPacket handles one packet of a control request: at once if it is
// the whole request, else through the assembler.
func (s *Switch) controlPacket(now time.Time, d *transport.Delivery) {
	h := &d.Header
	if h.Offset == 0 && uint32(len(d.Payload)) == h.MsgLen {
		s.control(now, d)
		return
	}
	payload, st := s.assemble(now, d)
	switch {
	case st != wire.StatusOK:
		s.stats.ControlIn++
		s.stats.ControlRefused++
		s.stats.ControlPartialRefused++
		s.reply(d.Peer, h, st, 0)
	case payload != nil:
		d.Payload = payload
		h.Offset, h.Len = 0, 0
		s.control(now, d)
	}
}

// assemble adds the packet in d to its request. It returns the whole
// request once complete, nil while bytes are missing, or a refusal.
func (s *Switch) assemble(now time.Time, d *transport.Delivery) ([]byte, wire.Status) {
	a := &s.asm
	lim := &s.cfg.Limits
	h := &d.Header
	k := asmKey{d.Peer, h.MsgID}
	off, n, total := int(h.Offset), len(d.Payload), int(h.MsgLen)
	m := a.msgs[k]
	switch {
	case uint64(h.MsgLen) > uint64(lim.MaxControlMessage):
		a.drop(k)
		return nil, wire.StatusTooLarge
	case n == 0 || off+n > total, m != nil && len(m.buf) != total:
		a.drop(k)
		return nil, wire.StatusBadOperand
	}
	if m == nil {
		if st := s.admitPartial(now, d.Peer.Addr, total); st != wire.StatusOK {
			return nil, st
		}
		if a.msgs == nil {
			a.msgs = make(map[asmKey]*asmMsg)
			a.perAddr = make(map[netip.AddrPort]int)
		}
		m = &asmMsg{buf: make([]byte, total), have: make([]uint64, (total+63)/64), established: s.established(d.Peer.Addr)}
		a.msgs[k] = m
		a.perAddr[d.Peer.Addr]++
		a.bytes += total
	}
	if !m.claim(off, n) {
		a.drop(k)
		return nil, wire.StatusBadOperand
	}
	copy(m.buf[off:], d.Payload)
	m.got += n
	m.last = now
	if m.got < total {
		if d.MsgDone {
			// The transport counts the request complete: it and this
			// assembler disagree about its bytes.
			a.drop(k)
			return nil, wire.StatusBadOperand
		}
		return nil, wire.StatusOK
	}
	a.drop(k)
	return m.buf, wire.StatusOK
}

// admitPartial makes room for a new partial request of total bytes from
// addr, or says why there is none.
func (s *Switch) admitPartial(now time.Time, addr netip.AddrPort, total int) wire.Status {
	a := &s.asm
	lim := &s.cfg.Limits
	if a.perAddr[addr] >= lim.MaxControlPartialPerSource {
		return wire.StatusBusy
	}
	full := func() bool {
		return len(a.msgs) >= lim.MaxControlPartial || a.bytes+total > lim.MaxControlPartialBytes
	}
	if !full() {
		return wire.StatusOK
	}
	a.sweepLim(now, lim.ControlReassemblyTimeout)
	if !full() {
		return wire.StatusOK
	}
	if !s.established(addr) {
		return wire.StatusBusy // strangers wait; known peers may evict them
	}
	for full() {
		k, ok := a.oldestStranger()
		if !ok {
			return wire.StatusBusy
		}
		a.drop(k)
		hd := wire.Header{Op: wire.OpControl, MsgID: k.msgID}
		s.reply(k.peer, &hd, wire.StatusBusy, 0)
	}
	return wire.StatusOK
}

// claim marks bytes [off, off+n) received; it reports false, marking
// nothing, if any of them already were.
func (m *asmMsg) claim(off, n int) bool {
	end := off + n
	for pass := 0; pass < 2; pass++ {
		for i := off; i < end; {
			w, b := i/64, uint(i%64)
			span := min(64-int(b), end-i)
			mask := ^uint64(0) >> (64 - uint(span)) << b
			if pass == 0 && m.have[w]&mask != 0 {
				return false
			}
			if pass == 1 {
				m.have[w] |= mask
			}
			i += span
		}
	}
	return true
}

// established reports whether addr belongs to a live group member, a
// registered memory node or a proven pool client: a peer the switch
// already knows, which strangers never push out.
func (s *Switch) established(addr netip.AddrPort) bool {
	return len(s.byAddr[addr]) > 0 || s.mmu.NodeAt(addr) != nil || s.pclients.has(addr)
}
