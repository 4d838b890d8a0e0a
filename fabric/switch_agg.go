package fabric

import (
	"errors"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Aggregation at the switch: contributions are reduced in the AggPool at
// admission and the results sent back as fragments.

type aggResult struct {
	key     AggKey
	pending int
	copied  bool // a result from the parent switch, in a buffer of its own: no slot
}

// admit is called by the engine before a new packet counts as received.
// Aggregation contributions are reduced here, so that a full slot pool
// holds the sender back (the packet is not acknowledged and is resent).
func (s *Switch) admit(d *transport.Delivery) bool {
	h := &d.Header
	if h.Mode == wire.ModeAnycast {
		return s.admitAnycast(d)
	}
	if h.Mode != wire.ModeAggregate || h.Op != wire.OpData || h.Flags&wire.FlagResp != 0 {
		return true
	}
	s.stats.AggregateIn++
	g := s.groups[h.Group]
	if g == nil || g.service {
		s.event(d.Peer, h.Group, wire.StatusNotMember, 0, h.MsgID)
		return true
	}
	if len(g.ports) > 0 {
		return s.admitTreeAgg(d, g)
	}
	m := s.memberByAddr(g, d.Peer.Addr, h.Src)
	if m == nil || !m.alive {
		s.event(d.Peer, h.Group, wire.StatusNotMember, 0, h.MsgID)
		return true
	}
	key := AggKey{Group: g.id, Op: h.MsgID, Offset: h.Offset}
	if s.refusedStale(d, g, key) {
		return true
	}
	// A member that is gone (crashed or left) can complete this chunk only
	// if its contribution is in already: one that left after finishing its
	// part did, and a slower member's contribution must still count.
	for _, dead := range g.dead.ids {
		if !s.pool.Has(key, int(dead)) {
			s.event(d.Peer, h.Group, wire.StatusMemberDead, uint64(dead), h.MsgID)
			return true
		}
	}
	c := Contribution{
		Key:           key,
		Member:        int(m.id),
		Members:       len(g.members),
		Dtype:         h.Dtype,
		Alu:           h.Alu,
		Deterministic: h.Operand2&1 != 0,
		Data:          d.Payload,
		Time:          s.now,
	}
	st, res := s.pool.Contribute(&c)
	switch st {
	case ContribNoSlot:
		s.aggStarved = true
		return false
	case ContribTooLarge:
		// Only a member with a larger MTU than the switch's sends such a
		// chunk, and every member of a job has the same: each is told
		// at its own contribution. Operand: the largest chunk taken.
		s.event(d.Peer, h.Group, wire.StatusTooLarge, uint64(s.cfg.Pool.SlotBytes), h.MsgID)
	case ContribMismatch:
		s.event(d.Peer, h.Group, wire.StatusBadOperand, 0, h.MsgID)
		if s.pool.Exists(key) {
			s.refuseAggregation(g, key)
		}
	case ContribComplete:
		s.sendResult(g, h, res)
	}
	s.eng.SetWindow(d.Peer, uint32(max(1, s.pool.Share(g.id))))
	return true
}

// sendResult sends a reduced chunk to the root (Operand1 = root+1) or to
// every member (Operand1 = 0); the slot is released when all have
// acknowledged it.
func (s *Switch) sendResult(g *group, h *wire.Header, res []byte) {
	key := AggKey{Group: g.id, Op: h.MsgID, Offset: h.Offset}
	r := aggResult{key: key} // kept by value: no allocation per result
	s.nextTok++
	tok := s.nextTok
	if r.pending = s.sendDown(g, h, res, tok); r.pending == 0 {
		s.pool.Release(key)
		return
	}
	s.aggTok[tok] = r
}

// sendDown sends result chunk res of h's aggregation (token tok) to the
// members attached here and, in a tree, to the child ports with live
// members behind them (Operand1 0), or towards the root (Operand1 =
// root+1) only. It returns how many sends await their acknowledgement.
func (s *Switch) sendDown(g *group, h *wire.Header, res []byte, tok uint64) int {
	out := wire.Header{Op: wire.OpData, MsgID: h.MsgID, Offset: h.Offset, MsgLen: h.MsgLen,
		Dtype: h.Dtype, Alu: h.Alu, Operand1: h.Operand1, Operand2: h.Operand2}
	resCRC := wire.PayloadCRC(res) // once, for every member's packet
	pending := 0
	send := func(m *member) {
		to := transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: wire.ModeAggregate}
		if m.port {
			to.Member = wire.MemberAll
		}
		// res stays in the slot until every member has acknowledged it:
		// the engine may send it to each without copying it.
		if _, err := s.eng.SendFragmentShared(to, &out, res, resCRC, tok); err != nil {
			// Refuse the member's aggregation rather than leave it waiting
			// for a result that will not come: a chunk larger than the
			// switch sends (a member that joined with a smaller MTU than
			// it uses) or a full send queue.
			s.stats.ForwardDropped++
			st := wire.StatusBusy
			if errors.Is(err, transport.ErrFragment) {
				st = wire.StatusTooLarge
			}
			s.event(to, g.id, st, 0, h.MsgID)
			return
		}
		pending++
		s.stats.AggregateOut++
	}
	if h.Operand1 == 0 {
		for _, m := range g.members {
			if m != nil && m.alive && m.via == nil {
				send(m)
			}
		}
		for _, p := range g.ports {
			if !p.up && p.behind > 0 {
				send(p)
			}
		}
	} else if root := g.member(uint16(h.Operand1 - 1)); root != nil && root.alive {
		switch {
		case root.via == nil:
			send(root)
		case !root.via.up:
			send(root.via)
		}
	}
	return pending
}

// refuseAggregation ends an aggregation whose members disagree (a
// contribution's length, dtype, op or member count differ from the
// slot's): every member that contributed to the slot is told
// (EVENT, StatusBadOperand), the slot is freed, and the group's floor
// rises so that every later contribution to it, from the members that
// had not contributed yet, is refused the same way. Each member's
// operation thus fails at once, instead of waiting for an AggTimeout
// that only the mismatching member would have escaped. O(members).
func (s *Switch) refuseAggregation(g *group, key AggKey) {
	if len(g.ports) > 0 {
		s.tellContributors(g, key, wire.StatusBadOperand, 0)
	}
	for _, m := range g.members {
		if len(g.ports) == 0 && m != nil && m.alive && s.pool.Has(key, int(m.id)) {
			s.event(transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id}, g.id, wire.StatusBadOperand, 0, key.Op)
		}
	}
	s.pool.Release(key)
	g.aggFloor = max(g.aggFloor, key.Op)
	g.aggBad = key.Op
	s.stats.AggRefused++
}

// event sends a notification (OpEvent) to a peer over the switch's
// reliable unicast stream in group g.
func (s *Switch) event(to transport.PeerID, g uint32, st wire.Status, operand uint64, msgID uint64) {
	to.Mode = wire.ModeUnicast
	// FlagResp marks the refusal of one operation (Operand2 = its id), as
	// opposed to a group notice such as a member's death.
	h := wire.Header{Op: wire.OpEvent, Flags: wire.FlagResp, Status: st, Operand1: operand, Operand2: msgID}
	_, _ = s.eng.Send(to, &h, nil, 0)
}

// expireAggs frees the aggregation slots that have been open for
// AggTimeout, or for AggReclaimAfter if a contribution found no free slot
// since the last Poll: their partial contributions are dropped, the
// members that contributed are told (EVENT, StatusBusy), and the group's
// floor rises so that no slot opens for that aggregation again. O(1) per
// slot freed.
func (s *Switch) expireAggs(now time.Time) {
	cutoff := now.Add(-s.cfg.AggTimeout)
	if s.aggStarved {
		s.aggStarved = false
		cutoff = later(cutoff, now.Add(-s.cfg.AggReclaimAfter))
	}
	for {
		k, opened, ok := s.pool.Oldest()
		if !ok || opened.After(cutoff) {
			return
		}
		if g := s.groups[k.Group]; g != nil {
			if len(g.ports) > 0 {
				s.tellContributors(g, k, wire.StatusBusy, 0)
			}
			for _, m := range g.members {
				if len(g.ports) == 0 && m != nil && m.alive && s.pool.Has(k, int(m.id)) {
					to := transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id}
					s.event(to, g.id, wire.StatusBusy, 0, k.Op)
				}
			}
			g.aggFloor = max(g.aggFloor, k.Op)
		}
		s.pool.Release(k)
		s.stats.AggExpired++
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// nextAggExpiry is when the oldest open slot expires (zero: none open).
// (A slot that may be reclaimed earlier is, when a held-back sender's
// resend finds no free slot.)
func (s *Switch) nextAggExpiry() time.Time {
	if _, opened, ok := s.pool.Oldest(); ok {
		return opened.Add(s.cfg.AggTimeout)
	}
	return time.Time{}
}

// refusedStale refuses a contribution to an aggregation that expired
// here (or an older one) and reports whether it did: a slot opened now
// would hold only late contributions, and would complete with them if
// the others were late too. One refused because its members disagreed
// is refused as such.
func (s *Switch) refusedStale(d *transport.Delivery, g *group, key AggKey) bool {
	h := &d.Header
	if h.MsgID > g.aggFloor || s.pool.Exists(key) {
		return false
	}
	s.stats.AggStale++
	st := wire.StatusBusy
	if h.MsgID == g.aggBad {
		st = wire.StatusBadOperand
	}
	s.event(d.Peer, h.Group, st, 0, h.MsgID)
	return true
}
