package coll

import (
	"context"
	"fmt"
)

// Gather collects every rank's send (all the same length) at root: recv
// at the root holds Size blocks of len(send) bytes, block i from rank i;
// recv is ignored elsewhere and may be nil. send nil at the root means in
// place: its block is already in recv at its offset and len(recv) must be
// a multiple of Size.
//
// Algorithms: AlgoBinomial (⌈log2 N⌉ rounds up a binomial tree, interior
// ranks forwarding their subtree's blocks) and AlgoDirect (every rank
// sends to the root at once).
func (c *Communicator) Gather(ctx context.Context, send, recv []byte, root int, opts ...CallOption) error {
	seq, err := c.call()
	if err != nil {
		return err
	}
	b, err := c.gatherArgs(send, recv, root)
	if err != nil {
		return err
	}
	algo, _, err := c.choose(OpGather, b, opts)
	if err != nil {
		return err
	}
	if c.hier != nil && b > 0 {
		return c.execute(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.gather(ctx, send, recv, root, b, opts) }))
	}
	return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.gather(ctx, seq, algo, send, recv, root, b) })
}

// Igather is Gather's non-blocking form. send and recv must not be
// touched until the request completes.
func (c *Communicator) Igather(ctx context.Context, send, recv []byte, root int, opts ...CallOption) *Request {
	seq, err := c.call()
	if err != nil {
		return failed(err)
	}
	b, err := c.gatherArgs(send, recv, root)
	if err != nil {
		return failed(err)
	}
	algo, _, err := c.choose(OpGather, b, opts)
	if err != nil {
		return failed(err)
	}
	if c.hier != nil && b > 0 {
		return c.launch(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.gather(ctx, send, recv, root, b, opts) }))
	}
	return start(ctx, c.guarded(seq, func(ctx context.Context) error { return c.gather(ctx, seq, algo, send, recv, root, b) }))
}

// Scatter distributes root's send (Size blocks of len(recv) bytes) so
// that rank i gets block i in recv; send is ignored elsewhere and may be
// nil. recv nil at the root means in place: the root's block stays in
// send and len(send) must be a multiple of Size.
//
// Algorithms: AlgoBinomial (⌈log2 N⌉ rounds down a binomial tree) and
// AlgoDirect (the root sends every block at once).
func (c *Communicator) Scatter(ctx context.Context, send, recv []byte, root int, opts ...CallOption) error {
	seq, err := c.call()
	if err != nil {
		return err
	}
	b, err := c.scatterArgs(send, recv, root)
	if err != nil {
		return err
	}
	algo, _, err := c.choose(OpScatter, b, opts)
	if err != nil {
		return err
	}
	if c.hier != nil && b > 0 {
		return c.execute(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.scatter(ctx, send, recv, root, b, opts) }))
	}
	return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.scatter(ctx, seq, algo, send, recv, root, b) })
}

// Iscatter is Scatter's non-blocking form. send and recv must not be
// touched until the request completes.
func (c *Communicator) Iscatter(ctx context.Context, send, recv []byte, root int, opts ...CallOption) *Request {
	seq, err := c.call()
	if err != nil {
		return failed(err)
	}
	b, err := c.scatterArgs(send, recv, root)
	if err != nil {
		return failed(err)
	}
	algo, _, err := c.choose(OpScatter, b, opts)
	if err != nil {
		return failed(err)
	}
	if c.hier != nil && b > 0 {
		return c.launch(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.scatter(ctx, send, recv, root, b, opts) }))
	}
	return start(ctx, c.guarded(seq, func(ctx context.Context) error { return c.scatter(ctx, seq, algo, send, recv, root, b) }))
}

// gatherArgs checks Gather's arguments and returns the block size in
// bytes.
func (c *Communicator) gatherArgs(send, recv []byte, root int) (int, error) {
	if root < 0 || root >= c.size {
		return 0, fmt.Errorf("%w: gather: root %d of %d ranks", ErrArg, root, c.size)
	}
	if c.rank != root {
		return len(send), nil
	}
	if send == nil {
		if len(recv)%c.size != 0 {
			return 0, fmt.Errorf("%w: gather in place: recv %d bytes is not a multiple of %d ranks", ErrArg, len(recv), c.size)
		}
		return len(recv) / c.size, nil
	}
	if len(recv) != len(send)*c.size {
		return 0, fmt.Errorf("%w: gather: recv %d bytes for %d ranks × %d", ErrArg, len(recv), c.size, len(send))
	}
	return len(send), nil
}

// scatterArgs checks Scatter's arguments and returns the block size in
// bytes.
func (c *Communicator) scatterArgs(send, recv []byte, root int) (int, error) {
	if root < 0 || root >= c.size {
		return 0, fmt.Errorf("%w: scatter: root %d of %d ranks", ErrArg, root, c.size)
	}
	if c.rank != root {
		return len(recv), nil
	}
	if recv == nil {
		if len(send)%c.size != 0 {
			return 0, fmt.Errorf("%w: scatter in place: send %d bytes is not a multiple of %d ranks", ErrArg, len(send), c.size)
		}
		return len(send) / c.size, nil
	}
	if len(send) != len(recv)*c.size {
		return 0, fmt.Errorf("%w: scatter: send %d bytes for %d ranks × %d", ErrArg, len(send), c.size, len(recv))
	}
	return len(recv), nil
}

// gather runs one gather of b-byte blocks.
func (c *Communicator) gather(ctx context.Context, seq uint64, algo Algo, send, recv []byte, root, b int) error {
	if c.rank == root && send != nil {
		copy(recv[root*b:(root+1)*b], send)
	}
	if b == 0 || c.size == 1 {
		return nil
	}
	switch algo {
	case AlgoBinomial:
		return c.gatherBinomial(ctx, seq, send, recv, root, b)
	case AlgoDirect:
		bt := newMsgBatch(ctx, c)
		if c.rank != root {
			bt.send(root, tag(seq, 0), send)
			return bt.wait(ctx)
		}
		for i := range c.size {
			if i != root {
				bt.recv(i, tag(seq, 0), recv[i*b:(i+1)*b])
			}
		}
		return bt.wait(ctx)
	}
	return fmt.Errorf("%w: gather has no %s algorithm", ErrArg, algo)
}

// scatter runs one scatter of b-byte blocks.
func (c *Communicator) scatter(ctx context.Context, seq uint64, algo Algo, send, recv []byte, root, b int) error {
	if c.rank == root && recv != nil {
		copy(recv, send[root*b:(root+1)*b])
	}
	if b == 0 || c.size == 1 {
		return nil
	}
	switch algo {
	case AlgoBinomial:
		return c.scatterBinomial(ctx, seq, send, recv, root, b)
	case AlgoDirect:
		bt := newMsgBatch(ctx, c)
		if c.rank != root {
			bt.recv(root, tag(seq, 0), recv)
			return bt.wait(ctx)
		}
		for i := 1; i < c.size; i++ {
			to := (root + i) % c.size
			bt.send(to, tag(seq, 0), send[to*b:(to+1)*b])
		}
		return bt.wait(ctx)
	}
	return fmt.Errorf("%w: scatter has no %s algorithm", ErrArg, algo)
}

// gatherTree (binomial Gather and Scatter) describes this rank's place in
// the binomial tree rooted at root, in ranks relative to the root
// (v = rank−root mod N): node v's parent is v minus its lowest set bit, its children are v+2^k for 2^k
// below that bit, and its subtree is the sub relative ranks v..v+sub−1.
// A subtree's blocks travel as one run in relative order, cut into at
// most two messages where the run wraps past absolute block N−1 (see
// blockRuns), so that the root reads and writes its buffer in place.
type gatherTree struct {
	n, root, v, sub int
	b               int    // block size in bytes
	buf             []byte // the subtree's blocks: relative layout from v, or at the root the user's buffer (absolute layout)
}

func newGatherTree(c *Communicator, root, b int) *gatherTree {
	n := c.size
	t := &gatherTree{n: n, root: root, v: (c.rank - root + n) % n, sub: n, b: b}
	if t.v != 0 {
		t.sub = min(t.v&-t.v, n-t.v)
	}
	return t
}

// parent is the parent's absolute rank (not for the root).
func (t *gatherTree) parent() int { return (t.v - t.v&-t.v + t.root) % t.n }

// children calls f for each child (absolute rank, relative rank, subtree
// size), smallest subtree first.
func (t *gatherTree) children(f func(rank, v, sub int)) {
	for mask := 1; mask < t.sub; mask <<= 1 {
		child := t.v + mask
		if child >= t.n {
			return
		}
		f((child+t.root)%t.n, child, min(mask, t.n-child))
	}
}

// runs calls f with the message number and the bytes of each message of
// the subtree of relative rank v and sub blocks.
func (t *gatherTree) runs(v, sub int, f func(i int, data []byte)) {
	for i, run := range blockRuns(t.n, (v+t.root)%t.n, sub) {
		o := run.start // absolute block: the root's buffer
		if t.v != 0 {
			o = (run.start-t.root+t.n)%t.n - t.v
		}
		f(i, t.buf[o*t.b:(o+run.n)*t.b])
	}
}

// gatherBinomial gathers up a binomial tree: each rank receives its
// children's subtrees (all at once), then sends its whole subtree to its
// parent; ⌈log2 N⌉ rounds.
func (c *Communicator) gatherBinomial(ctx context.Context, seq uint64, send, recv []byte, root, b int) error {
	t := newGatherTree(c, root, b)
	switch {
	case t.v == 0:
		t.buf = recv
	case t.sub == 1:
		t.buf = send
	default:
		t.buf = make([]byte, t.sub*b)
		copy(t.buf, send)
	}
	bt := newMsgBatch(ctx, c)
	t.children(func(rank, v, sub int) {
		t.runs(v, sub, func(i int, data []byte) { bt.recv(rank, tag(seq, i), data) })
	})
	if err := bt.wait(ctx); err != nil {
		return err
	}
	if t.v == 0 {
		return nil
	}
	t.runs(t.v, t.sub, func(i int, data []byte) { bt.send(t.parent(), tag(seq, i), data) })
	return bt.wait(ctx)
}

// scatterBinomial scatters down a binomial tree: each rank receives its
// subtree's blocks from its parent, keeps its own and sends each child its
// subtree (all at once, largest first); ⌈log2 N⌉ rounds.
func (c *Communicator) scatterBinomial(ctx context.Context, seq uint64, send, recv []byte, root, b int) error {
	t := newGatherTree(c, root, b)
	switch {
	case t.v == 0:
		t.buf = send
	case t.sub == 1:
		t.buf = recv
	default:
		t.buf = make([]byte, t.sub*b)
	}
	bt := newMsgBatch(ctx, c)
	if t.v != 0 {
		t.runs(t.v, t.sub, func(i int, data []byte) { bt.recv(t.parent(), tag(seq, i), data) })
		if err := bt.wait(ctx); err != nil {
			return err
		}
		if t.sub > 1 {
			copy(recv, t.buf[:b])
		}
	}
	type child struct{ rank, v, sub int }
	var kids []child
	t.children(func(rank, v, sub int) { kids = append(kids, child{rank, v, sub}) })
	for k := len(kids) - 1; k >= 0; k-- {
		ch := kids[k]
		t.runs(ch.v, ch.sub, func(i int, data []byte) { bt.send(ch.rank, tag(seq, i), data) })
	}
	return bt.wait(ctx)
}
