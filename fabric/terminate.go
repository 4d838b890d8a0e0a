package fabric

import (
	"errors"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Streams the switch terminates with its own transport engine: control
// requests (group 0), aggregation contributions and results, anycast
// requests and replies.

func (s *Switch) stepEngine(now time.Time, from netip.AddrPort, pkt []byte, h *wire.Header) {
	// Receive has parsed pkt and verified its checksum.
	d, ok := s.eng.Receive(now, netio.Datagram{Addr: from, Buf: pkt, RxTime: s.stepRx}, transport.Admission{Admit: s.admitFn, Checked: true})
	if !ok {
		return
	}
	hd := &d.Header
	switch {
	case hd.Group == 0 && hd.Mode == wire.ModeUnicast && hd.Op == wire.OpControl && hd.Flags&wire.FlagResp == 0:
		s.controlPacket(now, &d)
	case hd.Group == 0 && hd.Mode == wire.ModeUnicast && hd.Op == wire.OpControl:
		if !s.treeReply(now, &d) {
			s.memPool.poolCtrlReply(&d)
		}
	case hd.Mode == wire.ModeAggregate:
		// Handled at admission.
	case hd.Mode == wire.ModeAnycast:
		s.anycast(now, &d)
	case hd.Mode == wire.ModeUnicast && hd.Op == wire.OpEvent && hd.Flags&wire.FlagResp != 0 && s.hasParent() && d.Peer.Addr == s.cfg.Parent:
		s.eventFromParent(&d)
	default:
		s.stats.ControlRefused++
	}
	_ = h
}

func (s *Switch) onCompletion(c *transport.Completion) {
	if s.memPool.onProved(c) || s.memPool.poolCtrlFailed(c) || s.treeFailed(c) {
		return
	}
	r, ok := s.aggTok[c.Token]
	if !ok {
		return
	}
	if r.pending--; r.pending == 0 {
		if !r.copied {
			s.pool.Release(r.key)
		}
		delete(s.aggTok, c.Token)
	} else {
		s.aggTok[c.Token] = r
	}
}

// reply answers a request on the switch's stream with a bare status.
func (s *Switch) reply(to transport.PeerID, req *wire.Header, st wire.Status, operand uint64) {
	h := wire.Header{Op: req.Op, Flags: wire.FlagResp, MsgID: req.MsgID, Status: st, Operand1: operand}
	_, _ = s.eng.Send(to, &h, nil, 0)
}

// noteActivity runs at every Receive and Poll. A gap since the last one of
// more than a quarter of the heartbeat timeout, while liveness checks are
// due every eighth of it, is a stall of the switch itself (its process
// descheduled or stopped, its loop blocked): what members sent meanwhile
// may still be waiting in the socket, so the stall (less the check
// interval) is left out of their silence. Without groups or memory nodes
// no check is due and a gap is only idleness.
func (s *Switch) noteActivity(now time.Time) {
	if gap := now.Sub(s.lastActive); !s.lastActive.IsZero() && gap > s.cfg.HeartbeatTimeout/4 && s.watching() {
		s.stalled += gap - s.checkInterval()
		s.stats.Stalls++
	}
	s.lastActive = now
	s.heard = now.Add(-s.stalled)
}

// watching reports whether liveness checks are due (see nextLiveness).
func (s *Switch) watching() bool {
	return len(s.groups) > 0 || len(s.memPool.mmu.Nodes()) > 0 || s.controlPending()
}

// checkInterval is how often checkLiveness runs while watching.
func (s *Switch) checkInterval() time.Duration { return min(s.cfg.HeartbeatTimeout/8, time.Second) }

// checkLiveness declares members dead whose heartbeats stopped.
func (s *Switch) checkLiveness(now time.Time) {
	if !s.watching() || now.Before(s.nextCheck) {
		return
	}
	s.nextCheck = now.Add(s.checkInterval())
	s.sweepControl(now)
	s.memPool.checkPoolNodes(now)
	ids := make([]uint32, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		g := s.groups[id]
		for _, m := range g.members {
			if m != nil && m.alive && s.heard.Sub(m.lastSeen) > silenceAllowed(&m.beats, s.cfg.HeartbeatTimeout) {
				s.memberDead(g, m, false)
			}
		}
	}
}

func (s *Switch) nextLiveness() time.Time {
	if !s.watching() {
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
	if left {
		s.stats.MembersLeft++
	} else {
		s.stats.MembersDead++
	}
	e := Event{Kind: EventMemberDead, Job: g.name, Group: g.id, Member: m.id, Addr: m.addr, Left: left}
	if !left {
		e.Silent = s.heard.Sub(m.lastSeen)
	}
	s.logEvent(e)
	s.dropMemberStreams(g, m)
	// Stop the switch's own streams to it.
	for _, mode := range []wire.Mode{wire.ModeUnicast, wire.ModeAggregate, wire.ModeAnycast} {
		s.eng.ForgetPeer(transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: mode}, nil)
	}
	if g.sel != nil {
		g.sel.SetAlive(int(m.id), false)
		s.failAnycasts(func(r *anyReq) bool { return r.group == g && r.member == int(m.id) }, wire.StatusMemberDead)
	}
	var how uint64
	if left {
		how = 1
	}
	// The members attached here hear it from this switch, those behind
	// a neighbor switch from that one.
	s.tellPorts(g, m, left)
	for _, o := range g.members {
		if o != nil && o.alive && o.via == nil {
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
	s.failAnycasts(func(r *anyReq) bool { return r.group == g }, wire.StatusNotMember)
	delete(s.groups, g.id)
	s.eng.ClearLocal(g.id)
	if s.names[g.name] == g.id {
		delete(s.names, g.name)
	}
}

var errGroupGone = errors.New("fabric: group destroyed")

// failAnycasts fails the forwarded anycast requests that match, in the
// order they were forwarded (a simulation replays from its seed only if
// the answers leave in one order).
func (s *Switch) failAnycasts(match func(*anyReq) bool, st wire.Status) {
	var ids []uint64
	for id, r := range s.anyFwd {
		if match(r) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.failAnycast(id, s.anyFwd[id], st)
	}
}
