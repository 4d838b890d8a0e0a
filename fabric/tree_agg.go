package fabric

import (
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Aggregation over a tree of switches. At each switch a chunk of a
// job's aggregation has one contributor per member attached there and
// one per child port (its subtree's partial result), numbered in that
// order (group.aggIdx): a switch reduces what its contributors send in
// a slot of its own, as a lone switch does, and when the slot is
// complete it sends the partial up to its parent as one contribution
// (sendUp), or, at the root, sends the result down (sendDown). A result
// from the parent goes down the same way: to the members attached here
// and to the child ports, or towards the root member only. So each
// link carries each chunk once up and once down, and every switch
// holds one slot per chunk while its contributors are in.
//
// Deterministic mode holds at every switch (contributors folded in
// their order), so a tree gives the same bits in every run: one fixed
// order, members attached to a switch before its subtrees.
//
// Refusals (a contribution that disagrees, a slot that expired, a dead
// member that had not contributed) are told to the contributors as
// today; a child port told passes it to its own members and children
// (eventFromParent).

// contributor returns m's index among the contributors to g's
// aggregations at this switch (a member attached here, or a child port;
// -1 for any other) and how many there are.
func (g *group) contributor(m *member) (int, int) {
	if len(g.ports) == 0 {
		return int(m.id), len(g.members)
	}
	if g.aggIdx == nil {
		g.aggIdx = make([]int32, len(g.members)+len(g.ports))
		n := int32(0)
		for i, o := range g.members {
			g.aggIdx[i] = -1
			if o != nil && o.via == nil {
				g.aggIdx[i], n = n, n+1
			}
		}
		for j, p := range g.ports {
			k := len(g.members) + j
			g.aggIdx[k] = -1
			if !p.up {
				g.aggIdx[k], n = n, n+1
			}
		}
		g.aggN = int(n)
	}
	if int(m.id) >= len(g.aggIdx) {
		return -1, g.aggN
	}
	return int(g.aggIdx[m.id]), g.aggN
}

// admitTreeAgg is admit for a contribution to, or a result of, an
// aggregation of g, a group with ports.
func (s *Switch) admitTreeAgg(d *transport.Delivery, g *group) bool {
	h := &d.Header
	var from *member
	if p := s.fromPort(g, d.Peer.Addr); p != nil {
		if p.up {
			s.aggFromParent(d, g)
			return true
		}
		from = p // a child's partial result
	} else if m := s.memberByAddr(g, d.Peer.Addr, h.Src); m != nil && m.alive && m.via == nil {
		from = m
	}
	if from == nil {
		s.event(d.Peer, h.Group, wire.StatusNotMember, 0, h.MsgID)
		return true
	}
	idx, n := g.contributor(from)
	key := AggKey{Group: g.id, Op: h.MsgID, Offset: h.Offset}
	if s.refusedStale(d, g, key) {
		return true
	}
	// A dead member attached here, or behind a child port, that is not
	// in (itself or in its subtree's partial) fails the chunk; one
	// behind the parent is the parent's to judge.
	for _, id := range g.dead.ids {
		dm := g.member(id)
		if dm == nil {
			continue
		}
		c := dm
		if dm.via != nil {
			c = dm.via
		}
		if ci, _ := g.contributor(c); ci >= 0 && !s.pool.Has(key, ci) {
			s.event(d.Peer, h.Group, wire.StatusMemberDead, uint64(id), h.MsgID)
			return true
		}
	}
	c := Contribution{Key: key, Member: idx, Members: n, Dtype: h.Dtype, Alu: h.Alu,
		Deterministic: h.Operand2&1 != 0, Data: d.Payload, Time: s.now}
	st, res := s.pool.Contribute(&c)
	switch st {
	case ContribNoSlot:
		s.aggStarved = true
		return false
	case ContribTooLarge:
		s.event(d.Peer, h.Group, wire.StatusTooLarge, uint64(s.cfg.Pool.SlotBytes), h.MsgID)
	case ContribMismatch:
		s.event(d.Peer, h.Group, wire.StatusBadOperand, 0, h.MsgID)
		if s.pool.Exists(key) {
			s.refuseAggregation(g, key)
		}
	case ContribComplete:
		if g.port(s.cfg.Parent) != nil {
			s.sendUp(g, h, res)
		} else {
			s.sendResult(g, h, res)
		}
	}
	s.eng.SetWindow(d.Peer, uint32(max(1, s.pool.Share(g.id))))
	return true
}

// sendUp sends the partial result res of a chunk complete here to the
// parent switch; the slot is released when the parent acknowledged it.
func (s *Switch) sendUp(g *group, h *wire.Header, res []byte) {
	key := AggKey{Group: g.id, Op: h.MsgID, Offset: h.Offset}
	s.nextTok++
	tok := s.nextTok
	out := wire.Header{Op: wire.OpData, MsgID: h.MsgID, Offset: h.Offset, MsgLen: h.MsgLen,
		Dtype: h.Dtype, Alu: h.Alu, Operand1: h.Operand1, Operand2: h.Operand2}
	to := transport.PeerID{Addr: s.cfg.Parent, Group: g.id, Member: wire.MemberAll, Mode: wire.ModeAggregate}
	if _, err := s.eng.SendFragmentShared(to, &out, res, wire.PayloadCRC(res), tok); err != nil {
		s.stats.ForwardDropped++
		s.tellContributors(g, key, wire.StatusBusy, 0)
		s.pool.Release(key)
		return
	}
	s.stats.AggregateOut++
	s.aggTok[tok] = aggResult{key: key, pending: 1}
}

// aggFromParent passes a result chunk from the parent switch down.
func (s *Switch) aggFromParent(d *transport.Delivery, g *group) {
	h := &d.Header
	res := append([]byte(nil), d.Payload...)
	s.nextTok++
	tok := s.nextTok
	if n := s.sendDown(g, h, res, tok); n > 0 {
		s.aggTok[tok] = aggResult{pending: n, copied: true}
	}
}

// tellContributors sends a refusal (st, operand) of the aggregation of
// key to every contributor in its slot at this switch: members attached
// here and child ports.
func (s *Switch) tellContributors(g *group, key AggKey, st wire.Status, operand uint64) {
	tell := func(m *member) {
		i, _ := g.contributor(m)
		if i < 0 || !s.pool.Has(key, i) {
			return
		}
		to := transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id}
		if m.port {
			to.Member = wire.MemberAll
		}
		s.event(to, g.id, st, operand, key.Op)
	}
	for _, m := range g.members {
		if m != nil && m.alive && m.via == nil {
			tell(m)
		}
	}
	for _, p := range g.ports {
		if !p.up && p.behind > 0 {
			tell(p)
		}
	}
}

// eventFromParent passes the parent's refusal of an aggregation down to
// every member attached here and every child port (the chunk's slot here
// is gone once its partial went up, so all are told; a member without
// that aggregation in flight ignores it).
func (s *Switch) eventFromParent(d *transport.Delivery) {
	h := &d.Header
	g := s.groups[h.Group]
	if g == nil || g.port(s.cfg.Parent) == nil {
		return
	}
	for _, m := range g.members {
		if m != nil && m.alive && m.via == nil {
			s.event(transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id}, g.id, h.Status, h.Operand1, h.Operand2)
		}
	}
	for _, p := range g.ports {
		if !p.up && p.behind > 0 {
			s.event(transport.PeerID{Addr: p.addr, Group: g.id, Member: wire.MemberAll}, g.id, h.Status, h.Operand1, h.Operand2)
		}
	}
}
