package endpoint

import (
	"context"
	"net/netip"
)

// SendMsg sends data to the endpoint at to, as a two-sided message of
// communicator comm with tag. It returns once the peer has the whole
// message (not necessarily matched by a receive yet). data must not
// change until then.
func (ep *Endpoint) SendMsg(ctx context.Context, to netip.AddrPort, comm uint32, tag uint64, data []byte) error {
	return ep.Do(ctx, &Op{Kind: KindSendMsg, Peer: to, Comm: comm, Tag: tag, Buf: data})
}

// RecvMsg receives the next message from the endpoint at from with comm
// and tag into buf and returns its length. Messages from one source with
// one comm and tag are received in the order they were sent; a message
// longer than buf fails with ErrTruncated.
func (ep *Endpoint) RecvMsg(ctx context.Context, from netip.AddrPort, comm uint32, tag uint64, buf []byte) (int, error) {
	op := &Op{Kind: KindRecvMsg, Peer: from, Comm: comm, Tag: tag, Buf: buf}
	err := ep.Do(ctx, op)
	return op.N, err
}

// StartSendMsg is SendMsg's asynchronous form.
func (ep *Endpoint) StartSendMsg(to netip.AddrPort, comm uint32, tag uint64, data []byte, notify chan<- *Op) (*Op, error) {
	op := &Op{Kind: KindSendMsg, Peer: to, Comm: comm, Tag: tag, Buf: data}
	return op, ep.Start(op, notify)
}

// StartRecvMsg is RecvMsg's asynchronous form; op.N is the length once
// op.Done() is closed.
func (ep *Endpoint) StartRecvMsg(from netip.AddrPort, comm uint32, tag uint64, buf []byte, notify chan<- *Op) (*Op, error) {
	op := &Op{Kind: KindRecvMsg, Peer: from, Comm: comm, Tag: tag, Buf: buf}
	return op, ep.Start(op, notify)
}
