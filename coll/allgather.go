package coll

import (
	"context"
	"fmt"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

// Allgather gathers every rank's send (all the same length) into recv on
// every rank: recv holds Size blocks of len(send) bytes, block i from rank
// i. send nil means in place: this rank's block is already in recv at its
// offset (MPI_IN_PLACE) and len(recv) must be a multiple of Size.
//
// Algorithms: AlgoInNet (each rank multicasts its block once through the
// switch and receives the others'; when the whole result is at most
// AllgatherConcatMax bytes, one aggregation through the switch builds
// it instead), AlgoRing (N−1 steps of one block),
// AlgoRecursiveDoubling (⌈log2 N⌉ steps; Bruck's variant when N is not a
// power of two) and AlgoDirect (every rank sends its block to every
// other at once).
func (c *Communicator) Allgather(ctx context.Context, send, recv []byte, opts ...CallOption) error {
	seq, err := c.call()
	if err != nil {
		return err
	}
	b, err := c.allgatherArgs(send, recv)
	if err != nil {
		return err
	}
	algo, _, err := c.choose(OpAllgather, b, opts)
	if err != nil {
		return err
	}
	if c.hier != nil && b > 0 {
		return c.execute(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.allgather(ctx, send, recv, b, opts) }))
	}
	ops, err := c.allgatherPost(ctx, algo, send, recv, b)
	if err != nil {
		return err
	}
	return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.allgather(ctx, seq, algo, recv, b, ops) })
}

// Iallgather is Allgather's non-blocking form. send and recv must not be
// touched until the request completes.
func (c *Communicator) Iallgather(ctx context.Context, send, recv []byte, opts ...CallOption) *Request {
	seq, err := c.call()
	if err != nil {
		return failed(err)
	}
	b, err := c.allgatherArgs(send, recv)
	if err != nil {
		return failed(err)
	}
	algo, _, err := c.choose(OpAllgather, b, opts)
	if err != nil {
		return failed(err)
	}
	if c.hier != nil && b > 0 {
		return c.launch(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.allgather(ctx, send, recv, b, opts) }))
	}
	ops, err := c.allgatherPost(ctx, algo, send, recv, b)
	if err != nil {
		return failed(err)
	}
	return start(ctx, func(ctx context.Context) error {
		return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.allgather(ctx, seq, algo, recv, b, ops) })
	})
}

// AllgatherConcatMax is the largest result (Size × block bytes) that the
// in-network Allgather builds with one aggregation rather than one
// multicast per rank: below it a round trip's latency matters more than
// the Size-fold bytes each rank then sends up.
const AllgatherConcatMax = 4096

// allgatherArgs checks Allgather's buffers and returns the block size in
// bytes.
func (c *Communicator) allgatherArgs(send, recv []byte) (int, error) {
	if send == nil {
		if len(recv)%c.size != 0 {
			return 0, fmt.Errorf("%w: allgather in place: recv %d bytes is not a multiple of %d ranks", ErrArg, len(recv), c.size)
		}
		return len(recv) / c.size, nil
	}
	if len(recv) != len(send)*c.size {
		return 0, fmt.Errorf("%w: allgather: recv %d bytes for %d ranks × %d", ErrArg, len(recv), c.size, len(send))
	}
	return len(send), nil
}

// allgatherPost does the part of an allgather that must happen in call
// order on the caller's goroutine: it places this rank's block and, for
// the in-network algorithm, posts the multicast and the receives. The
// switch matches a member's multicasts to the receivers' posted receives
// in posting order, so overlapping non-blocking calls must post in the
// order they were made. It returns the in-network ops posted, if any.
func (c *Communicator) allgatherPost(ctx context.Context, algo Algo, send, recv []byte, b int) (*msgBatch, error) {
	if send != nil {
		copy(recv[c.rank*b:(c.rank+1)*b], send)
	}
	if algo != AlgoInNet || b == 0 || c.size == 1 {
		return nil, nil
	}
	bt := newMsgBatch(ctx, c)
	if n := c.size * b; n <= AllgatherConcatMax {
		// Small blocks: one aggregation instead of Size multicast
		// streams. Each rank contributes the whole result's length, its
		// block in place and zeros elsewhere, summed as 64-bit integers:
		// the blocks' bits are disjoint, so the sum carries nothing and
		// is their concatenation, exact for any bytes. One round trip
		// through the switch, whatever the number of ranks.
		l := (n + 7) &^ 7
		contrib, result := make([]byte, l), make([]byte, l)
		copy(contrib[c.rank*b:(c.rank+1)*b], recv[c.rank*b:(c.rank+1)*b])
		bt.postSwitchOps(&endpoint.Op{Kind: endpoint.KindAggregate, Buf: contrib, Recv: result, Root: -1, Dtype: wire.DtypeI64, Alu: wire.AluAdd},
			l, 8, subAggregate)
		bt.after = func() { copy(recv, result[:n]) }
		if bt.err != nil {
			return nil, bt.err
		}
		return bt, nil
	}
	// Each rank multicasts its own block (one transmission, replicated by
	// the switch) and receives the others' blocks, posted in rank order.
	// A small block's multicast completes as soon as the transport has
	// it (eager): the rank waits for the others' blocks anyway.
	bt.postSwitchOps(&endpoint.Op{Kind: endpoint.KindMulticast, Buf: recv[c.rank*b : (c.rank+1)*b], Eager: true}, b, 1, subBuf)
	for i := range c.size {
		if i != c.rank {
			bt.postSwitchOps(&endpoint.Op{Kind: endpoint.KindRecv, From: uint16(i), Buf: recv[i*b : (i+1)*b]}, b, 1, subBuf)
		}
	}
	if bt.err != nil {
		return nil, bt.err
	}
	return bt, nil
}

// allgather runs the communication of one allgather whose own block is
// already in place; innet holds the in-network ops allgatherPost posted.
func (c *Communicator) allgather(ctx context.Context, seq uint64, algo Algo, recv []byte, b int, innet *msgBatch) error {
	if b == 0 || c.size == 1 {
		return nil
	}
	switch algo {
	case AlgoInNet:
		return innet.wait(ctx)
	case AlgoRing:
		return c.allgatherRing(ctx, seq, recv, b)
	case AlgoRecursiveDoubling:
		if c.size&(c.size-1) == 0 {
			return c.allgatherRecDoubling(ctx, seq, recv, b)
		}
		return c.allgatherBruck(ctx, seq, recv, b)
	case AlgoDirect:
		return c.allgatherDirect(ctx, seq, recv, b)
	}
	return fmt.Errorf("%w: allgather has no %s algorithm", ErrArg, algo)
}

// allgatherRing passes blocks around the ring: at step s each rank sends
// block rank−s to its right neighbour and receives block rank−s−1 from its
// left one; N−1 steps of one block each. A step waits only for its
// receive: every block is written once, so sends stay in flight.
func (c *Communicator) allgatherRing(ctx context.Context, seq uint64, recv []byte, b int) error {
	n, r := c.size, c.rank
	right, left := (r+1)%n, (r+n-1)%n
	sends, recvs := newMsgBatch(ctx, c), newMsgBatch(ctx, c)
	for s := range n - 1 {
		out, in := (r-s+n)%n, (r-s-1+n)%n
		sends.send(right, tag(seq, s), recv[out*b:(out+1)*b])
		recvs.recv(left, tag(seq, s), recv[in*b:(in+1)*b])
		if err := recvs.wait(ctx); err != nil {
			return err
		}
	}
	return sends.wait(ctx)
}

// allgatherRecDoubling is recursive doubling for a power-of-two size: at
// step k each rank exchanges the 2^k contiguous blocks it holds with the
// rank whose number differs in bit k; log2 N steps.
func (c *Communicator) allgatherRecDoubling(ctx context.Context, seq uint64, recv []byte, b int) error {
	sends, recvs := newMsgBatch(ctx, c), newMsgBatch(ctx, c)
	for k, d := 0, 1; d < c.size; k, d = k+1, d<<1 {
		peer := c.rank ^ d
		mine, theirs := c.rank&^(d-1), peer&^(d-1)
		sends.send(peer, tag(seq, k), recv[mine*b:(mine+d)*b])
		recvs.recv(peer, tag(seq, k), recv[theirs*b:(theirs+d)*b])
		if err := recvs.wait(ctx); err != nil {
			return err
		}
	}
	return sends.wait(ctx)
}

// allgatherBruck is the recursive-doubling allgather for any size
// (Bruck et al.): before the step of distance d a rank holds blocks
// rank..rank+d−1 (mod N); it sends min(d, N−d) of them, starting with its
// own, to rank−d and receives as many from rank+d, which hold the next
// ones. ⌈log2 N⌉ steps. Blocks stay at their final offsets: a run that
// wraps past block N−1 travels as two messages, split at the same block
// on both sides.
func (c *Communicator) allgatherBruck(ctx context.Context, seq uint64, recv []byte, b int) error {
	n, r := c.size, c.rank
	sends, recvs := newMsgBatch(ctx, c), newMsgBatch(ctx, c)
	for k, d := 0, 1; d < n; k, d = k+1, d<<1 {
		cnt := min(d, n-d)
		to, from := (r-d+n)%n, (r+d)%n
		for i, run := range blockRuns(n, r, cnt) {
			sends.send(to, tag(seq, 2*k+i), recv[run.start*b:(run.start+run.n)*b])
		}
		for i, run := range blockRuns(n, from, cnt) {
			recvs.recv(from, tag(seq, 2*k+i), recv[run.start*b:(run.start+run.n)*b])
		}
		if err := recvs.wait(ctx); err != nil {
			return err
		}
	}
	return sends.wait(ctx)
}

// allgatherDirect sends this rank's block to every other rank and receives
// theirs, all at once (N−1 messages out and in per rank).
func (c *Communicator) allgatherDirect(ctx context.Context, seq uint64, recv []byte, b int) error {
	n, r := c.size, c.rank
	bt := newMsgBatch(ctx, c)
	for i := 1; i < n; i++ {
		from := (r - i + n) % n
		bt.recv(from, tag(seq, 0), recv[from*b:(from+1)*b])
	}
	for i := 1; i < n; i++ {
		bt.send((r+i)%n, tag(seq, 0), recv[r*b:(r+1)*b])
	}
	return bt.wait(ctx)
}

// blockRun is a run of whole blocks: n blocks from block start.
type blockRun struct{ start, n int }

// blockRuns splits the cnt blocks that start at block start and continue
// modulo n into at most two runs, cut where they wrap past block n−1.
// Sender and receiver of a message compute the same cut.
func blockRuns(n, start, cnt int) []blockRun {
	if start+cnt <= n {
		return []blockRun{{start, cnt}}
	}
	return []blockRun{{start, n - start}, {0, start + cnt - n}}
}

// msgBatch is a set of operations in flight: two-sided sends and
// receives of a host algorithm, or switch operations. Each op's timeout
// is capped by the context's deadline; a posting error is kept and
// reported by wait.
type msgBatch struct {
	c       *Communicator
	timeout time.Duration // zero: the endpoint's OpTimeout
	ops     []*endpoint.Op
	eps     []*endpoint.Endpoint // the endpoint each op was posted on
	err     error
	done    chan *endpoint.Op // completions of ops, in completion order
	after   func()            // if not nil, run by wait once every op succeeded
}

func newMsgBatch(ctx context.Context, c *Communicator) *msgBatch {
	return &msgBatch{c: c, timeout: ctxTimeout(ctx)}
}

// post starts op (its Timeout set from the context); after a posting
// error it posts nothing more.
func (bt *msgBatch) post(op *endpoint.Op) { bt.postEP(bt.c.ep, op) }

// postOn posts a stripe's group operation on the endpoint of shard i
// (Peer and Group set).
func (bt *msgBatch) postOn(i int, op *endpoint.Op) { bt.postEP(bt.c.shards[i].ep, op) }

func (bt *msgBatch) postEP(ep *endpoint.Endpoint, op *endpoint.Op) {
	if bt.err != nil {
		return
	}
	if bt.done == nil {
		// Room for a typical batch; the endpoint holds any more
		// completions until wait takes them.
		bt.done = make(chan *endpoint.Op, 64)
	}
	op.Timeout = bt.timeout
	if err := ep.Start(op, bt.done); err != nil {
		bt.err = bt.c.stripeErr(bt.c.rankErr(err, op), op)
		return
	}
	bt.ops = append(bt.ops, op)
	bt.eps = append(bt.eps, ep)
}

// postSwitch posts a group operation (kind, buffers, dtype...) to the
// communicator's switch.
func (bt *msgBatch) postSwitch(op *endpoint.Op) {
	op.Peer, op.Group = bt.c.swAP, bt.c.group.ID()
	bt.post(op)
}

// send posts a message of data to rank to. data must not change until
// wait returns.
func (bt *msgBatch) send(to int, t uint64, data []byte) {
	bt.post(bt.c.sendOp(to, t, data))
}

// recv posts a receive of exactly len(buf) bytes from rank from.
func (bt *msgBatch) recv(from int, t uint64, buf []byte) {
	bt.post(bt.c.recvOp(from, t, buf))
}

// wait waits for every op posted since the last wait and returns the
// first error (a posting error first). A received message shorter than
// its buffer is an error: every collective's message sizes follow from
// its arguments. It takes completions in the order they come, and once
// one op fails (or ctx ends) it cancels the others rather than wait for
// them: after a rank dies, an op that needed another rank's part may
// never complete. Once wait returns the endpoint no longer touches the
// ops' buffers.
// ready reports whether a completion waits in bt.done (only wait takes
// them).
func (bt *msgBatch) ready() bool { return len(bt.done) > 0 }

func (bt *msgBatch) wait(ctx context.Context) error {
	ops, eps, first := bt.ops, bt.eps, bt.err
	defer func() { bt.ops, bt.eps, bt.err = ops[:0], eps[:0], nil }()
	pending := len(ops)
	canceled := false
	for pending > 0 {
		if first != nil && !canceled {
			canceled = true
			for i, o := range ops {
				eps[i].Cancel(o) // no-op for those done
			}
		}
		bt.c.ep.Drive(ctx, bt.ready)
		select {
		case op := <-bt.done:
			pending--
			if err := bt.c.opErr(op); err != nil && first == nil {
				first = err
			}
		case <-ctx.Done():
			if first == nil {
				first = ctx.Err()
			}
			for i, o := range ops {
				eps[i].Cancel(o)
			}
			canceled = true
			for ; pending > 0; pending-- {
				<-bt.done
			}
		}
	}
	if first == nil && bt.after != nil {
		bt.after()
	}
	return first
}
