package fabric

import (
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// A tree of switches. A switch may have a parent (Config.Parent) and
// children (Config.Children). A job joined under a switch with a parent
// is formed at the tree's root: the switch sends each JOIN up as a
// JOINVIA naming the joiner's own address, each switch on the way does
// the same, and the root holds the rendezvous. When every rank has
// joined, anywhere in the tree, the root answers each JOINVIA and every
// switch on the way back sets up the job's group under the id the root
// gave (the same at every switch), with
//
//   - the members attached to it,
//   - the members behind a neighbor switch (member.via: the port), whose
//     datagrams come from and go to that switch's address, and
//   - one port (group.ports) per neighbor switch with members behind it.
//
// Multicast (multicast.go) counts a port as one receiver: a sender's
// packet goes up once and is replicated at every switch, one copy per
// port; a switch acknowledges a stream to the neighbor it came from
// with its own merged ACK (Src MemberAll), so ACKs merge level by level
// and the sender sees one stream. A retransmission is forwarded only
// towards the ports and members that miss it. Unicast between members
// follows the ports.
//
// Liveness: a switch relays each heartbeat of a member that is not
// behind its parent up to the parent (the parent counts that member
// alive while its switch keeps relaying), and the answers, with the
// group's dead list, keep the parent's members alive below. A member
// that dies or leaves at one switch is reported (LEAVE) to every other
// port of its group, and from there further; a switch that stops
// answering takes the members behind it with it after the heartbeat
// timeout. Aggregation, anycast services and the pool stay with one
// switch: a tree job's aggregations are refused (UNKNOWN_OP).

// MaxChildren bounds Config.Children.
const MaxChildren = 256

// maxUpstream bounds the requests a switch has sent its parent and
// awaits (joins and relayed heartbeats); past it a join is answered
// busy and a heartbeat not relayed.
const maxUpstream = 1 << 14

// upstreamTimeout is how long a request to the parent is awaited: the
// transport gives up on an unreachable parent sooner; a parent's
// rendezvous may hold a join for ControlLimits.RendezvousTimeout.
func (s *Switch) upstreamTimeout() time.Duration {
	return s.cfg.Limits.RendezvousTimeout + s.cfg.HeartbeatTimeout
}

// treeState is a switch's side of the tree: what it awaits from its
// parent, and the parent's answers being reassembled.
type treeState struct {
	up  map[uint64]*upstream // by message id on the stream to the parent
	asm ctrlAssembler
}

// upstream is a request sent to the parent: a join (JOIN from a member
// or JOINVIA from a child, passed on) or a relayed heartbeat.
type upstream struct {
	typ    ctrl.Type // the joiner's request (Join, JoinVia), or Heartbeat
	joiner transport.PeerID
	msgID  uint64 // the joiner's request
	job    string
	size   int
	real   netip.AddrPort // the joiner's own address
	group  uint32         // a heartbeat's group
	at     time.Time
}

// hasParent reports whether the switch is below another in a tree.
func (s *Switch) hasParent() bool { return s.cfg.Parent.IsValid() }

// isChild reports whether addr is a configured child switch.
func (s *Switch) isChild(addr netip.AddrPort) bool { return slices.Contains(s.cfg.Children, addr) }

// sendCtrl sends control request m to addr on the switch's stream; it
// returns the message id.
func (s *Switch) sendCtrl(addr netip.AddrPort, m *ctrl.Msg) (uint64, bool) {
	buf, err := secure.AppendCtrl(nil, m, s.cfg.Token)
	if err != nil {
		return 0, false
	}
	h := wire.Header{Op: wire.OpControl}
	id, err := s.eng.Send(transport.PeerID{Addr: addr}, &h, buf, 0)
	return id, err == nil
}

// proxyJoin sends a join up to the parent: a member's JOIN (real: its
// own address) or a child's JOINVIA.
func (s *Switch) proxyJoin(now time.Time, d *transport.Delivery, m *ctrl.Msg, real netip.AddrPort) {
	if len(s.tree.up) >= maxUpstream {
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, wire.StatusBusy, ctrl.JoinBusyFull)
		return
	}
	rank := uint16(0xffff)
	if m.Rank != ctrl.RankAny {
		rank = uint16(m.Rank)
	}
	up := &ctrl.Msg{Type: ctrl.JoinVia, Job: m.Job, Size: m.Size, Rank: m.Rank, MTU: m.MTU,
		Members: []ctrl.MemberInfo{{ID: rank, Addr: real}}}
	id, ok := s.sendCtrl(s.cfg.Parent, up)
	if !ok {
		s.reply(d.Peer, &d.Header, wire.StatusBusy, 0)
		return
	}
	if s.tree.up == nil {
		s.tree.up = make(map[uint64]*upstream)
	}
	s.tree.up[id] = &upstream{typ: m.Type, joiner: d.Peer, msgID: d.Header.MsgID, job: m.Job, size: m.Size, real: real, at: now}
	s.stats.TreeJoinsUp++
}

// joinVia handles a child's JOINVIA: passed on up, or, at the root,
// joined to the rendezvous on the joiner's behalf.
func (s *Switch) joinVia(now time.Time, d *transport.Delivery, m *ctrl.Msg) {
	if !s.isChild(d.Peer.Addr) {
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, wire.StatusNotMember, 0)
		return
	}
	if s.hasParent() {
		s.proxyJoin(now, d, m, m.Members[0].Addr)
		return
	}
	s.joinAs(now, d, m, m.Members[0].Addr, true)
}

// relayBeat passes member mem's heartbeat in g up to the parent, unless
// mem is behind the parent.
func (s *Switch) relayBeat(now time.Time, g *group, mem *member) {
	pp := g.port(s.cfg.Parent)
	if pp == nil || mem.via == pp || len(s.tree.up) >= maxUpstream {
		return
	}
	id, ok := s.sendCtrl(s.cfg.Parent, &ctrl.Msg{Type: ctrl.Heartbeat, Group: g.id, Member: mem.id})
	if !ok {
		return
	}
	if s.tree.up == nil {
		s.tree.up = make(map[uint64]*upstream)
	}
	s.tree.up[id] = &upstream{typ: ctrl.Heartbeat, group: g.id, at: now}
}

// treeReply takes the parent's answer to a request of s.tree.up; it
// reports false for an answer to something else.
func (s *Switch) treeReply(now time.Time, d *transport.Delivery) bool {
	if !s.hasParent() || d.Peer.Addr != s.cfg.Parent {
		return false
	}
	u := s.tree.up[d.Header.MsgID]
	if u == nil {
		return false
	}
	payload := d.Payload
	if d.Header.Offset != 0 || uint32(len(payload)) != d.Header.MsgLen {
		var st wire.Status
		if payload, st = s.assemble(&s.tree.asm, now, d); payload == nil && st == wire.StatusOK {
			return true // more to come
		}
	}
	delete(s.tree.up, d.Header.MsgID)
	var resp ctrl.Msg
	ok := d.Header.Status == wire.StatusOK && payload != nil && secure.ParseCtrl(payload, &resp, s.cfg.Token) == nil && resp.Resp
	if u.typ == ctrl.Heartbeat {
		s.beatAnswered(u, &d.Header, &resp, ok)
		return true
	}
	switch {
	case !ok && d.Header.Status != wire.StatusOK:
		h := wire.Header{Op: wire.OpControl, MsgID: u.msgID}
		s.reply(u.joiner, &h, d.Header.Status, d.Header.Operand1)
	case !ok || resp.Type != ctrl.JoinVia:
		h := wire.Header{Op: wire.OpControl, MsgID: u.msgID}
		s.reply(u.joiner, &h, wire.StatusBadOperand, 0)
	case resp.Group == 0:
		// Another process holds the rank: tell the joiner who.
		resp.Type = u.typ
		s.respondTo(u.joiner, u.msgID, &resp)
	default:
		s.joinedVia(now, u, &resp)
	}
	return true
}

// treeFailed handles a request to the parent the transport gave up on.
func (s *Switch) treeFailed(c *transport.Completion) bool {
	if c.Err == nil || c.Peer.Addr != s.cfg.Parent {
		return false
	}
	u := s.tree.up[c.MsgID]
	if u == nil {
		return false
	}
	delete(s.tree.up, c.MsgID)
	if u.typ != ctrl.Heartbeat {
		h := wire.Header{Op: wire.OpControl, MsgID: u.msgID}
		s.reply(u.joiner, &h, wire.StatusBusy, 0)
	}
	return true
}

// sweepUpstream forgets requests to the parent awaited too long.
func (s *Switch) sweepUpstream(now time.Time) {
	for id, u := range s.tree.up {
		if now.Sub(u.at) > s.upstreamTimeout() {
			delete(s.tree.up, id)
		}
	}
}

// beatAnswered takes the parent's answer to a relayed heartbeat: the
// members it counts dead are dead here too.
func (s *Switch) beatAnswered(u *upstream, h *wire.Header, resp *ctrl.Msg, ok bool) {
	g := s.groups[u.group]
	if g == nil {
		return
	}
	if h.Status == wire.StatusMemberDead {
		if m := g.member(uint16(h.Operand1)); m != nil {
			s.memberDead(g, m, false)
		}
		return
	}
	if !ok || resp.Type != ctrl.Heartbeat {
		return
	}
	pp := g.port(s.cfg.Parent)
	for _, id := range resp.Dead {
		if m := g.member(id); m != nil && m.alive && m.via == pp {
			s.memberDead(g, m, false)
		}
	}
}

// joinedVia sets up the group the root formed, for the joiner u, and
// answers it. The first answer of a job also settles every other join of
// the job this switch passed up and still awaits (the root formed the
// group: they are all in its table, found by their own addresses), and
// answers them: no member attached here hears that the group formed
// before every other one is attached, so none of its first aggregations
// finds a slot counting fewer contributors. Their own answers from the
// parent, coming later, find nothing awaited and are dropped.
func (s *Switch) joinedVia(now time.Time, u *upstream, resp *ctrl.Msg) {
	h := wire.Header{Op: wire.OpControl, MsgID: u.msgID}
	g := s.groups[resp.Group]
	if g == nil {
		if _, taken := s.names[u.job]; taken || len(s.groups) >= s.cfg.MaxGroups || int(resp.Member) >= u.size {
			s.stats.ControlRefused++
			s.reply(u.joiner, &h, wire.StatusBusy, ctrl.JoinBusyFull)
			return
		}
		g = s.newGroupID(resp.Group, u.job, false, u.size, now)
		pp := s.addPort(g, s.cfg.Parent)
		for _, mi := range resp.Members {
			if int(mi.ID) < u.size && g.members[mi.ID] == nil {
				s.attach(g, &member{id: mi.ID, addr: pp.addr, real: mi.Addr, via: pp, alive: true, lastSeen: s.heard})
			}
		}
		s.logEvent(Event{Kind: EventJobJoined, Job: g.name, Group: g.id, Size: u.size})
		g.epoch = max(g.epoch, resp.Epoch)
		s.settleJoins(g, resp)
	}
	if g.name != u.job || g.service || int(resp.Member) >= len(g.members) {
		s.stats.ControlRefused++
		s.reply(u.joiner, &h, wire.StatusBusy, ctrl.JoinBusyFormed)
		return
	}
	g.epoch = max(g.epoch, resp.Epoch)
	s.joinHere(g, u, resp.Member, resp.Members)
}

// settleJoins answers every join of g's job this switch awaits from its
// parent, in the order they were sent up, with its rank in resp's table.
func (s *Switch) settleJoins(g *group, resp *ctrl.Msg) {
	ids := make([]uint64, 0, len(s.tree.up))
	for id, w := range s.tree.up {
		if w.typ != ctrl.Heartbeat && w.job == g.name {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		w := s.tree.up[id]
		for _, mi := range resp.Members {
			if mi.Addr == w.real && int(mi.ID) < len(g.members) {
				delete(s.tree.up, id)
				s.joinHere(g, w, mi.ID, resp.Members)
				break
			}
		}
	}
}

// joinHere makes the joiner of w g's member id (attached here, or behind
// the child switch that sent w) and answers it with the table.
func (s *Switch) joinHere(g *group, w *upstream, id uint16, table []ctrl.MemberInfo) {
	if old := g.members[id]; old != nil && old.alive && (old.via == nil || !old.via.up) {
		// Attached already (settled with the job's first answer): this
		// is a repeat; answer it the same.
		s.respondTo(w.joiner, w.msgID, &ctrl.Msg{Type: w.typ, Resp: true, Group: g.id, Member: id, Members: table, Epoch: g.epoch})
		return
	}
	mem := &member{id: id, addr: w.joiner.Addr, alive: true, lastSeen: s.heard}
	if w.typ == ctrl.JoinVia {
		p := s.addPort(g, w.joiner.Addr)
		mem.addr, mem.real, mem.via = p.addr, w.real, p
	}
	if old := g.members[id]; old != nil {
		s.detach(g, old)
	}
	s.attach(g, mem)
	s.respondTo(w.joiner, w.msgID, &ctrl.Msg{Type: w.typ, Resp: true, Group: g.id, Member: mem.id, Members: table, Epoch: g.epoch})
}

// port returns g's port to the neighbor switch at addr (nil: none).
func (g *group) port(addr netip.AddrPort) *member {
	for _, p := range g.ports {
		if p.addr == addr {
			return p
		}
	}
	return nil
}

// addPort returns g's port to the switch at addr, adding it if new. A
// port's id follows the member ids (the streams' bitmaps have a row for
// it); streams made before it have none, so it is added only while the
// group forms.
func (s *Switch) addPort(g *group, addr netip.AddrPort) *member {
	if p := g.port(addr); p != nil {
		return p
	}
	p := &member{id: uint16(len(g.members) + len(g.ports)), addr: addr, alive: true, port: true, up: addr == s.cfg.Parent}
	g.ports = append(g.ports, p)
	g.aggIdx = nil
	g.tree = true
	p.rx, g.rxN = g.rxN, g.rxN+1
	return p
}

// attach makes mem g's member mem.id: reachable for liveness, counted
// behind its port.
func (s *Switch) attach(g *group, mem *member) {
	g.members[mem.id] = mem
	g.aggIdx = nil
	mem.rx = -1
	if mem.via == nil {
		mem.rx, g.rxN = g.rxN, g.rxN+1
	}
	if mem.via != nil {
		mem.via.behind++
	} else {
		g.byAddr[mem.addr] = mem
	}
	s.addMember(mem)
}

// detach undoes attach for a member replaced before it served (a
// member of the parent's side taken over by the one that joined here).
func (s *Switch) detach(g *group, mem *member) {
	if mem.alive {
		s.removeMember(mem)
		if mem.via != nil {
			mem.via.behind--
		}
	}
	if g.byAddr[mem.addr] == mem {
		delete(g.byAddr, mem.addr)
	}
}

// tellPorts reports member m of g gone to every port of g but the one
// m lies behind: LEAVE for one that left, MEMBERGONE for one that died.
func (s *Switch) tellPorts(g *group, m *member, left bool) {
	typ := ctrl.MemberGone
	if left {
		typ = ctrl.Leave
	}
	for _, p := range g.ports {
		if p != m.via {
			s.sendCtrl(p.addr, &ctrl.Msg{Type: typ, Group: g.id, Member: m.id})
		}
	}
}

// fromPort returns the port of g at addr when addr is a neighbor switch
// of the tree (a configured parent or child).
func (s *Switch) fromPort(g *group, addr netip.AddrPort) *member {
	if addr != s.cfg.Parent && !s.isChild(addr) {
		return nil
	}
	return g.port(addr)
}

// rows is how many rows g's multicast streams need at this switch: one
// per member for a group on this switch alone (indexed by member id),
// one per member attached here and per port for a group spanning a
// tree (member.rx: rows are handed out as they come and never reused,
// so a stream's rows keep their meaning while the group forms).
func (g *group) rows() int {
	if g.tree {
		return int(g.rxN)
	}
	return len(g.members)
}

// row is m's row in g's multicast streams (-1: none, m behind a port or
// nil).
func (g *group) row(m *member) int {
	switch {
	case m == nil:
		return -1
	case g.tree:
		return int(m.rx)
	}
	return int(m.id)
}
