package endpoint

import (
	"fmt"
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
// to, before its receive was posted. It keeps the fragments that came, not
// a buffer of the message's size: a receive is usually posted a little
// after the first fragments of a large message arrive, and a whole-size
// buffer cost a 16 MiB allocation (page faults, GC) and a 16 MiB copy per
// such message for a few fragments (35% of a receiver's CPU in a 16 MiB
// in-network Bcast on the testbed).
type unexpected struct {
	size  int // the message's length: what it holds of MaxUnexpected
	frags []unexpFrag
	done  bool
}

// unexpFrag is one fragment of an unexpected message.
type unexpFrag struct {
	off  int
	data []byte
}

// add keeps a copy of the fragment at offset off.
func (u *unexpected) add(off int, p []byte) {
	u.frags = append(u.frags, unexpFrag{off: off, data: append([]byte(nil), p...)})
}

// copyTo writes the fragments received so far into dst, which holds at
// least size bytes.
func (u *unexpected) copyTo(dst []byte) {
	for _, f := range u.frags {
		copy(dst[f.off:], f.data)
	}
}

// Request is an anycast request delivered to this endpoint as a member of
// a service group. Reply to it with Core.Reply (or return from the
// Endpoint's handler).
type Request struct {
	Group uint32
	Key   uint64 // the request's affinity key (header Addr)
	Data  []byte
	msgID uint64
	peer  transport.PeerID
}

func (c *Core) initGroups() {
	c.gops = make(map[gopKey]*Op)
	c.unexp = make(map[gopKey]*unexpected)
	c.anyIn = make(map[inKey]*Request)
	c.mcSeq = make(map[uint32]uint64)
	c.aggSeq = make(map[uint32]uint64)
	c.rxSeq = make(map[gopKey]uint64)
	c.deadMembers = make(map[gopKey]*MemberError)
	c.admitFn = c.admit
}

// SetMember records this endpoint's member id in a group.
func (c *Core) SetMember(group uint32, member uint16) { c.eng.SetLocal(group, member) }

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
		if _, err := c.eng.Send(to, &h, op.Buf, 0); err != nil {
			c.mcSeq[op.Group]--
			return err
		}
		op.msgID = id
		op.gkey = gopKey{op.Group, KindMulticast, 0, id}
	case KindRecv:
		k := rxKey(op.Group, op.From)
		c.rxSeq[k]++
		id := c.rxSeq[k]
		op.msgID = id
		op.gkey = gopKey{op.Group, KindRecv, op.From, id}
		c.start(now, op)
		c.gops[op.gkey] = op
		if u := c.unexp[op.gkey]; u != nil {
			// It (or its beginning) arrived before the receive was posted:
			// take what is there; later fragments land in op.Buf directly.
			c.unexpBytes -= u.size
			delete(c.unexp, op.gkey)
			if u.size != len(op.Buf) {
				op.fail(fmt.Errorf("%w: multicast of %d bytes into a %d-byte buffer", ErrShortRead, u.size, len(op.Buf)))
				c.finish(op)
				return nil
			}
			u.copyTo(op.Buf)
			if u.done {
				c.finish(op)
			}
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

// admit holds back multicast messages nobody has posted a receive for,
// once MaxUnexpected bytes are buffered.
func (c *Core) admit(d *transport.Delivery) bool {
	h := &d.Header
	if h.Op == wire.OpSend && h.Mode == wire.ModeUnicast && h.Flags&wire.FlagResp == 0 {
		return c.admitMsg(h, d.Peer.Addr)
	}
	if h.Mode != wire.ModeMulticast || h.Offset != 0 && c.unexp[gopKey{h.Group, KindRecv, h.Src, h.MsgID}] != nil {
		return true
	}
	k := gopKey{h.Group, KindRecv, h.Src, h.MsgID}
	if c.gops[k] != nil || c.unexp[k] != nil {
		return true
	}
	return c.unexpBytes+int(h.MsgLen) <= c.cfg.MaxUnexpected
}

// onGroup handles deliveries of group streams and switch events.
func (c *Core) onGroup(now time.Time, d *transport.Delivery) {
	h := &d.Header
	switch {
	case h.Op == wire.OpEvent:
		c.onEvent(h)
	case h.Mode == wire.ModeMulticast && h.Op == wire.OpData:
		c.onMulticast(d)
	case h.Mode == wire.ModeAggregate && h.Op == wire.OpData:
		op := c.gops[gopKey{h.Group, KindAggregate, 0, h.MsgID}]
		if op == nil || op.Recv == nil {
			c.stats.UnmatchedResponses++
			return
		}
		if int(h.MsgLen) != len(op.Recv) || int(h.Offset)+len(d.Payload) > len(op.Recv) {
			op.fail(fmt.Errorf("%w: aggregation result of %d bytes for a %d-byte buffer", ErrShortRead, h.MsgLen, len(op.Recv)))
			c.finish(op)
			return
		}
		copy(op.Recv[h.Offset:], d.Payload)
		if d.MsgDone {
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
	_ = now
}

func (c *Core) onMulticast(d *transport.Delivery) {
	h := &d.Header
	k := gopKey{h.Group, KindRecv, h.Src, h.MsgID}
	if op := c.gops[k]; op != nil {
		if int(h.MsgLen) != len(op.Buf) {
			op.fail(fmt.Errorf("%w: multicast of %d bytes into a %d-byte buffer", ErrShortRead, h.MsgLen, len(op.Buf)))
			c.finish(op)
			return
		}
		copy(op.Buf[h.Offset:], d.Payload)
		if d.MsgDone {
			c.finish(op)
		}
		return
	}
	u := c.unexp[k]
	if u == nil {
		u = &unexpected{size: int(h.MsgLen)}
		c.unexp[k] = u
		c.unexpBytes += u.size
	}
	u.add(int(h.Offset), d.Payload)
	u.done = d.MsgDone
}

// onEvent handles a switch notification.
func (c *Core) onEvent(h *wire.Header) {
	if h.Flags&wire.FlagResp != 0 {
		// The refusal of one aggregation (Operand2 = its id); a dead
		// member is named in Operand1.
		if op := c.gops[gopKey{h.Group, KindAggregate, 0, h.Operand2}]; op != nil {
			var err error = h.Status
			if h.Status == wire.StatusMemberDead {
				err = &MemberError{Group: h.Group, Member: uint16(h.Operand1)}
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
func (c *Core) memberDead(me *MemberError) {
	c.deadMembers[gopKey{group: me.Group, member: me.Member}] = me
	for _, op := range c.gops {
		if op.Group != me.Group {
			continue
		}
		switch op.Kind {
		case KindRecv:
			if op.From != me.Member {
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
}

// DeadMember reports whether the switch told us member m of group g died.
func (c *Core) DeadMember(g uint32, m uint16) *MemberError {
	return c.deadMembers[gopKey{group: g, member: m}]
}

// onAnycastRequest collects an anycast request addressed to this endpoint
// as a member of a service group.
func (c *Core) onAnycastRequest(d *transport.Delivery) {
	h := &d.Header
	k := inKey{d.Peer, h.MsgID}
	r := c.anyIn[k]
	if r == nil {
		if len(c.anyIn) >= c.cfg.MaxIncoming || int(h.MsgLen) > c.cfg.MaxResponse {
			rh := wire.Header{Op: wire.OpData, Flags: wire.FlagResp, MsgID: h.MsgID, Status: wire.StatusBusy}
			_, _ = c.eng.Send(d.Peer, &rh, nil, 0)
			return
		}
		r = &Request{Group: h.Group, Key: h.Addr, Data: make([]byte, h.MsgLen), msgID: h.MsgID, peer: d.Peer}
		c.anyIn[k] = r
	}
	copy(r.Data[h.Offset:], d.Payload)
	if d.MsgDone {
		delete(c.anyIn, k)
		c.requests = append(c.requests, r)
	}
}

// Requests returns the anycast requests completed since the last call; the
// caller answers each with Reply.
func (c *Core) Requests() []*Request {
	r := c.requests
	c.requests = nil
	return r
}

// Reply answers an anycast request with data (or a refusal status).
func (c *Core) Reply(r *Request, data []byte, st wire.Status) error {
	h := wire.Header{Op: wire.OpData, Flags: wire.FlagResp, MsgID: r.msgID, Status: st}
	_, err := c.eng.Send(r.peer, &h, data, 0)
	return err
}

// onSendCompletion completes a multicast send when every member has the
// message (the switch's merged ACK), or a non-root Reduce contribution.
func (c *Core) onSendCompletion(cp *transport.Completion) bool {
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
