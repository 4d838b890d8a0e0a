package fabric

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// mstream is the ACK-merge state of one multicast stream: the packets of
// one sender to its group. The switch forwards the sender's packets
// unchanged (same PSNs) to every member and folds the members' ACKs into
// one ACK stream back to the sender: cumulative = minimum over live
// members, SACK = intersection. A retransmitted packet is replicated only
// to the members that have not acknowledged it.
//
// State is bounded: W packets × (one bit per member + a 2-byte count).
type mstream struct {
	key    streamKey
	sender *member
	init   bool
	cum    uint32   // merged cumulative ACK: every live member has every PSN below
	high   uint32   // one past the highest PSN forwarded
	w      uint32   // window (power of two)
	count  []uint16 // per PSN slot: live members that have it
	have   [][]uint64
	mcum   []uint32 // per member: its own cumulative ACK (valid once it acked)
	macked []bool   // per member: has acked at least once
	mwin   []uint32 // per member: its advertised window
	dirty  bool     // merged state changed since the last merged ACK
	nack   bool
	echoTS uint64
	delay  uint32
}

func newMstream(k streamKey, g *group, sender *member, w int) *mstream {
	n := len(g.members)
	ms := &mstream{key: k, sender: sender, w: uint32(w), count: make([]uint16, w),
		have: make([][]uint64, n), mcum: make([]uint32, n), macked: make([]bool, n), mwin: make([]uint32, n)}
	for i := range ms.have {
		ms.have[i] = make([]uint64, w/64)
	}
	return ms
}

func (ms *mstream) slot(psn uint32) (int, uint64) {
	i := psn & (ms.w - 1)
	return int(i / 64), 1 << (i % 64)
}

func (ms *mstream) has(m int, psn uint32) bool {
	if wire.SeqLess(psn, ms.cum) {
		return true
	}
	if psn-ms.cum >= ms.w {
		return false
	}
	wd, b := ms.slot(psn)
	return ms.have[m][wd]&b != 0
}

// mark records that member m has psn (within the window); it reports
// whether that was news.
func (ms *mstream) mark(m int, psn uint32) bool {
	if wire.SeqLess(psn, ms.cum) || psn-ms.cum >= ms.w {
		return false
	}
	wd, b := ms.slot(psn)
	if ms.have[m][wd]&b != 0 {
		return false
	}
	ms.have[m][wd] |= b
	ms.count[psn&(ms.w-1)]++
	return true
}

func (ms *mstream) reset(base uint32) {
	ms.init = true
	ms.cum, ms.high = base, base
	clear(ms.count)
	for i := range ms.have {
		clear(ms.have[i])
		ms.mcum[i] = base
		ms.macked[i] = false
	}
}

// live returns the number of live members other than the sender.
func (s *Switch) mcastReceivers(g *group, sender *member) int {
	n := 0
	for _, m := range g.members {
		if m != nil && m.alive && m != sender {
			n++
		}
	}
	return n
}

// replicate forwards one multicast data packet to the members that need it.
func (s *Switch) replicate(now time.Time, g *group, src *member, h *wire.Header, pkt []byte) {
	k := streamKey{g.id, src.id}
	ms := s.mcast[k]
	if ms == nil {
		ms = newMstream(k, g, src, s.cfg.MulticastWindow)
		s.mcast[k] = ms
	}
	far := ms.init && !(h.AckBase-ms.cum < ms.w || ms.cum-h.AckBase < ms.w)
	if !ms.init || (h.Flags&wire.FlagSyn != 0 && far) {
		ms.reset(h.AckBase)
	}
	// The sender abandoned everything below AckBase.
	if wire.SeqLess(ms.cum, h.AckBase) && h.AckBase-ms.cum < 1<<31 {
		s.advance(g, ms, h.AckBase)
	}
	psn := h.PSN
	if wire.SeqLess(psn, ms.cum) {
		// Everyone has it (the sender missed our ACK): tell it again.
		s.markDirty(ms)
		return
	}
	if psn-ms.cum >= ms.w {
		return // beyond the merge window: the sender resends later
	}
	if wire.SeqLess(ms.high, psn+1) {
		ms.high = psn + 1
	}
	var shared []byte
	sent := false
	for i, m := range g.members {
		if m == nil || !m.alive || m == src || ms.has(i, psn) {
			continue
		}
		if shared == nil {
			if shared = s.forward(pkt, m.addr); shared == nil {
				return
			}
		} else if !s.forwardShared(shared, m.addr) {
			return
		}
		sent = true
		s.stats.MulticastOut++
	}
	if !sent {
		// Every live member already has it: re-acknowledge.
		s.markDirty(ms)
	}
}

// mergeAck folds one member's ACK for a sender's stream into the merged
// state; the merged ACK goes out at the next Poll if anything changed.
func (s *Switch) mergeAck(now time.Time, g *group, m *member, h *wire.Header, payload []byte) {
	ms := s.mcast[streamKey{g.id, h.Dst}]
	if ms == nil || !ms.init {
		return
	}
	var a wire.Ack
	if a.Decode(payload) != nil {
		s.stats.Malformed++
		return
	}
	i := int(m.id)
	need := uint16(s.mcastReceivers(g, ms.sender))
	oldCum := ms.cum
	full := false // some PSN became held by every receiver
	markFull := func(p uint32) {
		if ms.mark(i, p) && ms.count[p&(ms.w-1)] >= need {
			full = true
		}
	}
	ms.mwin[i] = a.Window
	if !ms.macked[i] || wire.SeqLess(ms.mcum[i], a.Cum) {
		from := ms.cum
		if ms.macked[i] && wire.SeqLess(from, ms.mcum[i]) {
			from = ms.mcum[i]
		}
		for p := from; wire.SeqLess(p, a.Cum) && p-ms.cum < ms.w; p++ {
			markFull(p)
		}
		if !ms.macked[i] || wire.SeqLess(ms.mcum[i], a.Cum) {
			ms.mcum[i] = a.Cum
		}
		ms.macked[i] = true
	}
	for b := 0; b < int(a.NBlocks); b++ {
		blk := a.Blocks[b]
		for p := blk.Start; p != blk.End && p-ms.cum < ms.w; p++ {
			markFull(p)
		}
	}
	if h.Op == wire.OpNack {
		ms.nack = true
	}
	s.settle(g, ms)
	if full || ms.cum != oldCum || ms.nack {
		// Only news goes to the sender — at most one merged ACK per
		// stream per Poll — so it sees one ACK stream, not one per member.
		ms.echoTS, ms.delay = a.EchoTS, a.AckDelay
		s.markDirty(ms)
	}
}

// markDirty queues a stream's merged ACK for the next Poll.
func (s *Switch) markDirty(ms *mstream) {
	if !ms.dirty {
		ms.dirty = true
		s.dirty = append(s.dirty, ms)
	}
}

// flushMerged sends the queued merged ACKs.
func (s *Switch) flushMerged() {
	for _, ms := range s.dirty {
		if g := s.groups[ms.key.group]; g != nil && s.mcast[ms.key] == ms {
			s.sendMerged(ms, g)
		}
		ms.dirty = false
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
}

// settle advances the merged cumulative point over PSNs every live
// receiver has.
func (s *Switch) settle(g *group, ms *mstream) {
	need := uint16(s.mcastReceivers(g, ms.sender))
	for ms.cum != ms.high && ms.count[ms.cum&(ms.w-1)] >= need {
		s.clearSlot(ms, ms.cum)
		ms.cum++
	}
}

func (s *Switch) clearSlot(ms *mstream, psn uint32) {
	wd, b := ms.slot(psn)
	for i := range ms.have {
		ms.have[i][wd] &^= b
	}
	ms.count[psn&(ms.w-1)] = 0
}

// advance moves the merged point to base (sender abandoned what is below).
func (s *Switch) advance(g *group, ms *mstream, base uint32) {
	for ms.cum != base {
		s.clearSlot(ms, ms.cum)
		ms.cum++
	}
	if wire.SeqLess(ms.high, ms.cum) {
		ms.high = ms.cum
	}
	for i := range ms.mcum {
		if wire.SeqLess(ms.mcum[i], base) {
			ms.mcum[i] = base
		}
	}
}

// sendMerged emits the merged ACK (or NACK) for a stream to its sender,
// encoded straight into a forwarding buffer.
func (s *Switch) sendMerged(ms *mstream, g *group) {
	if !ms.sender.alive {
		return
	}
	need := uint16(s.mcastReceivers(g, ms.sender))
	a := &s.ack
	*a = wire.Ack{Cum: ms.cum, Window: ms.w, EchoTS: ms.echoTS, AckDelay: ms.delay}
	for i, m := range g.members {
		if m != nil && m.alive && m != ms.sender && ms.macked[i] && ms.mwin[i] < a.Window {
			a.Window = ms.mwin[i]
		}
	}
	in := false
	var start uint32
	for p := ms.cum; p != ms.high+1; p++ {
		full := p != ms.high && ms.count[p&(ms.w-1)] >= need && need > 0
		if full && !in {
			in, start = true, p
		} else if !full && in {
			in = false
			a.Blocks[a.NBlocks] = wire.SackBlock{Start: start, End: p}
			a.NBlocks++
			if int(a.NBlocks) == wire.MaxSackBlocks {
				break
			}
		}
	}
	op := wire.OpAck
	if ms.nack && a.NBlocks > 0 {
		op = wire.OpNack
	}
	ms.nack = false
	hdr := wire.Header{Version: wire.Version, Op: op, Mode: wire.ModeMulticast, Group: g.id,
		Src: wire.MemberAll, Dst: ms.sender.id, TS: uint64(s.now.UnixNano())}
	hdr.Len = uint16(a.EncodedLen())
	b := s.fwdBuf(wire.HeaderLen + int(hdr.Len))
	if b == nil {
		return
	}
	hdr.Encode(b)
	a.Encode(b[wire.HeaderLen:])
	wire.Seal(b)
	s.fwd = append(s.fwd, netio.Datagram{Addr: ms.sender.addr, Buf: b})
	s.stats.MergedAcksOut++
}

// dropMember removes a dead or departed member from every multicast
// stream of its group: what it had not acknowledged no longer holds the
// merged ACK back.
func (s *Switch) dropMemberStreams(g *group, dead *member) {
	for k, ms := range s.mcast {
		if k.group != g.id {
			continue
		}
		if ms.sender == dead {
			delete(s.mcast, k)
			continue
		}
		// Take back the dead member's marks, so the counts again count
		// live members only.
		i := int(dead.id)
		for p := ms.cum; p != ms.high; p++ {
			wd, b := ms.slot(p)
			if ms.have[i][wd]&b != 0 {
				ms.have[i][wd] &^= b
				ms.count[p&(ms.w-1)]--
			}
		}
		s.settle(g, ms)
		s.markDirty(ms)
	}
}
