package fabric

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// rendezvous collects the members of a job until all have joined. It is
// dropped when the job's last rank joins (the group replaces it) or
// ControlLimits.RendezvousTimeout after the last JOIN it got.
type rendezvous struct {
	job     string
	size    int
	mtu     int       // every member's MTU: fragments of an aggregation line up
	joiners []*joiner // by rank
	joined  []byte    // the ranks in joiners, as ctrl.Msg.Joined
	count   int
	last    time.Time // of the last JOIN
}

type joiner struct {
	peer  transport.PeerID
	msgID uint64
	real  netip.AddrPort // the joiner's own address (peer's, or behind the child switch peer)
	via   bool           // joined through a child switch (JOINVIA)
}

// control handles one control request.
func (s *Switch) control(now time.Time, d *transport.Delivery) {
	s.stats.ControlIn++
	m := &s.ctrl
	if err := secure.ParseCtrl(d.Payload, m, s.cfg.Token); err != nil || m.Resp {
		st := wire.StatusBadOperand
		if errors.Is(err, secure.ErrCtrlAuth) {
			st = wire.StatusAuth
			s.stats.AuthFailures++
			// An operator sees it in the log, at most once a second.
			if s.authLogged.IsZero() || now.Sub(s.authLogged) >= time.Second {
				s.logEvent(Event{Kind: EventAuthRefused, Addr: d.Peer.Addr, Count: s.authUnlogged})
				s.authLogged, s.authUnlogged = now, 0
			} else {
				s.authUnlogged++
			}
		}
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, st, 0)
		return
	}
	if s.idents != nil {
		if c, ok := s.idents(d.Peer.Addr); !ok || !RoleMay(c.Role, m.Type) {
			// The sender's certified role may not ask this.
			s.stats.ControlRefused++
			s.stats.RoleRefused++
			s.reply(d.Peer, &d.Header, wire.StatusAuth, ctrl.AuthRoleRefused)
			return
		}
	}
	if m.Type.CarriesMTU() && m.MTU > s.cfg.Transport.MTU {
		// The switch could not send this member's datagrams back (an
		// aggregation result, a forwarded request or reply is as large as
		// what the member sends): refuse it now rather than drop its
		// traffic later. Operand1 tells it the largest MTU accepted.
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, wire.StatusTooLarge, uint64(s.cfg.Transport.MTU))
		return
	}
	switch m.Type {
	case ctrl.Join:
		s.join(now, d, m)
	case ctrl.JoinVia:
		s.joinVia(now, d, m)
	case ctrl.Leave, ctrl.Destroy, ctrl.Heartbeat, ctrl.MemberGone:
		g := s.groups[m.Group]
		var mem *member
		if g != nil {
			mem = s.memberByAddr(g, d.Peer.Addr, m.Member)
			if mem == nil && m.Type == ctrl.Destroy {
				// A neighbor switch passes a destroy on.
				mem = s.fromPort(g, d.Peer.Addr)
			}
		}
		if mem == nil {
			s.stats.ControlRefused++
			s.reply(d.Peer, &d.Header, wire.StatusNotMember, 0)
			return
		}
		switch m.Type {
		case ctrl.Heartbeat:
			if !mem.alive {
				s.reply(d.Peer, &d.Header, wire.StatusMemberDead, uint64(mem.id))
				return
			}
			mem.lastSeen = s.heard
			mem.beats.Beat(s.heard)
			s.respond(d, &ctrl.Msg{Type: ctrl.Heartbeat, Resp: true, Group: g.id, Member: mem.id, Epoch: g.epoch, Dead: g.deadIDs()})
			s.relayBeat(now, g, mem)
		case ctrl.Leave:
			s.respond(d, &ctrl.Msg{Type: ctrl.Leave, Resp: true, Group: g.id, Member: mem.id})
			s.memberDead(g, mem, true)
		case ctrl.MemberGone:
			// Only a neighbor switch reports a member behind it gone.
			if mem.via == nil {
				s.stats.ControlRefused++
				s.reply(d.Peer, &d.Header, wire.StatusNotMember, 0)
				return
			}
			s.respond(d, &ctrl.Msg{Type: ctrl.MemberGone, Resp: true})
			s.memberDead(g, mem, false)
		case ctrl.Destroy:
			s.respond(d, &ctrl.Msg{Type: ctrl.Destroy, Resp: true, Group: g.id})
			for _, p := range g.ports {
				if p.addr != d.Peer.Addr {
					s.sendCtrl(p.addr, &ctrl.Msg{Type: ctrl.Destroy, Group: g.id})
				}
			}
			s.destroy(g)
		}
	case ctrl.Register:
		s.register(now, d, m)
	case ctrl.Lookup:
		g := s.groups[s.names[m.Service]]
		if g == nil || !g.service {
			s.reply(d.Peer, &d.Header, wire.StatusNotMember, 0)
			return
		}
		s.respond(d, &ctrl.Msg{Type: ctrl.Lookup, Resp: true, Group: g.id, Members: g.table()})
	case ctrl.JoinStatus:
		// Any token holder may ask, as for LOOKUP. The answer is at most
		// 2+512 bytes of fields, and the transport sends an address that
		// has not shown it receives there at most three times what came
		// from it until it acknowledges.
		resp := &ctrl.Msg{Type: ctrl.JoinStatus, Resp: true}
		if r := s.jobs[m.Job]; r != nil {
			resp.Size, resp.Joined = r.size, r.joined
		}
		s.respond(d, resp)
	case ctrl.PoolNode, ctrl.PoolCreate, ctrl.PoolOpen, ctrl.PoolFree, ctrl.PoolStat, ctrl.PoolRebuilt, ctrl.PoolReport,
		ctrl.PoolColumnLost, ctrl.PoolColumnGrant, ctrl.PoolColumnRestored:
		s.memPool.poolControl(now, d, m)
	default:
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, wire.StatusUnknownOp, 0)
	}
}

// RoleMay reports whether a process of role r may send control requests
// of type t to a switch that knows its peers' identities: memory nodes
// lend memory and report it; job members join, beat and run services;
// clients and members use the pool and look services up. A switch sends
// the rest (grants, rebuilds) and asks nothing of itself.
func RoleMay(r secure.Role, t ctrl.Type) bool {
	switch t {
	case ctrl.PoolNode, ctrl.PoolReport, ctrl.PoolRebuilt:
		return r == secure.RoleMemoryNode
	case ctrl.Join, ctrl.Register, ctrl.JoinStatus:
		return r == secure.RoleMember
	case ctrl.Leave, ctrl.Destroy, ctrl.Heartbeat:
		// A switch of a tree relays its members' heartbeats and reports
		// their deaths to its neighbors.
		return r == secure.RoleMember || r == secure.RoleSwitch
	case ctrl.JoinVia, ctrl.MemberGone:
		return r == secure.RoleSwitch
	case ctrl.Lookup, ctrl.PoolCreate, ctrl.PoolOpen, ctrl.PoolFree, ctrl.PoolStat,
		ctrl.PoolColumnLost, ctrl.PoolColumnGrant, ctrl.PoolColumnRestored:
		return r == secure.RoleMember || r == secure.RoleClient
	}
	return false
}

// RankMay reports whether a member whose credential is named name may
// join job as rank (ctrl.RankAny: any), by the name grammar of package
// secure (secure.ParseName, secure.NameScopes):
//
//   - the job named JOB is joined by a credential JOB/RANK as rank RANK
//     only, and by the servers of scope JOB (JOB, JOB/INST) as any rank;
//   - a group of JOB's own (JOB.SUFFIX: a sub-communicator, a write
//     group) is joined by every credential of scope JOB as any rank,
//     and, when its name ends in @GUEST, by those of scope GUEST too;
//   - every other job, and every name outside the grammar, is refused.
//
// No job or credential name holds a '.', so the groups of JOB are never
// another job's: a credential of job "train" reaches no rank of a job
// "train-2", and no credential binds a rank of "train.v2".
func RankMay(name, job string, rank int) bool {
	n, err := secure.ParseName(secure.RoleMember, name)
	if err != nil {
		return false
	}
	if job == n.Scope {
		return n.Rank < 0 || n.Rank == rank
	}
	owner, guest := secure.NameScopes(job)
	return owner == n.Scope || guest == n.Scope
}

// ServiceMay reports whether a member whose credential is named name may
// register (serve) service: a service named S or S.SUFFIX is registered
// by the credentials of scope S alone (S, S/INST, S/RANK: see
// secure.ParseName), so a credential of another scope cannot take over
// the anycasts of a service it was not issued for.
func ServiceMay(name, service string) bool {
	n, err := secure.ParseName(secure.RoleMember, name)
	if err != nil {
		return false
	}
	owner, _ := secure.NameScopes(service)
	return owner == n.Scope
}

// respond sends a control response to the request in d.
func (s *Switch) respond(d *transport.Delivery, m *ctrl.Msg) {
	s.respondTo(d.Peer, d.Header.MsgID, m)
}

func (s *Switch) respondTo(peer transport.PeerID, msgID uint64, m *ctrl.Msg) {
	buf, err := secure.AppendCtrl(nil, m, s.cfg.Token)
	if err != nil {
		h := wire.Header{Op: wire.OpControl, MsgID: msgID}
		s.reply(peer, &h, wire.StatusBusy, 0)
		return
	}
	h := wire.Header{Op: wire.OpControl, Flags: wire.FlagResp, MsgID: msgID}
	// The acknowledgement of the response proves that peer receives at
	// its address (pool_clients.go).
	tok := s.memPool.proveToken(peer.Addr)
	if _, err := s.eng.Send(peer, &h, buf, tok); err != nil {
		delete(s.memPool.proveTok, tok)
	}
}

func (g *group) table() []ctrl.MemberInfo {
	t := make([]ctrl.MemberInfo, 0, len(g.members))
	for _, m := range g.members {
		if m != nil && (m.alive || !g.service) {
			t = append(t, ctrl.MemberInfo{ID: m.id, Addr: m.realAddr()})
		}
	}
	return t
}

// join registers one member of a job; when the last one arrives the group
// is created and every joiner gets the member table.
func (s *Switch) join(now time.Time, d *transport.Delivery, m *ctrl.Msg) {
	if s.idents != nil {
		// A member credential named JOB/RANK joins that job as that
		// rank only, and every credential the jobs of its scope only.
		if c, _ := s.idents(d.Peer.Addr); !RankMay(c.Name, m.Job, m.Rank) {
			s.stats.ControlRefused++
			s.stats.NameRefused++
			s.reply(d.Peer, &d.Header, wire.StatusAuth, ctrl.AuthNameRefused)
			return
		}
	}
	s.joinAs(now, d, m, d.Peer.Addr, false)
}

// joinAs joins the process at real to job m.Job: a member that sent
// d itself, or (via) one behind the child switch that sent d. Below a
// parent the join goes up (tree.go); the root, or a switch alone, holds
// the rendezvous.
func (s *Switch) joinAs(now time.Time, d *transport.Delivery, m *ctrl.Msg, real netip.AddrPort, via bool) {
	// A join repeated after the group exists (the member restarted its
	// request) gets the table again.
	if id, ok := s.names[m.Job]; ok {
		if g := s.groups[id]; g != nil && !g.service {
			if mem := g.byReal(real); mem != nil && mem.alive {
				s.respond(d, &ctrl.Msg{Type: m.Type, Resp: true, Group: g.id, Member: mem.id, Members: g.table(), Epoch: g.epoch})
				return
			}
			if m.Rank >= 0 && m.Rank < len(g.members) && g.members[m.Rank] != nil && g.members[m.Rank].alive {
				s.stats.ControlRefused++
				s.respond(d, &ctrl.Msg{Type: m.Type, Resp: true, Member: uint16(m.Rank), Members: []ctrl.MemberInfo{{ID: uint16(m.Rank), Addr: g.members[m.Rank].realAddr()}}})
				return
			}
		}
		s.reply(d.Peer, &d.Header, wire.StatusBusy, ctrl.JoinBusyFormed) // name in use
		return
	}
	if s.hasParent() {
		s.proxyJoin(now, d, m, real)
		return
	}
	r := s.jobs[m.Job]
	if r == nil {
		if len(s.groups)+len(s.jobs) >= s.cfg.MaxGroups || len(s.jobs) >= s.cfg.Limits.MaxRendezvous {
			s.stats.ControlRefused++
			s.reply(d.Peer, &d.Header, wire.StatusBusy, ctrl.JoinBusyFull)
			return
		}
		r = &rendezvous{job: m.Job, size: m.Size, mtu: m.MTU, joiners: make([]*joiner, m.Size), joined: make([]byte, (m.Size+7)/8)}
		s.jobs[m.Job] = r
	}
	r.last = now
	if r.size != m.Size || r.mtu != m.MTU {
		// Operand1 tells the joiner what the job's first member asked.
		// The ranks waiting cannot form a group with this one: they are
		// told at once, who asked what (a launch that gave the ranks
		// different sizes fails on every rank, not on one at once and
		// on the others at their timeout), and the rendezvous is
		// dropped for a new launch.
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, wire.StatusBadOperand, ctrl.JoinRefusal(r.size, r.mtu))
		if !slices.ContainsFunc(r.joiners, func(j *joiner) bool { return j != nil && j.real == real }) {
			delete(s.jobs, m.Job)
			for _, j := range r.joiners {
				if j != nil {
					h := wire.Header{Op: wire.OpControl, MsgID: j.msgID}
					s.reply(j.peer, &h, wire.StatusBusy, ctrl.JoinConflict(m.Rank, m.Size, m.MTU))
				}
			}
		}
		return
	}
	rank := m.Rank
	for i, j := range r.joiners {
		if j != nil && j.real == real {
			rank = i // the same process joining again
		}
	}
	if rank == ctrl.RankAny {
		for i, j := range r.joiners {
			if j == nil {
				rank = i
				break
			}
		}
	}
	if rank < 0 || rank >= r.size {
		s.reply(d.Peer, &d.Header, wire.StatusBusy, ctrl.JoinBusyNoRank)
		return
	}
	if j := r.joiners[rank]; j != nil && j.real != real {
		// Two processes with one rank: tell the second who holds it (a
		// JOIN response of group 0 whose one member is the holder).
		s.stats.ControlRefused++
		s.respond(d, &ctrl.Msg{Type: m.Type, Resp: true, Member: uint16(rank), Members: []ctrl.MemberInfo{{ID: uint16(rank), Addr: j.real}}})
		return
	}
	if r.joiners[rank] == nil {
		r.count++
		r.joined[rank/8] |= 1 << (rank % 8)
	}
	r.joiners[rank] = &joiner{peer: d.Peer, msgID: d.Header.MsgID, real: real, via: via}
	if r.count < r.size {
		return
	}
	s.formGroup(now, m.Job, r)
}

// formGroup makes the group of job, whose rendezvous r is complete, and
// answers every joiner.
func (s *Switch) formGroup(now time.Time, job string, r *rendezvous) {
	delete(s.jobs, job)
	g := s.newGroup(job, false, r.size, now)
	for i, j := range r.joiners {
		mem := &member{id: uint16(i), addr: j.peer.Addr, alive: true, lastSeen: s.heard}
		if j.via {
			p := s.addPort(g, j.peer.Addr)
			mem.addr, mem.real, mem.via = p.addr, j.real, p
		}
		s.attach(g, mem)
	}
	s.logEvent(Event{Kind: EventJobJoined, Job: g.name, Group: g.id, Size: r.size})
	t := g.table()
	for i, j := range r.joiners {
		typ := ctrl.Join
		if j.via {
			typ = ctrl.JoinVia
		}
		s.respondTo(j.peer, j.msgID, &ctrl.Msg{Type: typ, Resp: true, Group: g.id, Member: uint16(i), Members: t, Epoch: g.epoch})
	}
}

// byReal returns g's member whose own address is real (nil: none).
func (g *group) byReal(real netip.AddrPort) *member {
	if m := g.byAddr[real]; m != nil {
		return m
	}
	for _, m := range g.members {
		if m != nil && m.via != nil && m.real == real {
			return m
		}
	}
	return nil
}

// dropRendezvous forgets a job whose ranks did not all join in time and
// answers the ranks still waiting with StatusBusy (they may try again).
func (s *Switch) dropRendezvous(name string, r *rendezvous) {
	delete(s.jobs, name)
	for _, j := range r.joiners {
		if j != nil {
			h := wire.Header{Op: wire.OpControl, MsgID: j.msgID}
			s.reply(j.peer, &h, wire.StatusBusy, ctrl.JoinBusyExpired)
		}
	}
	s.stats.RendezvousExpired++
}

func (s *Switch) newGroup(name string, service bool, size int, now time.Time) *group {
	id := s.nextID
	s.nextID++
	for s.groups[id] != nil || id == 0 {
		id = s.nextID
		s.nextID++
	}
	return s.newGroupID(id, name, service, size, now)
}

// newGroupID makes group id (one the root of a tree gave).
func (s *Switch) newGroupID(id uint32, name string, service bool, size int, now time.Time) *group {
	g := &group{id: id, name: name, service: service, members: make([]*member, size),
		byAddr: make(map[netip.AddrPort]*member), created: now}
	s.groups[id] = g
	s.names[name] = id
	s.eng.SetLocal(id, wire.MemberAll)
	return g
}

// register adds a server to an anycast service group, creating the group
// (with its policy, size and ownership table) on first registration.
func (s *Switch) register(now time.Time, d *transport.Delivery, m *ctrl.Msg) {
	if s.idents != nil {
		// Only the credentials of a service's scope serve it: another
		// would answer its clients' requests.
		if c, _ := s.idents(d.Peer.Addr); !ServiceMay(c.Name, m.Service) {
			s.stats.ControlRefused++
			s.stats.NameRefused++
			s.reply(d.Peer, &d.Header, wire.StatusAuth, ctrl.AuthNameRefused)
			return
		}
	}
	var g *group
	if id, ok := s.names[m.Service]; ok {
		g = s.groups[id]
		if g == nil || !g.service {
			s.reply(d.Peer, &d.Header, wire.StatusBusy, 0)
			return
		}
	} else {
		if len(s.groups)+len(s.jobs) >= s.cfg.MaxGroups {
			s.reply(d.Peer, &d.Header, wire.StatusBusy, 0)
			return
		}
		sel, err := NewSelector(ctrl.Policy(m.Policy), m.Size, toRanges(m.Ranges))
		if err != nil {
			s.reply(d.Peer, &d.Header, wire.StatusBadOperand, 0)
			return
		}
		for i := 0; i < m.Size; i++ {
			sel.SetAlive(i, false) // until each registers
		}
		g = s.newGroup(m.Service, true, m.Size, now)
		g.sel = sel
	}
	rank := m.Rank
	if mem := g.byAddr[d.Peer.Addr]; mem != nil {
		rank = int(mem.id)
	}
	if rank == ctrl.RankAny {
		for i, mem := range g.members {
			if mem == nil || !mem.alive {
				rank = i
				break
			}
		}
	}
	if rank < 0 || rank >= len(g.members) {
		s.reply(d.Peer, &d.Header, wire.StatusBusy, 0)
		return
	}
	if old := g.members[rank]; old != nil && old.alive && old.addr != d.Peer.Addr {
		s.reply(d.Peer, &d.Header, wire.StatusBusy, 0)
		return
	}
	if old := g.members[rank]; old != nil {
		delete(g.byAddr, old.addr)
		if old.alive {
			s.removeMember(old)
		}
	}
	mem := &member{id: uint16(rank), addr: d.Peer.Addr, alive: true, lastSeen: s.heard}
	g.members[rank] = mem
	g.byAddr[mem.addr] = mem
	s.addMember(mem)
	g.undead(mem.id) // a rank registered again is not dead
	g.epoch++
	g.sel.SetAlive(rank, true)
	s.respond(d, &ctrl.Msg{Type: ctrl.Register, Resp: true, Group: g.id, Member: mem.id})
}

func toRanges(cr []ctrl.Range) []ctrl.KeyRange {
	if len(cr) == 0 {
		return nil
	}
	out := make([]ctrl.KeyRange, len(cr))
	for i, r := range cr {
		reps := make([]int, len(r.Replicas))
		for j, x := range r.Replicas {
			reps[j] = int(x)
		}
		out[i] = ctrl.KeyRange{Start: r.Start, End: r.End, Owner: int(r.Owner), Replicas: reps}
	}
	return out
}
