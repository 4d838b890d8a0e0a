package coll

import (
	"context"
	"fmt"
)

// Alltoall exchanges a block with every rank: send and recv each hold
// Size blocks of len(send)/Size bytes; block j of send goes to rank j and
// block i of recv comes from rank i. send and recv must not overlap.
//
// Algorithm: AlgoDirect (every receive posted at once, then the sends in
// a pairwise order).
func (c *Communicator) Alltoall(ctx context.Context, send, recv []byte, opts ...CallOption) error {
	seq, err := c.call()
	if err != nil {
		return err
	}
	b, err := c.alltoallArgs(send, recv)
	if err != nil {
		return err
	}
	algo, _, err := c.choose(OpAlltoall, b, opts)
	if err != nil {
		return err
	}
	if c.hier != nil && b > 0 {
		return c.execute(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.alltoall(ctx, send, recv, b, opts) }))
	}
	return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.alltoall(ctx, seq, algo, send, recv, b) })
}

// Ialltoall is Alltoall's non-blocking form. send and recv must not be
// touched until the request completes.
func (c *Communicator) Ialltoall(ctx context.Context, send, recv []byte, opts ...CallOption) *Request {
	seq, err := c.call()
	if err != nil {
		return failed(err)
	}
	b, err := c.alltoallArgs(send, recv)
	if err != nil {
		return failed(err)
	}
	algo, _, err := c.choose(OpAlltoall, b, opts)
	if err != nil {
		return failed(err)
	}
	if c.hier != nil && b > 0 {
		return c.launch(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.alltoall(ctx, send, recv, b, opts) }))
	}
	return start(ctx, func(ctx context.Context) error {
		return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.alltoall(ctx, seq, algo, send, recv, b) })
	})
}

// alltoallArgs checks Alltoall's buffers and returns the block size in
// bytes.
func (c *Communicator) alltoallArgs(send, recv []byte) (int, error) {
	if len(send) != len(recv) || len(send)%c.size != 0 {
		return 0, fmt.Errorf("%w: alltoall: send %d and recv %d bytes must be equal multiples of %d ranks", ErrArg, len(send), len(recv), c.size)
	}
	return len(send) / c.size, nil
}

// alltoall runs one all-to-all of b-byte blocks.
func (c *Communicator) alltoall(ctx context.Context, seq uint64, algo Algo, send, recv []byte, b int) error {
	n, r := c.size, c.rank
	copy(recv[r*b:(r+1)*b], send[r*b:(r+1)*b])
	if b == 0 || n == 1 {
		return nil
	}
	if algo != AlgoDirect {
		return fmt.Errorf("%w: alltoall has no %s algorithm", ErrArg, algo)
	}
	// Pairwise schedule: every receive is posted first (asynchronously),
	// then the sends are posted in the order rank+1, rank+2, ...: the
	// i-th send of every rank goes to a different peer (a permutation),
	// so ranks do not all start on the same target, and since nothing
	// blocks on a single message there is no ordering to deadlock on.
	bt := newMsgBatch(ctx, c)
	for i := 1; i < n; i++ {
		from := (r - i + n) % n
		bt.recv(from, tag(seq, 0), recv[from*b:(from+1)*b])
	}
	for i := 1; i < n; i++ {
		to := (r + i) % n
		bt.send(to, tag(seq, 0), send[to*b:(to+1)*b])
	}
	return bt.wait(ctx)
}
