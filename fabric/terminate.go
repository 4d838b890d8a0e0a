package fabric

import (
	"errors"
	"net/netip"
	"sort"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Streams the switch terminates with its own transport engine: control
// requests (group 0), aggregation contributions and results, anycast
// requests and replies.

type aggResult struct {
	key     AggKey
	pending int
}

type anyKey struct {
	peer  transport.PeerID
	msgID uint64
}

type anyReq struct {
	client    transport.PeerID
	clientMsg uint64
	group     *group
	member    int
	in        anyKey
}

func (s *Switch) stepEngine(now time.Time, from netip.AddrPort, pkt []byte, h *wire.Header) {
	d, ok := s.eng.StepAdmit(now, from, pkt, s.admitFn)
	if !ok {
		return
	}
	hd := &d.Header
	switch {
	case hd.Group == 0 && hd.Mode == wire.ModeUnicast && hd.Op == wire.OpControl && hd.Flags&wire.FlagResp == 0:
		s.controlPacket(now, &d)
	case hd.Group == 0 && hd.Mode == wire.ModeUnicast && hd.Op == wire.OpControl:
		s.poolCtrlReply(&d)
	case hd.Mode == wire.ModeAggregate:
		// Handled at admission.
	case hd.Mode == wire.ModeAnycast:
		s.anycast(now, &d)
	default:
		s.stats.ControlRefused++
	}
	_ = h
}

// admit is called by the engine before a new packet counts as received.
// Aggregation contributions are reduced here, so that a full slot pool
// holds the sender back (the packet is not acknowledged and is resent).
func (s *Switch) admit(d *transport.Delivery) bool {
	h := &d.Header
	if h.Mode != wire.ModeAggregate || h.Op != wire.OpData || h.Flags&wire.FlagResp != 0 {
		return true
	}
	s.stats.AggregateIn++
	g := s.groups[h.Group]
	if g == nil || g.service {
		s.event(d.Peer, h.Group, wire.StatusNotMember, 0, h.MsgID)
		return true
	}
	m := s.memberByAddr(g, d.Peer.Addr, h.Src)
	if m == nil || !m.alive {
		s.event(d.Peer, h.Group, wire.StatusNotMember, 0, h.MsgID)
		return true
	}
	key := AggKey{Group: g.id, Op: h.MsgID, Offset: h.Offset}
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
	}
	st, res := s.pool.Contribute(&c)
	switch st {
	case ContribNoSlot:
		return false
	case ContribMismatch:
		s.event(d.Peer, h.Group, wire.StatusBadOperand, 0, h.MsgID)
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
	r := &aggResult{key: key}
	s.nextTok++
	tok := s.nextTok
	out := wire.Header{Op: wire.OpData, MsgID: h.MsgID, Offset: h.Offset, MsgLen: h.MsgLen,
		Dtype: h.Dtype, Alu: h.Alu, Operand1: h.Operand1, Operand2: h.Operand2}
	send := func(m *member) {
		to := transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: wire.ModeAggregate}
		if _, err := s.eng.SendFragment(to, &out, res, tok); err != nil {
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
		r.pending++
		s.stats.AggregateOut++
	}
	if h.Operand1 == 0 {
		for _, m := range g.members {
			if m != nil && m.alive {
				send(m)
			}
		}
	} else if root := g.member(uint16(h.Operand1 - 1)); root != nil && root.alive {
		send(root)
	}
	if r.pending == 0 {
		s.pool.Release(key)
		return
	}
	s.aggTok[tok] = r
}

func (s *Switch) onCompletion(c *transport.Completion) {
	if s.onProved(c) || s.poolCtrlFailed(c) {
		return
	}
	r := s.aggTok[c.Token]
	if r == nil {
		return
	}
	r.pending--
	if r.pending == 0 {
		s.pool.Release(r.key)
		delete(s.aggTok, c.Token)
	}
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

// anycast forwards a request fragment to its pinned member, or a member's
// reply fragment back to the client.
func (s *Switch) anycast(now time.Time, d *transport.Delivery) {
	h := &d.Header
	s.stats.AnycastIn++
	g := s.groups[h.Group]
	if g == nil || !g.service || g.sel == nil {
		s.reply(d.Peer, h, wire.StatusNotMember, 0)
		return
	}
	if h.Flags&wire.FlagResp != 0 {
		// A member's reply: relay to the client.
		r := s.anyFwd[h.MsgID]
		m := s.memberByAddr(g, d.Peer.Addr, h.Src)
		if r == nil || m == nil || r.member != int(m.id) {
			s.stats.Spoofed++
			return
		}
		out := *h
		out.MsgID = r.clientMsg
		buf := append([]byte(nil), d.Payload...)
		if _, err := s.eng.SendFragment(r.client, &out, buf, 0); err != nil {
			s.stats.ForwardDropped++
		} else {
			s.stats.AnycastOut++
		}
		if d.MsgDone {
			g.sel.Done(r.member)
			delete(s.anyFwd, h.MsgID)
			delete(s.anyIn, r.in)
		}
		return
	}
	k := anyKey{d.Peer, h.MsgID}
	id, ok := s.anyIn[k]
	var r *anyReq
	if ok {
		r = s.anyFwd[id]
	}
	if r == nil {
		mem, err := g.sel.Pick(h.Addr)
		if err != nil {
			st := wire.StatusBusy
			if errors.Is(err, ErrNoOwner) || errors.Is(err, ErrNoMember) {
				st = wire.StatusMemberDead
			}
			s.reply(d.Peer, h, st, 0)
			return
		}
		s.nextTok++
		id = s.nextTok
		r = &anyReq{client: d.Peer, clientMsg: h.MsgID, group: g, member: mem, in: k}
		s.anyFwd[id] = r
		s.anyIn[k] = id
	}
	m := g.member(uint16(r.member))
	if m == nil || !m.alive {
		s.failAnycast(id, r, wire.StatusMemberDead)
		return
	}
	out := *h
	out.MsgID = id
	buf := append([]byte(nil), d.Payload...)
	to := transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: wire.ModeAnycast}
	if _, err := s.eng.SendFragment(to, &out, buf, 0); err != nil {
		s.failAnycast(id, r, wire.StatusTooLarge)
		return
	}
	s.stats.AnycastOut++
}

// reply answers a request on the switch's stream with a bare status.
func (s *Switch) reply(to transport.PeerID, req *wire.Header, st wire.Status, operand uint64) {
	h := wire.Header{Op: req.Op, Flags: wire.FlagResp, MsgID: req.MsgID, Status: st, Operand1: operand}
	_, _ = s.eng.Send(to, &h, nil, 0)
}

func (s *Switch) failAnycast(id uint64, r *anyReq, st wire.Status) {
	h := wire.Header{Op: wire.OpData, MsgID: r.clientMsg}
	s.reply(r.client, &h, st, uint64(r.member))
	r.group.sel.Done(r.member)
	delete(s.anyFwd, id)
	delete(s.anyIn, r.in)
}

// checkLiveness declares members dead whose heartbeats stopped.
func (s *Switch) checkLiveness(now time.Time) {
	if (len(s.groups) == 0 && len(s.mmu.Nodes()) == 0 && !s.controlPending()) || now.Before(s.nextCheck) {
		return
	}
	s.nextCheck = now.Add(min(s.cfg.HeartbeatTimeout/8, time.Second))
	s.sweepControl(now)
	s.checkPoolNodes(now)
	ids := make([]uint32, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		g := s.groups[id]
		for _, m := range g.members {
			if m != nil && m.alive && now.Sub(m.lastSeen) > s.cfg.HeartbeatTimeout {
				s.memberDead(g, m, false)
			}
		}
	}
}

func (s *Switch) nextLiveness() time.Time {
	if len(s.groups) == 0 && len(s.mmu.Nodes()) == 0 && !s.controlPending() {
		return time.Time{}
	}
	return s.nextCheck
}

// memberDead removes a member from its group's data paths and tells the
// other members (OpEvent, StatusMemberDead, Operand1 = member, Operand2 =
// 1 if it left on its own).
func (s *Switch) memberDead(g *group, m *member, left bool) {
	if !m.alive {
		return
	}
	m.alive = false
	s.removeMember(m)
	g.dead.add(m.id, s.now)
	g.epoch++
	s.stats.MembersDead++
	s.dropMemberStreams(g, m)
	// Stop the switch's own streams to it.
	for _, mode := range []wire.Mode{wire.ModeUnicast, wire.ModeAggregate, wire.ModeAnycast} {
		s.eng.ForgetPeer(transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: mode}, nil)
	}
	if g.sel != nil {
		g.sel.SetAlive(int(m.id), false)
		for id, r := range s.anyFwd {
			if r.group == g && r.member == int(m.id) {
				s.failAnycast(id, r, wire.StatusMemberDead)
			}
		}
	}
	var how uint64
	if left {
		how = 1
	}
	for _, o := range g.members {
		if o != nil && o.alive {
			to := transport.PeerID{Addr: o.addr, Group: g.id, Member: o.id}
			h := wire.Header{Op: wire.OpEvent, Status: wire.StatusMemberDead, Operand1: uint64(m.id), Operand2: how}
			_, _ = s.eng.Send(to, &h, nil, 0)
		}
	}
	if g.alive() == 0 && !g.service {
		s.destroy(g)
	}
}

// destroy removes a group and everything the switch holds for it.
func (s *Switch) destroy(g *group) {
	for _, m := range g.members {
		if m == nil {
			continue
		}
		if m.alive {
			s.removeMember(m)
		}
		for _, mode := range []wire.Mode{wire.ModeUnicast, wire.ModeAggregate, wire.ModeAnycast} {
			s.eng.ForgetPeer(transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: mode}, errGroupGone)
		}
	}
	for k := range s.mcast {
		if k.group == g.id {
			delete(s.mcast, k)
		}
	}
	for tok, r := range s.aggTok {
		if r.key.Group == g.id {
			delete(s.aggTok, tok)
		}
	}
	s.pool.ReleaseGroup(g.id)
	for id, r := range s.anyFwd {
		if r.group == g {
			s.failAnycast(id, r, wire.StatusNotMember)
		}
	}
	delete(s.groups, g.id)
	s.eng.ClearLocal(g.id)
	if s.names[g.name] == g.id {
		delete(s.names, g.name)
	}
}

var errGroupGone = errors.New("fabric: group destroyed")
