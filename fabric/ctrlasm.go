package fabric

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/transport/reasm"
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
//
// Which bytes a request has is the transport's reasm record: the engine
// checks every packet it delivers against its own, so within the life of
// the engine's partial message the two agree and nothing is refused here.
// The check matters only when one side forgot the request while the other
// kept it (the engine evicted a stale partial, swept the peer or reset the
// stream; the assembler timed it out or evicted it): then a packet with
// bytes the request already has, or one that would need more than
// reasm.MaxRanges ranges, ends it as a contradiction, in O(MaxRanges).

type asmKey struct {
	peer  transport.PeerID
	msgID uint64
}

type asmMsg struct {
	asm         reasm.Buffer
	last        time.Time
	established bool // from a known member or memory node
}

// ctrlAssembler holds the partial control requests. The zero value is
// empty and ready to use.
type ctrlAssembler struct {
	msgs    map[asmKey]*asmMsg
	perAddr map[netip.AddrPort]int
	bytes   int // sum of the requests' lengths
}

func (a *ctrlAssembler) len() int { return len(a.msgs) }

func (a *ctrlAssembler) drop(k asmKey) {
	m := a.msgs[k]
	if m == nil {
		return
	}
	delete(a.msgs, k)
	a.bytes -= int(m.asm.Len())
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
	payload, st := s.assemble(&s.asm, now, d)
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

// assemble adds the packet in d to its message in a (s.asm for
// requests, s.tree.asm for the parent's answers). It returns the whole
// message once complete, nil while bytes are missing, or a refusal.
func (s *Switch) assemble(a *ctrlAssembler, now time.Time, d *transport.Delivery) ([]byte, wire.Status) {
	lim := &s.cfg.Limits
	h := &d.Header
	k := asmKey{d.Peer, h.MsgID}
	off, n, total := int(h.Offset), len(d.Payload), int(h.MsgLen)
	m := a.msgs[k]
	switch {
	case uint64(h.MsgLen) > uint64(lim.MaxControlMessage):
		a.drop(k)
		return nil, wire.StatusTooLarge
	case n == 0 || off+n > total, m != nil && int(m.asm.Len()) != total:
		a.drop(k)
		return nil, wire.StatusBadOperand
	}
	if m == nil {
		if st := s.admitPartial(a, now, d.Peer.Addr, total); st != wire.StatusOK {
			return nil, st
		}
		if a.msgs == nil {
			a.msgs = make(map[asmKey]*asmMsg)
			a.perAddr = make(map[netip.AddrPort]int)
		}
		m = &asmMsg{established: s.established(d.Peer.Addr)}
		m.asm.StartInto(h.MsgLen, make([]byte, total))
		a.msgs[k] = m
		a.perAddr[d.Peer.Addr]++
		a.bytes += total
	}
	done, ok := m.asm.Place(h.MsgLen, h.Offset, d.Payload)
	if !ok {
		a.drop(k)
		return nil, wire.StatusBadOperand
	}
	m.last = now
	if !done {
		if d.MsgDone {
			// The transport counts the request complete: it and this
			// assembler disagree about its bytes.
			a.drop(k)
			return nil, wire.StatusBadOperand
		}
		return nil, wire.StatusOK
	}
	a.drop(k)
	return m.asm.Bytes(), wire.StatusOK
}

// admitPartial makes room for a new partial request of total bytes from
// addr, or says why there is none.
func (s *Switch) admitPartial(a *ctrlAssembler, now time.Time, addr netip.AddrPort, total int) wire.Status {
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

// established reports whether addr belongs to a live group member, a
// registered memory node or a proven pool client: a peer the switch
// already knows, which strangers never push out.
func (s *Switch) established(addr netip.AddrPort) bool {
	return len(s.byAddr[addr]) > 0 || s.memPool.mmu.NodeAt(addr) != nil || s.memPool.pclients.has(addr)
}
