package endpoint

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Group operations through a forwarding node (package fabric): multicast
// send and receive, aggregation, anycast requests and serving them, and
// the switch's events.

// MemberError reports that a group member died or left while an operation
// needed it. errors.Is(err, wire.StatusMemberDead) is true.
type MemberError struct {
	Group  uint32
	Member uint16
	Left   bool // the member left on its own (Leave), rather than dying
}

func (e *MemberError) Error() string {
	how := "died"
	if e.Left {
		how = "left"
	}
	return fmt.Sprintf("endpoint: group %d member %d %s", e.Group, e.Member, how)
}

// Unwrap makes errors.Is(err, wire.StatusMemberDead) true.
func (e *MemberError) Unwrap() error { return wire.StatusMemberDead }

// gopKey identifies a group op: a multicast send or an aggregation by
// (group, kind, message id), a receive by (group, sender, message id).
type gopKey struct {
	group  uint32
	kind   Kind
	member uint16
	id     uint64
}

// unexpected is a message (multicast or two-sided) that arrived, or began
// to, before its receive was posted. Its reassembly keeps the fragments
// that came, not a buffer of the message's size: a receive is usually
// posted a little after the first fragments of a large message arrive,
// and a whole-size buffer cost a 16 MiB allocation (page faults, GC) and a
// 16 MiB copy per such message for a few fragments (35% of a receiver's
// CPU in a 16 MiB in-network Bcast on the testbed).
type unexpected struct {
	asm      reassembly
	size     int  // what it holds of MaxUnexpected: its length
	stranger bool // from a source with no established stream or group
	broken   bool // a fragment was refused: its receive fails with ErrBadFragment
	last     time.Time
}

// unexpKey identifies an unexpected multicast: the address it came from
// (the switch, for a genuine one) and the receive it waits for.
type unexpKey struct {
	from netip.AddrPort
	k    gopKey
}

// unexpUse is what buffered unexpected messages hold of the bounds.
type unexpUse struct{ bytes, msgs int }

// newUnexpected charges a new unexpected message (first fragment h) to
// the bounds; admission (roomUnexpected) checked that it fits.
func (c *Core) newUnexpected(h *wire.Header, stranger bool) *unexpected {
	u := &unexpected{size: int(h.MsgLen), stranger: stranger}
	u.asm.start(u.size, nil)
	c.charge(u, 1)
	return u
}

// release gives an unexpected message's share of the bounds back.
func (c *Core) release(u *unexpected) { c.charge(u, -1) }

func (c *Core) charge(u *unexpected, sign int) {
	c.unexpUse[0].bytes += sign * u.size
	c.unexpUse[0].msgs += sign
	if u.stranger {
		c.unexpUse[1].bytes += sign * u.size
		c.unexpUse[1].msgs += sign
	}
}

// placeUnexpected keeps one fragment of an unexpected message.
func (c *Core) placeUnexpected(u *unexpected, d *transport.Delivery) {
	u.last = c.now
	if u.broken {
		c.stats.FragmentsDropped++
		return
	}
	done, err := u.asm.place(&d.Header, d.Payload)
	if err != nil {
		c.stats.FragmentsRefused++
	}
	if !done && u.asm.Broken(d.MsgDone) {
		u.broken = true
		u.asm = reassembly{} // what it kept is of no use
	}
}

// takeUnexpected hands an unexpected message (already out of its table)
// to the receive op, whose buffer buf it fits: what arrived is copied
// there, and later fragments land there directly.
func (c *Core) takeUnexpected(op *Op, u *unexpected, buf []byte) {
	if u.broken {
		op.fail(ErrBadFragment)
		c.finish(op)
		return
	}
	op.asm = u.asm
	op.asm.MoveTo(buf)
	if op.asm.Complete() {
		c.finish(op)
	}
}

// placeFrag places one fragment of the message op receives and reports
// whether the message is complete. A contradicting fragment is dropped;
// a message that can no longer complete fails op with ErrBadFragment.
func (c *Core) placeFrag(op *Op, d *transport.Delivery) bool {
	done, err := op.asm.place(&d.Header, d.Payload)
	if err != nil {
		c.stats.FragmentsRefused++
	}
	if !done && op.asm.Broken(d.MsgDone) {
		op.fail(ErrBadFragment)
		c.finish(op)
	}
	return done
}

// roomUnexpected reports whether a new unexpected message of n bytes fits
// the bounds (Config.MaxUnexpected, MaxUnexpectedMsgs; a quarter of each
// for strangers). When it does not, partial messages idle for the dead
// timeout are forgotten first (a batch at a time, see sweepDue).
func (c *Core) roomUnexpected(n int, stranger bool) bool {
	if c.fitsUnexpected(n, stranger) {
		return true
	}
	if !c.sweepDue(c.now, &c.unexpSweep) {
		return false
	}
	idle, n := c.deadTimeout(), 0
	stale := func(u *unexpected) bool { return !u.asm.Complete() && !u.broken && c.now.Sub(u.last) > idle }
	for k, u := range c.unexp {
		if n++; n > sweepBatch/2 {
			break
		}
		if stale(u) {
			delete(c.unexp, k)
			c.release(u)
		}
	}
	n = 0
	for k, u := range c.unexpMsg {
		if n++; n > sweepBatch/2 {
			break
		}
		if stale(u) {
			delete(c.unexpMsg, k)
			c.release(u)
		}
	}
	return c.fitsUnexpected(n, stranger)
}

func (c *Core) fitsUnexpected(n int, stranger bool) bool {
	all, st := c.unexpUse[0], c.unexpUse[1]
	if all.bytes+n > c.cfg.MaxUnexpected || all.msgs >= c.cfg.MaxUnexpectedMsgs {
		return false
	}
	return !stranger || (st.bytes+n <= c.cfg.MaxUnexpected/4 && st.msgs < c.cfg.MaxUnexpectedMsgs/4)
}

// Request is an anycast request delivered to this endpoint as a member of
// a service group. Reply to it with Core.Reply (or return from the
// Endpoint's handler).
type Request struct {
	Group    uint32
	Key      uint64 // the request's affinity key (header Addr)
	Caller   Caller // who asks, as the switch certified it (header Key)
	Data     []byte
	msgID    uint64
	peer     transport.PeerID
	asm      reassembly
	last     time.Time
	answered bool
}

func (c *Core) initGroups() {
	c.gops = make(map[gopKey]*Op)
	c.joined = make(map[uint32]uint16)
	c.unexp = make(map[unexpKey]*unexpected)
	c.anyIn = make(map[inKey]*Request)
	c.mcSeq = make(map[uint32]uint64)
	c.aggSeq = make(map[uint32]uint64)
	c.rxSeq = make(map[gopKey]uint64)
	c.rxWhole = make(map[gopKey]uint64)
	c.deadMembers = make(map[gopKey]*MemberError)
	c.brokenGroups = make(map[uint32]*MemberError)
	c.admitFn = c.admit
}

// SetMember records this endpoint's member id in a group. Multicasts,
// events and anycast requests are taken only for groups set here (a
// group's unexpected multicasts from elsewhere count as a stranger's).
func (c *Core) SetMember(group uint32, member uint16) {
	c.eng.SetLocal(group, member)
	c.joined[group] = member
	for k, u := range c.unexp {
		// Multicasts that came whole before the join was complete here.
		if k.k.group == group && k.k.kind == KindRecv && !u.broken && u.asm.Complete() && k.k.id > c.rxWhole[rxKey(group, k.k.member)] {
			c.rxWhole[rxKey(group, k.k.member)] = k.k.id
		}
	}
}

// SetGroupSwitch names the forwarding node of a group set with
// SetMember: from then on the group's datagrams (multicasts, results,
// anycast requests, events) are taken only from that address, before
// they cost any state; others are dropped and counted in
// Stats.ForeignGroup. Without it they are taken from any address.
func (c *Core) SetGroupSwitch(group uint32, sw netip.AddrPort) {
	if c.groupSw == nil {
		c.groupSw = make(map[uint32]netip.AddrPort)
		c.swHeard = make(map[netip.AddrPort]time.Time)
	}
	c.groupSw[group] = sw
	if _, ok := c.swHeard[sw]; !ok {
		c.swHeard[sw] = time.Time{}
	}
}

// forgetSwitchHeard drops sw's entry in swHeard once no group names it.
func (c *Core) forgetSwitchHeard(sw netip.AddrPort) {
	for _, s := range c.groupSw {
		if s == sw {
			return
		}
	}
	delete(c.swHeard, sw)
}

// switchHeard is when a datagram last came from sw, a forwarding node
// named with SetGroupSwitch (whatever it carried: an answer, data, an
// acknowledgement), zero if none did: a switch that sends is alive,
// however late its answers to heartbeats come.
func (c *Core) switchHeard(sw netip.AddrPort) time.Time { return c.swHeard[sw] }

// LeaveGroup forgets group once this endpoint has left it (or closed its
// service), after the group's operations completed: its sequence numbers,
// the members it was told died, and the multicasts buffered for it that
// no receive took. Later traffic for the group is refused.
func (c *Core) LeaveGroup(group uint32) {
	if sw, ok := c.groupSw[group]; ok {
		// The switch forgets its side of the group's streams with this
		// member when it leaves (or dies): so does the member, or a
		// later member of the same group id would find the old ones.
		c.eng.ForgetGroup(sw, group, nil)
		delete(c.groupSw, group)
		c.forgetSwitchHeard(sw)
	}
	delete(c.joined, group)
	c.eng.ClearLocal(group)
	delete(c.mcSeq, group)
	delete(c.aggSeq, group)
	for k := range c.rxSeq {
		if k.group == group {
			delete(c.rxSeq, k)
		}
	}
	for k := range c.rxWhole {
		if k.group == group {
			delete(c.rxWhole, k)
		}
	}
	for k := range c.deadMembers {
		if k.group == group {
			delete(c.deadMembers, k)
		}
	}
	delete(c.brokenGroups, group)
	for k, u := range c.unexp {
		if k.k.group == group {
			delete(c.unexp, k)
			c.release(u)
		}
	}
}

// EnableGroups lets the core accept streams from a forwarding node
// (multicast, aggregation, anycast). Memory nodes leave it off.
func (c *Core) EnableGroups() { c.eng.SetGroupModes(true) }

// postGroup starts a multicast send, a receive or an aggregation.
func (c *Core) postGroup(now time.Time, op *Op) error {
	if !op.sw.IsValid() {
		op.sw = op.Peer
	}
	switch op.Kind {
	case KindMulticast:
		c.mcSeq[op.Group]++
		id := c.mcSeq[op.Group]
		h := wire.Header{Op: wire.OpData}
		h.MsgID = id
		to := transport.PeerID{Addr: op.sw, Group: op.Group, Member: wire.MemberAll, Mode: wire.ModeMulticast}
		eager := op.Eager && len(op.Buf) <= EagerMulticastMax && c.eng.PeerMessages(to) < eagerBacklog
		payload, token := op.Buf, uint64(0)
		if eager {
			payload, token = bytes.Clone(op.Buf), eagerToken
		}
		if _, err := c.eng.Send(to, &h, payload, token); err != nil {
			c.mcSeq[op.Group]--
			return err
		}
		op.msgID = id
		if eager {
			// The transport delivers its copy; the caller's buffer is
			// free, and the op is done.
			c.eagerOut++
			c.start(now, op)
			c.complete(op)
			return nil
		}
		op.gkey = gopKey{op.Group, KindMulticast, 0, id}
	case KindRecv:
		k := rxKey(op.Group, op.From)
		c.rxSeq[k]++
		id := c.rxSeq[k]
		op.msgID = id
		op.gkey = gopKey{op.Group, KindRecv, op.From, id}
		c.start(now, op)
		c.gops[op.gkey] = op
		uk := unexpKey{op.sw, op.gkey}
		if u := c.unexp[uk]; u != nil {
			// It (or its beginning) arrived before the receive was posted:
			// take what is there; later fragments land in op.Buf directly.
			delete(c.unexp, uk)
			c.release(u)
			buf, ok := op.recvBuf(u.size)
			if !ok {
				op.fail(fmt.Errorf("%w: multicast of %d bytes for a %d-byte buffer", ErrShortRead, u.size, len(op.Buf)))
				c.finish(op)
				return nil
			}
			c.takeUnexpected(op, u, buf)
		}
		return nil
	case KindAggregate:
		c.aggSeq[op.Group]++
		id := c.aggSeq[op.Group]
		es := op.Dtype.Size()
		if es == 0 || len(op.Buf)%es != 0 || (op.Recv != nil && len(op.Recv) != len(op.Buf)) {
			c.aggSeq[op.Group]--
			return fmt.Errorf("%w: aggregation of %d bytes of %v into %d", ErrBadOp, len(op.Buf), op.Dtype, len(op.Recv))
		}
		h := wire.Header{Op: wire.OpData, MsgID: id, Dtype: op.Dtype, Alu: op.Alu}
		if op.Root >= 0 {
			h.Operand1 = uint64(op.Root) + 1
		}
		if op.Deterministic {
			h.Operand2 = 1
		}
		to := transport.PeerID{Addr: op.sw, Group: op.Group, Member: wire.MemberAll, Mode: wire.ModeAggregate}
		if _, err := c.eng.Send(to, &h, op.Buf, 0); err != nil {
			c.aggSeq[op.Group]--
			return err
		}
		op.msgID = id
		op.gkey = gopKey{op.Group, KindAggregate, 0, id}
	}
	c.start(now, op)
	c.gops[op.gkey] = op
	return nil
}

func rxKey(g uint32, from uint16) gopKey { return gopKey{group: g, kind: KindRecv, member: from} }

func (c *Core) finishGroup(op *Op) {
	delete(c.gops, op.gkey)
	op.finished = true
	if op.Kind == KindRecvMsg {
		c.finishRecvMsg(op)
	}
	if op.Err == nil {
		c.stats.OpsOK++
	} else {
		c.stats.OpsFailed++
		switch op.Kind {
		case KindMulticast:
			c.eng.Abandon(transport.PeerID{Addr: op.sw, Group: op.Group, Member: wire.MemberAll, Mode: wire.ModeMulticast}, op.msgID)
		case KindAggregate:
			c.eng.Abandon(transport.PeerID{Addr: op.sw, Group: op.Group, Member: wire.MemberAll, Mode: wire.ModeAggregate}, op.msgID)
		}
	}
	c.done = append(c.done, op)
}

// admit decides, before a data packet counts as received, whether the
// core has room for what it starts: a message nobody has posted a receive
// for (within the unexpected bounds), a multi-packet request. Refused
// packets are not acknowledged; their sender resends them.
func (c *Core) admit(d *transport.Delivery) bool {
	h := &d.Header
	switch {
	case h.Flags&wire.FlagResp != 0:
		return true
	case h.Mode == wire.ModeUnicast && h.Op == wire.OpSend:
		return c.admitMsg(h, d.Peer.Addr)
	case h.Mode == wire.ModeUnicast && h.Op != wire.OpEvent:
		return c.mem.Admit(d)
	case h.Mode == wire.ModeMulticast && h.Op == wire.OpData:
		k := gopKey{h.Group, KindRecv, h.Src, h.MsgID}
		if c.gops[k] != nil || c.unexp[unexpKey{d.Peer.Addr, k}] != nil || h.MsgID <= c.rxSeq[rxKey(h.Group, h.Src)] {
			return true
		}
		_, member := c.joined[h.Group]
		return c.roomUnexpected(int(h.MsgLen), !member)
	}
	return true
}

// onGroup handles deliveries of group streams and switch events.
func (c *Core) onGroup(d *transport.Delivery) {
	h := &d.Header
	switch {
	case h.Op == wire.OpEvent:
		c.onEvent(h)
	case h.Mode == wire.ModeMulticast && h.Op == wire.OpData:
		c.onMulticast(d)
	case h.Mode == wire.ModeAggregate && h.Op == wire.OpData:
		op := c.gops[gopKey{h.Group, KindAggregate, 0, h.MsgID}]
		if op == nil || op.Recv == nil || op.sw != d.Peer.Addr {
			c.stats.UnmatchedResponses++
			return
		}
		if !c.startInto(op, op.Recv, h, "aggregation result") {
			return
		}
		if c.placeFrag(op, d) {
			c.eng.Delivered(transport.PeerID{Addr: op.sw, Group: op.Group, Member: wire.MemberAll, Mode: wire.ModeAggregate}, op.msgID)
			c.finish(op)
		}
	case h.Mode == wire.ModeAnycast && h.Flags&wire.FlagResp != 0:
		c.onResponse(d)
	case h.Mode == wire.ModeAnycast:
		c.onAnycastRequest(d)
	default:
		c.stats.UnmatchedResponses++
	}
}

// startInto opens op's reassembly into buf at the first fragment (header
// h) of the message op receives: the message must be exactly len(buf)
// bytes, or op fails with ErrShortRead and startInto reports false.
func (c *Core) startInto(op *Op, buf []byte, h *wire.Header, what string) bool {
	if op.asm.Started() {
		return true
	}
	if int(h.MsgLen) != len(buf) {
		op.fail(fmt.Errorf("%w: %s of %d bytes for a %d-byte buffer", ErrShortRead, what, h.MsgLen, len(buf)))
		c.finish(op)
		return false
	}
	op.asm.start(len(buf), buf)
	return true
}

func (c *Core) onMulticast(d *transport.Delivery) {
	h := &d.Header
	k := gopKey{h.Group, KindRecv, h.Src, h.MsgID}
	if op := c.gops[k]; op != nil && op.sw == d.Peer.Addr {
		buf := op.Buf
		if b, ok := op.recvBuf(int(h.MsgLen)); ok && !op.asm.Started() {
			buf = b
		}
		if c.startInto(op, buf, h, "multicast") && c.placeFrag(op, d) {
			c.wholeAt(h)
			c.finish(op)
		}
		return
	}
	if h.MsgID <= c.rxSeq[rxKey(h.Group, h.Src)] {
		// Its receive was posted and has ended (failed or canceled), or
		// it does not come from the switch the receive expects.
		c.stats.FragmentsDropped++
		return
	}
	uk := unexpKey{d.Peer.Addr, k}
	u := c.unexp[uk]
	if u == nil {
		_, member := c.joined[h.Group]
		u = c.newUnexpected(h, !member)
		c.unexp[uk] = u
	}
	c.placeUnexpected(u, d)
	if !u.broken && u.asm.Complete() {
		c.wholeAt(h)
	}
}

// wholeAt records that multicast h.MsgID of h.Group from h.Src is here
// whole (see Group.Arrived).
func (c *Core) wholeAt(h *wire.Header) {
	if _, member := c.joined[h.Group]; !member {
		return // a stranger's: its entry would outlive every leave
	}
	k := rxKey(h.Group, h.Src)
	if h.MsgID > c.rxWhole[k] {
		c.rxWhole[k] = h.MsgID
	}
}

// received is the id of the latest multicast from member from of group
// that arrived here whole, and the id of the latest a receive was posted
// for. Caller holds the endpoint's lock.
func (c *Core) received(group uint32, from uint16) (whole, taken uint64) {
	k := rxKey(group, from)
	return c.rxWhole[k], c.rxSeq[k]
}

// recvBuf is the part of a multicast receive's buffer that a message of n
// bytes fills, and whether it fits: all of Buf, or with AtMost its first
// n bytes (N is then set to n).
func (op *Op) recvBuf(n int) ([]byte, bool) {
	if !op.AtMost {
		return op.Buf, n == len(op.Buf)
	}
	if n < 0 || n > len(op.Buf) {
		return op.Buf, false
	}
	op.N = n
	return op.Buf[:n], true
}

// arrived reports whether the next multicast from member from of group
// (through the switch at sw) is here whole, so that a receive posted now
// completes at once. Caller holds the endpoint's lock.
func (c *Core) arrived(sw netip.AddrPort, group uint32, from uint16) bool {
	id := c.rxSeq[rxKey(group, from)] + 1
	u := c.unexp[unexpKey{sw, gopKey{group, KindRecv, from, id}}]
	return u != nil && (u.broken || u.asm.Complete())
}

// onEvent handles a switch notification.
func (c *Core) onEvent(h *wire.Header) {
	if _, ok := c.joined[h.Group]; !ok {
		c.stats.FragmentsDropped++
		return
	}
	if h.Flags&wire.FlagResp != 0 {
		// The refusal of one aggregation (Operand2 = its id); a dead
		// member is named in Operand1.
		if op := c.gops[gopKey{h.Group, KindAggregate, 0, h.Operand2}]; op != nil {
			var err error = h.Status
			switch h.Status {
			case wire.StatusMemberDead:
				err = &MemberError{Group: h.Group, Member: uint16(h.Operand1)}
			case wire.StatusBadOperand:
				err = fmt.Errorf("%w: the switch refused the aggregation: the members' contributions differ (length, dtype, op or member count)", h.Status)
			}
			op.fail(err)
			c.finish(op)
		}
		return
	}
	if h.Status == wire.StatusMemberDead {
		c.memberDead(&MemberError{Group: h.Group, Member: uint16(h.Operand1), Left: h.Operand2 == 1})
	}
}

// memberDead fails the group ops that need the member: receives from it
// and, when it crashed (rather than left), aggregations and multicasts
// that did not ask to continue.
//
// Two-sided messages bound to the group (Op.Group set on a SendMsg or
// RecvMsg) are a collective's steps: when a member crashes, every rank's
// collective fails, and a rank waiting on another survivor would wait for
// a message that survivor no longer sends. So a crash breaks the group
// for them: every such op in flight fails with the crash's *MemberError,
// and so does every later one (until LeaveGroup). A member that left
// fails no two-sided op: it finished its part, and a message to or from
// it may still be in flight when the switch's notice arrives (the
// transport's dead timeout ends a send it never acknowledges).
func (c *Core) memberDead(me *MemberError) {
	c.deadMembers[gopKey{group: me.Group, member: me.Member}] = me
	if !me.Left && c.brokenGroups[me.Group] == nil {
		c.brokenGroups[me.Group] = me
	}
	for _, op := range c.gops {
		if op.Group != me.Group {
			continue
		}
		switch op.Kind {
		case KindRecv:
			if op.From != me.Member && !c.isSelf(me) {
				continue
			}
		case KindRecvMsg:
			// A member that left finished its part: what it sent may
			// still be on its way (its messages and the switch's notice
			// travel apart), so its leaving fails no receive.
			if me.Left {
				continue
			}
		case KindMulticast, KindAggregate:
			// A member that left did so after finishing its own part: the
			// switch no longer waits for it, so a multicast completes with
			// the others, and an aggregation it contributed to completes
			// too (one it did not is refused by the switch or times out).
			// Only a crash fails them, unless the caller asked to continue.
			if me.Left || (op.Kind == KindMulticast && op.Continue) {
				continue
			}
		}
		op.fail(me)
		c.finish(op)
	}
	// Two-sided sends to the member (those bound to the group).
	for _, id := range slices.Sorted(maps.Keys(c.ops)) {
		op := c.ops[id]
		if op.Kind == KindSendMsg && op.Group == me.Group && !me.Left {
			op.fail(me)
			c.finish(op)
		}
	}
}

// isSelf reports whether me names this endpoint's own membership: the
// switch counted it dead (its heartbeats did not arrive in time), so the
// other members gave up on it and none of its group's operations can
// complete.
func (c *Core) isSelf(me *MemberError) bool {
	self, ok := c.joined[me.Group]
	return ok && self == me.Member
}

// DeadMember reports whether the switch told us member m of group g died.
func (c *Core) DeadMember(g uint32, m uint16) *MemberError {
	return c.deadMembers[gopKey{group: g, member: m}]
}

// eagerRequest is the largest anycast request whose buffer is allocated
// on its first fragment; a larger one keeps copies of its fragments until
// it is complete, so that a first fragment declaring megabytes costs what
// its own bytes cost, not the allocation of (and the page faults for) the
// length it declares.
const eagerRequest = 64 << 10

// onAnycastRequest collects an anycast request addressed to this endpoint
// as a member of a service group.
func (c *Core) onAnycastRequest(d *transport.Delivery) {
	h := &d.Header
	k := inKey{d.Peer, h.MsgID}
	r := c.anyIn[k]
	if r == nil {
		if st := c.admitAnycast(h); st != wire.StatusOK {
			c.stats.RequestsRefused++
			rh := wire.Header{Op: wire.OpData, Flags: wire.FlagResp, MsgID: h.MsgID, Status: st}
			_, _ = c.eng.Send(d.Peer, &rh, nil, 0)
			return
		}
		r = &Request{Group: h.Group, Key: h.Addr, Caller: Caller(h.Key), msgID: h.MsgID, peer: d.Peer}
		if h.MsgLen <= eagerRequest {
			r.Data = make([]byte, h.MsgLen)
		}
		r.asm.start(int(h.MsgLen), r.Data)
		c.anyIn[k] = r
		c.anyInBytes += r.asm.length()
	}
	r.last = c.now
	done, err := r.asm.place(h, d.Payload)
	if err != nil {
		c.stats.FragmentsRefused++
	}
	switch {
	case done:
		delete(c.anyIn, k)
		c.anyInBytes -= r.asm.length()
		if r.Data == nil {
			r.Data = make([]byte, r.asm.length())
			r.asm.MoveTo(r.Data)
		}
		c.requests = append(c.requests, r)
		c.serving++
	case r.asm.Broken(d.MsgDone):
		delete(c.anyIn, k)
		c.anyInBytes -= r.asm.length()
		c.stats.RequestsRefused++
		rh := wire.Header{Op: wire.OpData, Flags: wire.FlagResp, MsgID: h.MsgID, Status: wire.StatusBadOperand}
		_, _ = c.eng.Send(d.Peer, &rh, nil, 0)
	}
}

// admitAnycast decides on a new anycast request (first fragment h): it
// must name a group this core is a member of and fit MaxResponse,
// MaxIncoming and MaxIncomingBytes (after forgetting partial requests
// idle for the dead timeout, a batch at a time: see sweepDue).
func (c *Core) admitAnycast(h *wire.Header) wire.Status {
	if _, ok := c.joined[h.Group]; !ok {
		return wire.StatusNotMember
	}
	if int(h.MsgLen) > c.cfg.MaxResponse {
		return wire.StatusTooLarge
	}
	full := func() bool {
		return len(c.anyIn)+c.serving >= c.cfg.MaxIncoming || c.anyInBytes+int(h.MsgLen) > c.cfg.MaxIncomingBytes
	}
	if full() && c.sweepDue(c.now, &c.anySweep) {
		idle, n := c.deadTimeout(), 0
		for k, r := range c.anyIn {
			if n++; n > sweepBatch {
				break
			}
			if c.now.Sub(r.last) > idle {
				delete(c.anyIn, k)
				c.anyInBytes -= r.asm.length()
			}
		}
	}
	if full() {
		return wire.StatusBusy
	}
	return wire.StatusOK
}

// Requests returns the anycast requests completed since the last call; the
// caller answers each with Reply. Until answered, a request counts
// against MaxIncoming.
func (c *Core) Requests() []*Request {
	r := c.requests
	c.requests = nil
	return r
}

// Reply answers an anycast request with data (or a refusal status).
func (c *Core) Reply(r *Request, data []byte, st wire.Status) error {
	if !r.answered {
		r.answered = true
		c.serving--
	}
	h := wire.Header{Op: wire.OpData, Flags: wire.FlagResp, MsgID: r.msgID, Status: st}
	_, err := c.eng.Send(r.peer, &h, data, 0)
	return err
}

// onSendCompletion completes a multicast send when every member has the
// message (the switch's merged ACK), or a non-root Reduce contribution.
func (c *Core) onSendCompletion(cp *transport.Completion) bool {
	if cp.Token == eagerToken {
		// An eager multicast or send, completed for its caller when it
		// was sent. A member's crash reaches the group through the
		// switch's event (memberDead), which fails the operations after
		// it; a send that was not delivered fails the next operations
		// with its peer.
		c.eagerOut--
		if cp.Err != nil && cp.Peer.Mode == wire.ModeUnicast && cp.Peer.Group == 0 {
			c.onEagerFailed(cp.Peer.Addr, cp.Err)
		}
		return true
	}
	if cp.Peer.Mode == wire.ModeUnicast && cp.Peer.Group == 0 {
		// A two-sided send completes when the peer has the whole message.
		if op := c.ops[cp.MsgID]; op != nil && op.Kind == KindSendMsg && op.Peer == cp.Peer.Addr {
			if cp.Err != nil {
				op.fail(cp.Err)
			}
			c.finish(op)
			return true
		}
		return false
	}
	var k gopKey
	switch cp.Peer.Mode {
	case wire.ModeMulticast:
		k = gopKey{cp.Peer.Group, KindMulticast, 0, cp.MsgID}
	case wire.ModeAggregate:
		k = gopKey{cp.Peer.Group, KindAggregate, 0, cp.MsgID}
	default:
		return false
	}
	op := c.gops[k]
	if op == nil {
		return true
	}
	if cp.Err != nil {
		op.fail(cp.Err)
		c.finish(op)
		return true
	}
	if op.Kind == KindMulticast || op.Recv == nil {
		c.finish(op)
	}
	return true
}
