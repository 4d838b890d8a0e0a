package fabric

import (
	"math/bits"
	"net/netip"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
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
// Work per packet is bounded by the window, never by a distance a packet
// names: PSNs are tracked only in [cum, cum+W), a jump of AckBase by W or
// more resets the window, and ranges of the bitmaps are set and cleared a
// 64-bit word at a time. Members' ACKs are clipped to what the switch
// forwarded ([cum, high)); one naming PSNs more than W away is ignored.
type mstream struct {
	key    streamKey
	sender *member
	init   bool
	cum    uint32   // merged cumulative ACK: every live member has every PSN below
	high   uint32   // one past the highest PSN forwarded; high-cum <= w
	w      uint32   // window (power of two)
	count  []uint16 // per PSN slot: live members that have it
	have   [][]uint64
	mcum   []uint32 // per member: its own cumulative ACK (valid once it acked)
	macked []bool   // per member: has acked at least once
	mwin   []uint32 // per member: its advertised window
	dirty  bool     // merged state changed since the last merged ACK
	nack   bool
	// The timestamp the merged ACK echoes, the receiver's ACK delay for
	// it, and when the switch got it: the switch adds the time it held
	// it to the delay, so that the sender's RTT sample is a round trip,
	// not the wait for the slowest receiver (or for a dead one to be
	// dropped).
	echoTS uint64
	delay  uint32
	qdelay uint32 // the echoed ACK's QDelay: its receiver's forward queueing
	echoAt time.Time
	// A restart of the sender's stream (a jump of a window or more, a
	// SYN far behind, an AckBase more than transport.StaleSpan behind)
	// may be forged: it is taken only when the sender echoes a
	// challenge (chNonce) naming the restart point (chBase); at most
	// one challenge per challengeGap.
	chPending bool
	chBase    uint32
	chNonce   uint32
	chAt      time.Time
}

func newMstream(k streamKey, g *group, sender *member, w int) *mstream {
	n := g.rows()
	ms := &mstream{key: k, sender: sender, w: uint32(w), count: make([]uint16, w),
		have: make([][]uint64, n), mcum: make([]uint32, n), macked: make([]bool, n), mwin: make([]uint32, n)}
	for i := range ms.have {
		ms.have[i] = make([]uint64, (w+63)/64)
	}
	return ms
}

// fit gives the stream rows for n receivers: a port added to its group
// after the stream began (a tree's group forming at this switch while
// its first members already send) gets an empty row.
func (ms *mstream) fit(n int) {
	for len(ms.have) < n {
		ms.have = append(ms.have, make([]uint64, (ms.w+63)/64))
		ms.mcum = append(ms.mcum, ms.cum)
		ms.macked = append(ms.macked, false)
		ms.mwin = append(ms.mwin, 0)
	}
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

// spans splits the n PSNs from psn (n <= w) into at most two runs of slot
// indices [i, j) that do not wrap, and calls fn for each.
func (ms *mstream) spans(psn, n uint32, fn func(i, j uint32)) {
	if n == 0 {
		return
	}
	i := psn & (ms.w - 1)
	if i+n <= ms.w {
		fn(i, i+n)
		return
	}
	fn(i, ms.w)
	fn(0, i+n-ms.w)
}

// wordMask is the mask of bits [i, j) of the 64-bit word holding slot i
// (j is clipped to that word), and the index one past the word.
func wordMask(i, j uint32) (mask uint64, next uint32) {
	next = min(j, i&^63+64)
	hi := next - i&^63 // 1..64
	mask = ^uint64(0) >> (64 - hi)
	mask &^= 1<<(i&63) - 1
	return mask, next
}

// markRange records that member m has the n PSNs from psn (all within
// [cum, cum+w)), a word at a time; it reports whether some PSN became held
// by need members.
func (ms *mstream) markRange(m int, psn, n uint32, need uint16) bool {
	full := false
	have := ms.have[m]
	ms.spans(psn, n, func(i, j uint32) {
		for i < j {
			mask, next := wordMask(i, j)
			wd := i / 64
			news := mask &^ have[wd]
			have[wd] |= news
			for news != 0 {
				b := uint32(bits.TrailingZeros64(news))
				news &= news - 1
				c := &ms.count[wd*64+b]
				*c++
				if *c >= need {
					full = true
				}
			}
			i = next
		}
	})
	return full
}

// clearRange forgets every member's marks for the n PSNs from psn
// (n <= w), a word at a time.
func (ms *mstream) clearRange(psn, n uint32) {
	ms.spans(psn, n, func(i, j uint32) {
		clear(ms.count[i:j])
		for i < j {
			mask, next := wordMask(i, j)
			for _, have := range ms.have {
				have[i/64] &^= mask
			}
			i = next
		}
	})
}

// unmarkMember takes back member m's marks on [cum, high), visiting only
// the set bits.
func (ms *mstream) unmarkMember(m int) {
	have := ms.have[m]
	ms.spans(ms.cum, ms.high-ms.cum, func(i, j uint32) {
		for i < j {
			mask, next := wordMask(i, j)
			wd := i / 64
			set := have[wd] & mask
			have[wd] &^= set
			for set != 0 {
				b := uint32(bits.TrailingZeros64(set))
				set &= set - 1
				ms.count[wd*64+b]--
			}
			i = next
		}
	})
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

// clip intersects the PSN range [start, start+n) with [cum, high) and
// returns its first PSN and length (0: empty). n <= w.
func (ms *mstream) clip(start, n uint32) (uint32, uint32) {
	span := uint64(ms.high - ms.cum)
	a := uint64(start - ms.cum)
	end := a + uint64(n)
	switch {
	case a < span:
		return start, uint32(min(end, span) - a)
	case end > 1<<32: // starts below cum, ends above it
		return ms.cum, uint32(min(end-1<<32, span))
	}
	return 0, 0
}

// mcastReceivers returns the number of receivers of sender's stream:
// the live members attached here other than the sender, and the ports
// (neighbor switches) with live members behind them other than the one
// the sender lies behind.
func (s *Switch) mcastReceivers(g *group, sender *member) int {
	n := 0
	for _, m := range g.members {
		if m != nil && m.alive && m != sender && m.via == nil {
			n++
		}
	}
	for _, p := range g.ports {
		if p.behind > 0 && p != sender.via {
			n++
		}
	}
	return n
}

// replicate forwards one multicast data packet to the members that need it.
func (s *Switch) replicate(now time.Time, g *group, src *member, h *wire.Header, pkt []byte) {
	k := streamKey{g.id, src.id}
	ms := s.mcast[k]
	if ms == nil || ms.sender != src {
		// First packet of the stream, or of a sender that took over the
		// member id (a service member registered again).
		ms = newMstream(k, g, src, s.cfg.MulticastWindow)
		s.mcast[k] = ms
	}
	ms.fit(g.rows())
	ahead := h.AckBase - ms.cum
	behind := -ahead
	restart := ms.init && ((ahead < 1<<31 && ahead >= ms.w) ||
		(ahead >= 1<<31 && (h.Flags&wire.FlagSyn != 0 && behind >= ms.w || behind > transport.StaleSpan)))
	if restart && src.via != nil {
		// From a neighbor switch, which the sender is attached to or
		// behind: that switch took the restart after asking the sender.
		s.stats.MulticastResets++
		ms.reset(h.AckBase)
	} else if restart {
		// Far ahead (the sender abandoned the whole window), far behind
		// with SYN (a new incarnation), or further behind than the
		// sender's stream can be (a datagram forged in its name started
		// the window, e.g. after the switch lost its state, and the real
		// stream, no longer flagged SYN, would be re-acknowledged at the
		// forged point forever), or forged: ask the sender.
		s.stats.MulticastRestartsRefused++
		s.challengeSender(g, ms, h.AckBase, now)
		return
	}
	switch {
	case !ms.init:
		ms.reset(h.AckBase)
	case ahead == 0:
	case ahead < 1<<31:
		// The sender abandoned everything below AckBase.
		s.advance(ms, h.AckBase)
	}
	psn := h.PSN
	if wire.SeqLess(psn, ms.cum) {
		// Everyone has it (the sender missed our ACK): tell it again,
		// echoing this copy's timestamp as a receiver does for a
		// duplicate.
		ms.echo(h.TS, 0, 0, now)
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
	send := func(addr netip.AddrPort) bool {
		if shared == nil {
			if shared = s.forward(pkt, addr); shared == nil {
				return false
			}
		} else if !s.forwardShared(shared, addr) {
			return false
		}
		sent = true
		s.stats.MulticastOut++
		return true
	}
	for _, m := range g.members {
		if m == nil || !m.alive || m == src || m.via != nil || ms.has(g.row(m), psn) {
			continue
		}
		if !send(m.addr) {
			return
		}
	}
	// One copy to each neighbor switch with receivers behind it, which
	// replicates it further.
	for _, p := range g.ports {
		if p.behind == 0 || p == src.via || ms.has(g.row(p), psn) {
			continue
		}
		if !send(p.addr) {
			return
		}
	}
	if !sent {
		// Every live member already has it: re-acknowledge.
		ms.echo(h.TS, 0, 0, now)
		s.markDirty(ms)
	}
}

// maxEchoHold is the longest the switch holds an echoed timestamp: a
// merged ACK sent later echoes none (no RTT sample), as a receiver never
// reports an ACK delay of a second or more.
const maxEchoHold = time.Second

// echo records the timestamp the next merged ACK echoes: ts with the
// receiver's ACK delay and queueing (q: Ack.QDelay), received (or, for a
// duplicate, sent) at now.
func (ms *mstream) echo(ts uint64, delay, q uint32, now time.Time) {
	ms.echoTS, ms.delay, ms.qdelay, ms.echoAt = ts, delay, q, now
}

// echoed returns the timestamp, ACK delay and queueing for a merged ACK
// sent at now: the delay includes the time the switch held the
// timestamp.
func (ms *mstream) echoed(now time.Time) (ts uint64, delay, q uint32) {
	if ms.echoTS == 0 {
		return 0, 0, 0
	}
	d := time.Duration(ms.delay) + now.Sub(ms.echoAt)
	if d < 0 || d >= maxEchoHold {
		return 0, 0, 0
	}
	return ms.echoTS, uint32(d), ms.qdelay
}

// mergeAck folds one member's ACK for a sender's stream into the merged
// state; the merged ACK goes out at the next Poll if anything changed.
func (s *Switch) mergeAck(now time.Time, g *group, m *member, h *wire.Header, payload []byte) {
	if m.port && (h.Dst == wire.MemberAll || h.Flags&wire.FlagSyn != 0) {
		// A neighbor switch acknowledges what its side received; it
		// sends no echoes or challenges of its own.
		s.stats.MulticastAcksIgnored++
		return
	}
	if h.Dst == wire.MemberAll {
		s.onSenderEcho(g, m, payload)
		return
	}
	ms := s.mcast[streamKey{g.id, h.Dst}]
	if ms == nil || !ms.init {
		return
	}
	ms.fit(g.rows())
	var a wire.Ack
	if a.Decode(payload) != nil {
		s.stats.Malformed++
		return
	}
	if m == ms.sender || m == ms.sender.via {
		return
	}
	if h.Flags&wire.FlagSyn != 0 {
		s.echoRestart(g, m, ms, h, &a)
		return
	}
	i := g.row(m)
	if i < 0 || i >= len(ms.have) {
		return
	}
	// A member holds only what the switch forwarded: [cum, high). An ACK
	// whose cumulative point lies more than a window from the merged one,
	// either way, is stale or forged and is ignored whole; the rest is
	// clipped to [cum, high), so no ACK costs more than the window.
	ahead := a.Cum - ms.cum
	if ahead > ms.w && -ahead > ms.w {
		s.stats.MulticastAcksIgnored++
		return
	}
	need := uint16(s.mcastReceivers(g, ms.sender))
	oldCum := ms.cum
	full := false // some PSN became held by every receiver
	ms.mwin[i] = a.Window
	if ahead <= ms.w {
		cum := a.Cum
		if ahead > ms.high-ms.cum {
			cum = ms.high
		}
		from := ms.cum
		if ms.macked[i] && ms.mcum[i]-ms.cum <= ms.high-ms.cum {
			from = ms.mcum[i] // what it acknowledged before is marked
		}
		if n := cum - from; n <= ms.w {
			full = ms.markRange(i, from, n, need) || full
		}
		if !ms.macked[i] || wire.SeqLess(ms.mcum[i], cum) {
			ms.mcum[i] = cum
		}
	}
	ms.macked[i] = true
	for b := 0; b < int(a.NBlocks); b++ {
		blk := a.Blocks[b]
		n := blk.End - blk.Start
		if n == 0 || n > ms.w {
			continue // empty, reversed or wider than anything in flight
		}
		if p, n := ms.clip(blk.Start, n); n > 0 {
			full = ms.markRange(i, p, n, need) || full
		}
	}
	if h.Op == wire.OpNack {
		ms.nack = true
	}
	s.settle(g, ms)
	if full || ms.cum != oldCum || ms.nack {
		// Only news goes to the sender — at most one merged ACK per
		// stream per Poll — so it sees one ACK stream, not one per member.
		ms.echo(a.EchoTS, a.AckDelay, a.QDelay, now)
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

// advance moves the merged point to base, less than a window ahead (the
// sender abandoned what is below): the skipped slots are cleared a word at
// a time.
func (s *Switch) advance(ms *mstream, base uint32) {
	ms.clearRange(ms.cum, base-ms.cum)
	ms.cum = base
	if ms.high-ms.cum > ms.w { // high was below base
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
	*a = wire.Ack{Cum: ms.cum, Window: ms.w}
	a.EchoTS, a.AckDelay, a.QDelay = ms.echoed(s.now)
	for _, m := range g.members {
		if i := g.row(m); m != nil && m.alive && m != ms.sender && m.via == nil && i < len(ms.have) && ms.macked[i] && ms.mwin[i] < a.Window {
			a.Window = ms.mwin[i]
		}
	}
	for _, p := range g.ports {
		if i := g.row(p); p.behind > 0 && p != ms.sender.via && i < len(ms.have) && ms.macked[i] && ms.mwin[i] < a.Window {
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
	if s.sendAck(ms.sender.addr, &hdr, a) {
		s.stats.MergedAcksOut++
	}
}

// challengeGap is the least time between two challenges to one sender.
const challengeGap = 10 * time.Millisecond

// challengeSender asks the sender of ms whether it restarted its stream at
// base: an ACK with FlagSyn whose header PSN is a fresh nonce and whose
// cumulative point is base. Its engine echoes the nonce only if base is
// where its stream is (onSenderEcho then restarts the window); a restart
// forged in its name names another point and gets no echo.
func (s *Switch) challengeSender(g *group, ms *mstream, base uint32, now time.Time) {
	if ms.chPending && now.Sub(ms.chAt) < challengeGap {
		return
	}
	ms.chPending, ms.chBase, ms.chNonce, ms.chAt = true, base, s.rng.Uint32()|1, now
	a := wire.Ack{Cum: base, Window: ms.w}
	hdr := wire.Header{Version: wire.Version, Op: wire.OpAck, Mode: wire.ModeMulticast, Flags: wire.FlagSyn, Group: g.id,
		Src: wire.MemberAll, Dst: ms.sender.id, PSN: ms.chNonce, TS: uint64(now.UnixNano())}
	s.sendAck(ms.sender.addr, &hdr, &a)
}

// sendAck queues an ACK packet (header h, frame a) to addr; it reports
// false if the forwarding budget is spent.
func (s *Switch) sendAck(addr netip.AddrPort, h *wire.Header, a *wire.Ack) bool {
	b := s.fwdBuf(a.AckPacketLen())
	if b == nil {
		return false
	}
	s.fwd = append(s.fwd, netio.Datagram{Addr: addr, Buf: wire.PutAckPacket(b, h, a), Control: true})
	return true
}

// onSenderEcho takes an ACK from a member about its own stream (Dst
// MemberAll): if it echoes the pending challenge, the window restarts at
// the point the challenge named.
func (s *Switch) onSenderEcho(g *group, m *member, payload []byte) {
	ms := s.mcast[streamKey{g.id, m.id}]
	var a wire.Ack
	if ms == nil || ms.sender != m || !ms.chPending || a.Decode(payload) != nil || a.Cum != ms.chNonce || a.NBlocks != 0 {
		return
	}
	ms.chPending = false
	s.stats.MulticastResets++
	ms.reset(ms.chBase)
}

// echoRestart answers a receiver's challenge about the sender's stream
// (its engine asks before it restarts a window: a restart it sees may be
// forged in the switch's name). The switch holds that stream: it echoes
// the challenge's nonce, in the sender's name, only if the restart point
// the challenge names is where the stream is now, [cum-W, high].
func (s *Switch) echoRestart(g *group, m *member, ms *mstream, h *wire.Header, a *wire.Ack) {
	if a.Cum-(ms.cum-ms.w) > ms.high-(ms.cum-ms.w) {
		s.stats.MulticastAcksIgnored++
		return
	}
	echo := wire.Ack{Cum: h.PSN, Window: ms.w}
	hdr := wire.Header{Version: wire.Version, Op: wire.OpAck, Mode: wire.ModeMulticast, Group: g.id,
		Src: ms.sender.id, Dst: m.id, TS: uint64(s.now.UnixNano())}
	s.sendAck(m.addr, &hdr, &echo)
}

// dropMember removes a dead or departed member from every multicast
// stream of its group: what it had not acknowledged no longer holds the
// merged ACK back.
func (s *Switch) dropMemberStreams(g *group, dead *member) {
	// The receiver whose marks are taken back: the dead member, or for
	// one behind a port, the port once no live member is behind it.
	gone := dead
	if p := dead.via; p != nil {
		p.behind--
		gone = nil
		if p.behind == 0 {
			gone = p
		}
	}
	for k, ms := range s.mcast {
		if k.group != g.id {
			continue
		}
		if ms.sender == dead {
			delete(s.mcast, k)
			continue
		}
		// Take back the receiver's marks, so the counts again count
		// live receivers only.
		if i := g.row(gone); gone != nil && i >= 0 && i < len(ms.have) {
			ms.unmarkMember(i)
		}
		s.settle(g, ms)
		s.markDirty(ms)
	}
}
