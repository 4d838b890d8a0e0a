package endpoint

import (
	"fmt"
	"net/netip"
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

// sinkOp marks a message whose receive already failed (too long): its
// remaining fragments are dropped.
var sinkOp = &Op{}

func (c *Core) initMsgs() {
	c.sendSeq = make(map[msgStream]uint64)
	c.recvSeq = make(map[msgStream]uint64)
	c.recvs = make(map[msgMatch]*Op)
	c.unexpMsg = make(map[msgMatch]*unexpected)
}

// msgHeader builds a two-sided send's header.
func (c *Core) msgHeader(op *Op) wire.Header {
	s := msgStream{op.Peer, op.Comm, op.Tag}
	c.sendSeq[s]++
	return wire.Header{Op: wire.OpSend, Key: uint64(op.Comm), Operand1: op.Tag, Operand2: c.sendSeq[s]}
}

// postRecvMsg posts a receive for the next message from op.Peer with
// op.Comm and op.Tag.
func (c *Core) postRecvMsg(now time.Time, op *Op) {
	s := msgStream{op.Peer, op.Comm, op.Tag}
	c.recvSeq[s]++
	k := msgMatch{op.Peer, op.Comm, op.Tag, c.recvSeq[s]}
	c.recvID++
	op.gkey = gopKey{kind: KindRecvMsg, id: c.recvID}
	op.mkey = k
	op.N = 0
	c.start(now, op)
	c.gops[op.gkey] = op
	c.recvs[k] = op
	u := c.unexpMsg[k]
	if u == nil {
		return
	}
	c.unexpBytes -= u.size
	delete(c.unexpMsg, k)
	if u.size > len(op.Buf) {
		op.fail(fmt.Errorf("%w: message of %d bytes for a %d-byte buffer", ErrTruncated, u.size, len(op.Buf)))
		c.finish(op) // leaves a sink for the remaining fragments
		if u.done {
			delete(c.recvs, k)
		}
		return
	}
	u.copyTo(op.Buf)
	op.N = u.size
	if u.done {
		delete(c.recvs, k)
		c.finish(op)
	}
}

// finishRecvMsg leaves a sink in place of a receive that failed before its
// message was complete, so that the message's remaining fragments (whose
// sequence number it consumed) are dropped.
func (c *Core) finishRecvMsg(op *Op) {
	if c.recvs[op.mkey] == op {
		if op.Err != nil {
			c.recvs[op.mkey] = sinkOp
		} else {
			delete(c.recvs, op.mkey)
		}
	}
}

// onMsg places one fragment of a two-sided message.
func (c *Core) onMsg(d *transport.Delivery) {
	h := &d.Header
	k := msgMatch{d.Peer.Addr, uint32(h.Key), h.Operand1, h.Operand2}
	if op := c.recvs[k]; op != nil {
		if d.MsgDone {
			delete(c.recvs, k)
		}
		switch {
		case op == sinkOp || op.finished:
		case int(h.MsgLen) > len(op.Buf):
			op.fail(fmt.Errorf("%w: message of %d bytes for a %d-byte buffer", ErrTruncated, h.MsgLen, len(op.Buf)))
			c.finish(op)
		default:
			copy(op.Buf[h.Offset:], d.Payload)
			op.N = int(h.MsgLen)
			if d.MsgDone {
				c.finish(op)
			}
		}
		return
	}
	u := c.unexpMsg[k]
	if u == nil {
		u = &unexpected{size: int(h.MsgLen)}
		c.unexpMsg[k] = u
		c.unexpBytes += u.size
	}
	u.add(int(h.Offset), d.Payload)
	u.done = d.MsgDone
}

// admitMsg holds back messages nobody waits for beyond MaxUnexpected.
func (c *Core) admitMsg(h *wire.Header, from netip.AddrPort) bool {
	k := msgMatch{from, uint32(h.Key), h.Operand1, h.Operand2}
	if c.recvs[k] != nil || c.unexpMsg[k] != nil {
		return true
	}
	return c.unexpBytes+int(h.MsgLen) <= c.cfg.MaxUnexpected
}
