package fabric

import (
	"errors"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Anycast at the switch: a request is relayed to the member the group's
// Selector picks, and the member's reply back to the client.

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

func (s *Switch) failAnycast(id uint64, r *anyReq, st wire.Status) {
	h := wire.Header{Op: wire.OpData, MsgID: r.clientMsg}
	s.reply(r.client, &h, st, uint64(r.member))
	r.group.sel.Done(r.member)
	delete(s.anyFwd, id)
	delete(s.anyIn, r.in)
}
