package endpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/ndma/ndma/wire"
)

// MulticastOptions tune one multicast.
type MulticastOptions struct {
	// Continue completes the multicast although a member dies (the switch
	// stops waiting for it) instead of failing with a *MemberError.
	Continue bool
	// Eager completes a multicast of at most EagerMulticastMax bytes as
	// soon as the transport holds its own copy, as MPI's eager protocol
	// lets a small send return: the caller's buffer is free at once, and
	// delivery goes on in the background (the transport resends until
	// every member has it). A member's crash is then reported by the
	// group's next operation instead of this one, and Close lingers (up
	// to CloseLinger) until every eager multicast is acknowledged. While
	// eagerBacklog messages to the switch are unacknowledged, a multicast
	// waits as without Eager.
	Eager bool
}

// EagerMulticastMax is the largest multicast that MulticastOptions.Eager
// completes at once; larger ones wait for every member.
const EagerMulticastMax = 16 << 10

// eagerBacklog bounds the messages queued or in flight to the switch
// (or the peer of a send) under which a multicast (a send) may complete
// eagerly; eagerToken marks the transport messages of eager multicasts
// and sends.
const (
	eagerBacklog = 64
	eagerToken   = 1<<64 - 1
)

// StartMulticast sends data to every other member asynchronously: one
// transmission to the switch, which replicates it. data must not change
// until the op completes; completion means every live member has it.
func (g *Group) StartMulticast(data []byte, opts MulticastOptions) (*Op, error) {
	op := &Op{Kind: KindMulticast, Peer: g.sw, Group: g.id, Buf: data, Continue: opts.Continue, Eager: opts.Eager}
	return op, g.ep.Start(op, nil)
}

// Multicast sends data to every other member and waits until all have it.
func (g *Group) Multicast(ctx context.Context, data []byte, opts MulticastOptions) error {
	return g.ep.Do(ctx, &Op{Kind: KindMulticast, Peer: g.sw, Group: g.id, Buf: data, Continue: opts.Continue, Eager: opts.Eager})
}

// StartRecv posts a receive for the next multicast from member from into
// buf, whose length must equal the message's.
func (g *Group) StartRecv(from int, buf []byte) (*Op, error) {
	op := &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf}
	return op, g.ep.Start(op, nil)
}

// Recv receives the next multicast from member from into buf.
func (g *Group) Recv(ctx context.Context, from int, buf []byte) error {
	return g.ep.Do(ctx, &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf})
}

// RecvAtMost receives the next multicast from member from into buf,
// which may be longer than the message, and returns the message's length.
func (g *Group) RecvAtMost(ctx context.Context, from int, buf []byte) (int, error) {
	op := &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf, AtMost: true}
	if err := g.ep.Do(ctx, op); err != nil {
		return 0, err
	}
	return op.N, nil
}

// Arrived returns the id of the latest multicast from member from that
// arrived here whole (its sender may have seen it complete: every member
// had it), and the id of the latest one a receive took (or waits for).
// Ids count from 1 in the order the sender sent them; a consumer that
// applies what it receives in order has applied everything that arrived
// before a moment once it applied the message with the whole id it read
// then.
func (g *Group) Arrived(from int) (whole, taken uint64) {
	ep := g.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.received(g.id, uint16(from))
}

// TryRecvAtMost receives the next multicast from member from into buf
// (which may be longer than the message) only if it has already arrived
// whole: then it returns the message's length and true. It never waits:
// a message not here yet is left to the next receive. A member that stops
// consuming a group uses it to take what was delivered to it (and
// acknowledged to the sender) before it leaves.
func (g *Group) TryRecvAtMost(from int, buf []byte) (int, bool, error) {
	ep := g.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return 0, false, ErrClosed
	}
	if !ep.core.arrived(g.sw, g.id, uint16(from)) {
		return 0, false, nil
	}
	op := &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf, AtMost: true, done: make(chan struct{})}
	now := time.Now()
	if err := ep.core.Post(now, op); err != nil {
		return 0, false, err
	}
	ep.pumpLocked(now)
	if !op.finished {
		// Not reachable: the message was here whole.
		ep.core.Cancel(op)
		ep.pumpLocked(now)
		return 0, false, nil
	}
	return op.N, true, op.Err
}

// ReduceOptions tune one aggregation.
type ReduceOptions struct {
	// Deterministic reduces in member order at the switch, so float
	// results are bitwise identical from run to run.
	Deterministic bool
}

// StartAllreduce contributes send (elements of dt) and receives the
// element-wise reduction over all members into recv (same length) — one
// transmission each way. Every member must call the group's aggregations
// in the same order with the same length, dtype and op.
func (g *Group) StartAllreduce(send, recv []byte, dt wire.Dtype, alu wire.Alu, opts ReduceOptions) (*Op, error) {
	op := &Op{Kind: KindAggregate, Peer: g.sw, Group: g.id, Buf: send, Recv: recv, Root: -1, Dtype: dt, Alu: alu, Deterministic: opts.Deterministic}
	if recv == nil {
		return nil, fmt.Errorf("%w: allreduce needs a receive buffer", ErrBadOp)
	}
	return op, g.ep.Start(op, nil)
}

// Allreduce is StartAllreduce and wait.
func (g *Group) Allreduce(ctx context.Context, send, recv []byte, dt wire.Dtype, alu wire.Alu, opts ReduceOptions) error {
	if recv == nil {
		return fmt.Errorf("%w: allreduce needs a receive buffer", ErrBadOp)
	}
	return g.ep.Do(ctx, &Op{Kind: KindAggregate, Peer: g.sw, Group: g.id, Buf: send, Recv: recv, Root: -1, Dtype: dt, Alu: alu, Deterministic: opts.Deterministic})
}

// Reduce contributes send; the reduction lands in recv at member root only
// (other members pass recv nil and complete once the switch has their
// contribution).
func (g *Group) Reduce(ctx context.Context, root int, send, recv []byte, dt wire.Dtype, alu wire.Alu, opts ReduceOptions) error {
	if root < 0 || root >= len(g.members) {
		return fmt.Errorf("%w: root %d of %d members", ErrBadOp, root, len(g.members))
	}
	if root == int(g.rank) && recv == nil {
		return fmt.Errorf("%w: the root needs a receive buffer", ErrBadOp)
	}
	if root != int(g.rank) {
		recv = nil
	}
	return g.ep.Do(ctx, &Op{Kind: KindAggregate, Peer: g.sw, Group: g.id, Buf: send, Recv: recv, Root: root, Dtype: dt, Alu: alu, Deterministic: opts.Deterministic})
}
