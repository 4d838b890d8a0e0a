package endpoint

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Two-sided messages (SEND): a message to a peer endpoint, matched at the
// receiver by (source, communicator, tag) in the order the source sent
// them — MPI's non-overtaking rule — whatever order the packets arrive in.
// Collectives' host-based algorithms are built on them.

// msgMatch identifies one message: its source, communicator, tag and
// sequence number among the messages with the same first three.
type msgMatch struct {
	peer netip.AddrPort
	comm uint32
	tag  uint64
	seq  uint64
}

type msgStream struct {
	peer netip.AddrPort
	comm uint32
	tag  uint64
}

func (c *Core) initMsgs() {
	c.sendSeq = make(map[msgStream]uint64)
	c.recvSeq = make(map[msgStream]uint64)
	c.msgPeers = make(map[netip.AddrPort]int)
	c.recvs = make(map[msgMatch]*Op)
	c.unexpMsg = make(map[msgMatch]*unexpected)
	c.eagerFailed = make(map[netip.AddrPort]error)
}

// nextSeq advances a stream's sequence number in seqs (sendSeq or
// recvSeq), counting a new stream toward its peer's streams.
func (c *Core) nextSeq(seqs map[msgStream]uint64, s msgStream) uint64 {
	n, ok := seqs[s]
	if !ok {
		c.msgPeers[s.peer]++
	}
	seqs[s] = n + 1
	return n + 1
}

// msgHeader builds a two-sided send's header.
func (c *Core) msgHeader(op *Op) wire.Header {
	seq := c.nextSeq(c.sendSeq, msgStream{op.Peer, op.Comm, op.Tag})
	return wire.Header{Op: wire.OpSend, Key: uint64(op.Comm), Operand1: op.Tag, Operand2: seq}
}

// unsendSeq gives back the sequence number msgHeader took for op, whose
// message the transport refused: the next message of the stream takes
// it, so the receiver's order has no gap.
func (c *Core) unsendSeq(op *Op) {
	c.sendSeq[msgStream{op.Peer, op.Comm, op.Tag}]--
}

// EagerSendMax is the largest two-sided send that may complete eagerly
// (Op.Eager); larger ones complete when the peer has them.
const EagerSendMax = 16 << 10

// eagerMaxOut bounds the eager multicasts and sends not yet acknowledged,
// over all peers (at most eagerMaxOut × 16 KiB of copies); beyond it an
// eager op waits as one without Eager. maxEagerFailed bounds
// Core.eagerFailed.
const (
	eagerMaxOut    = 512
	maxEagerFailed = 1024
)

// postEagerSend sends a copy of op's message and completes op at once:
// the transport delivers the copy (the caller's buffer is free now). If
// it cannot, the failure is kept for the peer (onEagerFailed).
func (c *Core) postEagerSend(now time.Time, op *Op, h *wire.Header) error {
	id, err := c.eng.Send(transport.PeerID{Addr: op.Peer}, h, bytes.Clone(op.Buf), eagerToken)
	if err != nil {
		c.unsendSeq(op)
		return err
	}
	op.msgID = id
	c.eagerOut++
	c.start(now, op)
	c.complete(op)
	return nil
}

// onEagerFailed records that an eager send to peer was not delivered
// (err, from the transport): the receives from peer still waiting fail
// with it, as do the two-sided operations with peer posted later, until
// ForgetPeer.
func (c *Core) onEagerFailed(peer netip.AddrPort, err error) {
	err = fmt.Errorf("endpoint: an eager send to %v was not delivered: %w", peer, err)
	if _, ok := c.eagerFailed[peer]; !ok && len(c.eagerFailed) < maxEagerFailed {
		c.eagerFailed[peer] = err
	}
	for _, k := range slices.SortedFunc(maps.Keys(c.recvs), cmpMsgMatch) {
		if op := c.recvs[k]; k.peer == peer && !op.finished {
			op.fail(err)
			c.finish(op)
		}
	}
}

// eagerFailure is why an eager send to peer was not delivered, or nil
// (no map lookup while no eager send has failed).
func (c *Core) eagerFailure(peer netip.AddrPort) error {
	if len(c.eagerFailed) == 0 {
		return nil
	}
	return c.eagerFailed[peer]
}

// failPosted fails a two-sided op at once, as it is posted.
func (c *Core) failPosted(now time.Time, op *Op, err error) {
	c.start(now, op)
	op.fail(err)
	c.complete(op)
}

// cmpMsgMatch orders receives for a deterministic failure order.
func cmpMsgMatch(a, b msgMatch) int {
	return cmp.Or(a.peer.Compare(b.peer), cmp.Compare(a.comm, b.comm), cmp.Compare(a.tag, b.tag), cmp.Compare(a.seq, b.seq))
}

// postRecvMsg posts a receive for the next message from op.Peer with
// op.Comm and op.Tag.
func (c *Core) postRecvMsg(now time.Time, op *Op) {
	if err := c.eagerFailure(op.Peer); err != nil {
		c.failPosted(now, op, err)
		return
	}
	seq := c.nextSeq(c.recvSeq, msgStream{op.Peer, op.Comm, op.Tag})
	k := msgMatch{op.Peer, op.Comm, op.Tag, seq}
	c.recvID++
	op.gkey = gopKey{kind: KindRecvMsg, id: c.recvID}
	op.mkey = k
	op.N = 0
	c.start(now, op)
	c.gops[op.gkey] = op
	c.recvs[k] = op
	if u := c.unexpMsg[k]; u != nil {
		delete(c.unexpMsg, k)
		c.release(u)
		if !c.beginRecvMsg(op, u.asm.length()) {
			return
		}
		c.takeUnexpected(op, u, op.Buf)
	}
	if me := c.msgPeerGone(op); me != nil && !op.finished {
		// What the member sent before it died was taken above; nothing
		// more of it will come.
		op.fail(me)
		c.finish(op)
	}
}

// msgPeerGone returns why a two-sided op bound to a group member
// (op.Group set) cannot complete: the switch reported the member crashed
// (one that left fails nothing: see memberDead), or
// a member of the group (this endpoint included) crashed, which breaks
// the group for two-sided traffic (see memberDead). Nil otherwise.
func (c *Core) msgPeerGone(op *Op) *MemberError {
	if op.Group == 0 {
		return nil
	}
	if me := c.brokenGroups[op.Group]; me != nil {
		return me
	}
	if me := c.deadMembers[gopKey{group: op.Group, member: op.From}]; me != nil && !me.Left {
		return me
	}
	return nil
}

// beginRecvMsg starts receiving a message of n bytes into op.Buf, taking
// over what arrived of it before (op.asm is the unexpected message's, or
// fresh). It fails the op and reports false if the message is longer than
// the buffer.
func (c *Core) beginRecvMsg(op *Op, n int) bool {
	if n > len(op.Buf) {
		op.fail(fmt.Errorf("%w: message of %d bytes for a %d-byte buffer", ErrTruncated, n, len(op.Buf)))
		c.finish(op)
		return false
	}
	op.N = n
	return true
}

// finishRecvMsg forgets a finished receive. The fragments of its message
// that still arrive (it failed or was canceled before the message was
// complete) find no receive and a sequence number already taken, and are
// dropped (onMsg).
func (c *Core) finishRecvMsg(op *Op) {
	if c.recvs[op.mkey] == op {
		delete(c.recvs, op.mkey)
	}
}

// onMsg places one fragment of a two-sided message.
func (c *Core) onMsg(d *transport.Delivery) {
	h := &d.Header
	s := msgStream{d.Peer.Addr, uint32(h.Key), h.Operand1}
	k := msgMatch{s.peer, s.comm, s.tag, h.Operand2}
	if op := c.recvs[k]; op != nil {
		if !op.asm.Started() {
			if !c.beginRecvMsg(op, int(h.MsgLen)) {
				return
			}
			op.asm.start(int(h.MsgLen), op.Buf)
		}
		if c.placeFrag(op, d) {
			c.finish(op)
		} else if !op.finished && op.Idle > 0 {
			op.idleAt = c.now.Add(op.Idle) // the peer is sending: progress
			c.armDeadline(op)
		}
		return
	}
	if h.Operand2 <= c.recvSeq[s] {
		// Its receive was posted and has ended (failed or canceled).
		c.stats.FragmentsDropped++
		return
	}
	u := c.unexpMsg[k]
	if u == nil {
		u = c.newUnexpected(h, c.msgPeers[s.peer] == 0)
		c.unexpMsg[k] = u
	}
	c.placeUnexpected(u, d)
}

// admitMsg holds back messages nobody waits for beyond the unexpected
// bounds (Config.MaxUnexpected).
func (c *Core) admitMsg(h *wire.Header, from netip.AddrPort) bool {
	s := msgStream{from, uint32(h.Key), h.Operand1}
	k := msgMatch{from, s.comm, s.tag, h.Operand2}
	if c.recvs[k] != nil || c.unexpMsg[k] != nil || h.Operand2 <= c.recvSeq[s] {
		return true
	}
	return c.roomUnexpected(int(h.MsgLen), c.msgPeers[from] == 0)
}

// ForgetComm forgets communicator comm: the sequence numbers of its
// streams with every peer and the messages buffered for it that no
// receive took. Call it when the communicator is freed, after its
// operations completed; a later message on comm starts a new stream.
func (c *Core) ForgetComm(comm uint32) {
	c.forgetStreams(func(s msgStream) bool { return s.comm == comm })
}

// ForgetPeer forgets every stream of two-sided messages with peer (its
// sequence numbers, the messages buffered from it): call it once the peer
// is gone for good (dead, or its job ended), after the operations with it
// completed.
func (c *Core) ForgetPeer(peer netip.AddrPort) {
	c.forgetStreams(func(s msgStream) bool { return s.peer == peer })
	delete(c.eagerFailed, peer)
}

func (c *Core) forgetStreams(match func(msgStream) bool) {
	for _, seqs := range []map[msgStream]uint64{c.sendSeq, c.recvSeq} {
		for s := range seqs {
			if match(s) {
				delete(seqs, s)
				if c.msgPeers[s.peer]--; c.msgPeers[s.peer] <= 0 {
					delete(c.msgPeers, s.peer)
				}
			}
		}
	}
	for k, u := range c.unexpMsg {
		if match(msgStream{k.peer, k.comm, k.tag}) {
			delete(c.unexpMsg, k)
			c.release(u)
		}
	}
}
