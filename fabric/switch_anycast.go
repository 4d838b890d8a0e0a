package fabric

import (
	"errors"
	"net/netip"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Anycast at the switch: a request is relayed to the member the group's
// Selector picks, and the member's reply back to the client.
//
// The forwarding state of a request (anyFwd, anyIn) is bounded by
// MaxAnycast in all and MaxAnycastPerClient per client address, and lives
// until the member's reply has been relayed, the member dies, the group
// goes, or AnycastTimeout passes — then the client is told and the
// member's outstanding count is given back.

type anyKey struct {
	peer  transport.PeerID
	msgID uint64
}

type anyReq struct {
	id        uint64 // the id the request carries to the member
	client    transport.PeerID
	clientMsg uint64
	group     *group
	member    int
	in        anyKey
	deadline  time.Time
	queued    bool
	// caller is the tag of the client's certified scope
	// (secure.CallerTag; 0 on a switch without identities), written
	// into the Key of every fragment relayed to the member.
	caller uint64
	// relayed counts the request's bytes sent on to the member, of msgLen.
	relayed, msgLen uint32
	// the queue of requests in flight, oldest first
	older, newer *anyReq
}

// anyGone remembers, for anyGoneLife, the requests whose relay ended
// before the whole request had come in (the member refused it early, or
// the request failed): the fragments still on their way, which the
// client's transport delivers all the same, are dropped instead of
// opening a relay of their own that would never complete. At most
// anyGoneMax entries, the oldest forgotten first; O(1) per operation.
type anyGone struct {
	at   map[anyKey]time.Time
	ring []anyKey // anyGoneMax, made on first use
	head int      // oldest entry
	n    int
}

const (
	anyGoneMax  = 4096
	anyGoneLife = 10 * time.Second // beyond any client's transport DeadTimeout
)

func (g *anyGone) add(k anyKey, now time.Time) {
	if g.at == nil {
		g.at = make(map[anyKey]time.Time)
		g.ring = make([]anyKey, anyGoneMax)
	}
	for g.n > 0 && (g.n == anyGoneMax || now.Sub(g.at[g.ring[g.head]]) > anyGoneLife) {
		delete(g.at, g.ring[g.head])
		g.head = (g.head + 1) % anyGoneMax
		g.n--
	}
	if _, ok := g.at[k]; ok {
		return
	}
	g.at[k] = now
	g.ring[(g.head+g.n)%anyGoneMax] = k
	g.n++
}

// has reports whether k's relay ended less than anyGoneLife ago.
func (g *anyGone) has(k anyKey, now time.Time) bool {
	at, ok := g.at[k]
	return ok && now.Sub(at) <= anyGoneLife
}

// anyQueue orders the requests in flight by deadline (they all live
// AnycastTimeout, so that is creation order) and counts them per client
// address.
type anyQueue struct {
	oldest, newest *anyReq
	perClient      map[netip.AddrPort]int
}

func (q *anyQueue) push(r *anyReq) {
	if q.perClient == nil {
		q.perClient = make(map[netip.AddrPort]int)
	}
	q.perClient[r.client.Addr]++
	r.queued = true
	r.older, r.newer = q.newest, nil
	if q.newest != nil {
		q.newest.newer = r
	} else {
		q.oldest = r
	}
	q.newest = r
}

func (q *anyQueue) remove(r *anyReq) {
	if !r.queued {
		return
	}
	r.queued = false
	if r.older != nil {
		r.older.newer = r.newer
	} else if q.oldest == r {
		q.oldest = r.newer
	}
	if r.newer != nil {
		r.newer.older = r.older
	} else if q.newest == r {
		q.newest = r.older
	}
	r.older, r.newer = nil, nil
	if n := q.perClient[r.client.Addr] - 1; n > 0 {
		q.perClient[r.client.Addr] = n
	} else {
		delete(q.perClient, r.client.Addr)
	}
}

func (q *anyQueue) nextExpiry() time.Time {
	if q.oldest == nil {
		return time.Time{}
	}
	return q.oldest.deadline
}

// anyBacklog is the share of a peer's queue (transport MaxPeerMessages)
// beyond which the switch holds back the other end of the relays that
// feed it: 1/anyBacklog.
const anyBacklog = 4

// congested reports whether the switch's queue toward to is long enough
// to hold back what would add to it.
func (s *Switch) congested(to transport.PeerID) bool {
	return s.eng.PeerMessages(to) >= max(s.eng.MaxPeerMessages()/anyBacklog, 1)
}

// anyMember is the switch's anycast stream to member m of group g.
func anyMember(g *group, m *member) transport.PeerID {
	return transport.PeerID{Addr: m.addr, Group: g.id, Member: m.id, Mode: wire.ModeAnycast}
}

// admitAnycast is called by the engine before an anycast fragment counts
// as received. While the switch's queue toward the relay's other end
// (the member a request goes to, the client a reply goes to) is long,
// the fragment is refused: not acknowledged, so that its sender resends
// it later and its congestion control slows it down, as a full port
// buffer would — instead of relaying it into a queue that overflows and
// fails the request. The first fragment of a new request picks its
// member here (anyPick), so that it waits for the member it will go to.
// O(1) per fragment.
func (s *Switch) admitAnycast(d *transport.Delivery) bool {
	h := &d.Header
	g := s.groups[h.Group]
	if g == nil || !g.service || g.sel == nil {
		return true // anycast answers it
	}
	if h.Flags&wire.FlagResp != 0 {
		if r := s.anyFwd[h.MsgID]; r != nil && s.congested(r.client) {
			s.stats.AnycastHeld++
			return false
		}
		return true
	}
	k := anyKey{d.Peer, h.MsgID}
	if id, ok := s.anyIn[k]; ok {
		if r := s.anyFwd[id]; r != nil {
			if m := g.member(uint16(r.member)); m != nil && s.congested(anyMember(g, m)) {
				s.stats.AnycastHeld++
				return false
			}
		}
		return true
	}
	if s.anyGone.has(k, s.now) {
		return true // anycast drops it
	}
	if len(s.anyFwd) >= s.cfg.MaxAnycast || s.anyQ.perClient[d.Peer.Addr] >= s.cfg.MaxAnycastPerClient {
		return true // anycast refuses it
	}
	mem, err := g.sel.Pick(h.Addr)
	if err != nil {
		return true // anycast answers it
	}
	if m := g.member(uint16(mem)); m != nil && s.congested(anyMember(g, m)) {
		g.sel.Done(mem)
		s.stats.AnycastHeld++
		return false
	}
	s.anyPick.valid, s.anyPick.in, s.anyPick.group, s.anyPick.member = true, k, g.id, mem
	return true
}

// anycast forwards a request fragment to its pinned member, or a member's
// reply fragment back to the client.
func (s *Switch) anycast(now time.Time, d *transport.Delivery) {
	h := &d.Header
	pick := s.anyPick
	s.anyPick.valid = false
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
			// The client cannot take it (its queue at the switch is full,
			// or the fragment too large for it): the request fails.
			s.stats.ForwardDropped++
			s.failAnycast(r.id, r, sendStatus(err))
			return
		}
		s.stats.AnycastOut++
		if d.MsgDone {
			s.dropAnycast(r)
		}
		return
	}
	k := anyKey{d.Peer, h.MsgID}
	id, ok := s.anyIn[k]
	var r *anyReq
	if ok {
		r = s.anyFwd[id]
	}
	picked := pick.valid && pick.in == k && pick.group == g.id && r == nil
	mem := pick.member
	if pick.valid && !picked {
		// Picked for a fragment that turned out not to start a request:
		// given back.
		if pg := s.groups[pick.group]; pg != nil && pg.sel != nil {
			pg.sel.Done(pick.member)
		}
	}
	if r == nil && s.anyGone.has(k, now) {
		// The rest of a request whose relay already ended.
		if picked {
			g.sel.Done(mem)
		}
		s.stats.AnycastStale++
		return
	}
	if r == nil {
		if len(s.anyFwd) >= s.cfg.MaxAnycast || s.anyQ.perClient[d.Peer.Addr] >= s.cfg.MaxAnycastPerClient {
			if picked {
				g.sel.Done(mem)
			}
			s.stats.AnycastRefused++
			s.reply(d.Peer, h, wire.StatusBusy, 0)
			return
		}
		var err error
		if !picked {
			mem, err = g.sel.Pick(h.Addr)
		}
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
		r = &anyReq{id: id, client: d.Peer, clientMsg: h.MsgID, group: g, member: mem, in: k,
			deadline: now.Add(s.cfg.AnycastTimeout), msgLen: h.MsgLen}
		if s.idents != nil {
			if c, ok := s.idents(d.Peer.Addr); ok {
				r.caller = secure.CallerTag(c.Role, c.Name)
			}
		}
		s.anyFwd[id] = r
		s.anyIn[k] = id
		s.anyQ.push(r)
	}
	m := g.member(uint16(r.member))
	if m == nil || !m.alive {
		s.failAnycast(id, r, wire.StatusMemberDead)
		return
	}
	out := *h
	out.MsgID = id
	// The member learns who asks from the switch alone: whatever Key the
	// client wrote is replaced.
	out.Key = r.caller
	buf := append([]byte(nil), d.Payload...)
	if _, err := s.eng.SendFragment(anyMember(g, m), &out, buf, 0); err != nil {
		s.stats.ForwardDropped++
		s.failAnycast(id, r, sendStatus(err))
		return
	}
	r.relayed += uint32(len(buf))
	s.stats.AnycastOut++
}

// sendStatus is the status that tells a peer why the switch could not
// send something on its behalf: TOO_LARGE for a fragment the far end's
// stream cannot take, BUSY for a full send queue.
func sendStatus(err error) wire.Status {
	if errors.Is(err, transport.ErrFragment) || errors.Is(err, transport.ErrTooLarge) {
		return wire.StatusTooLarge
	}
	return wire.StatusBusy
}

// failAnycast ends request id with status st to its client (Operand1 =
// the member it was sent to).
func (s *Switch) failAnycast(id uint64, r *anyReq, st wire.Status) {
	h := wire.Header{Op: wire.OpData, MsgID: r.clientMsg}
	s.reply(r.client, &h, st, uint64(r.member))
	s.dropAnycast(r)
}

// dropAnycast forgets a request: its member has one request less
// outstanding.
func (s *Switch) dropAnycast(r *anyReq) {
	if s.anyFwd[r.id] == r {
		r.group.sel.Done(r.member)
		delete(s.anyFwd, r.id)
		delete(s.anyIn, r.in)
		if r.relayed < r.msgLen {
			s.anyGone.add(r.in, s.now)
		}
	}
	s.anyQ.remove(r)
}

// expireAnycast fails the requests whose member has not replied within
// AnycastTimeout: the client gets StatusBusy. O(1) per request expired.
func (s *Switch) expireAnycast(now time.Time) {
	for r := s.anyQ.oldest; r != nil && !now.Before(r.deadline); r = s.anyQ.oldest {
		s.stats.AnycastExpired++
		s.failAnycast(r.id, r, wire.StatusBusy)
	}
}
