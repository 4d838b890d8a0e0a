package coll

import (
	"context"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/reduce"
	"github.com/ndma/ndma/wire"
)

// ReduceScatterBytes reduces send (Size blocks of len(recv) bytes, each a
// whole number of dt elements) element-wise with op over all ranks and
// leaves block i of the result in recv at rank i. send is not modified.
// ReduceScatter is the typed form.
//
// Algorithms: AlgoInNet (one aggregation per block, its result sent to
// the block's owner only; one allreduce for small buffers; see
// reduceScatterPost), AlgoRing (N−1 steps of one block) and AlgoDirect
// (every rank sends each block to its owner at once; the owner reduces
// in rank order).
func (c *Communicator) ReduceScatterBytes(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, opts ...CallOption) error {
	seq, err := c.call()
	if err != nil {
		return err
	}
	if err := c.reduceScatterArgs(send, recv, dt, op); err != nil {
		return err
	}
	algo, o, err := c.choose(OpReduceScatter, len(recv), opts)
	if err != nil {
		return err
	}
	if c.hier != nil && len(recv) > 0 {
		return c.execute(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.reduceScatter(ctx, send, recv, dt, op, opts) }))
	}
	rs, err := c.reduceScatterPost(ctx, algo, o, send, recv, dt, op)
	if err != nil {
		return err
	}
	return c.guard(ctx, seq, algo != AlgoInNet, func(ctx context.Context) error { return c.reduceScatter(ctx, seq, algo, rs) })
}

// IreduceScatterBytes is ReduceScatterBytes's non-blocking form. send and
// recv must not be touched until the request completes.
func (c *Communicator) IreduceScatterBytes(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, opts ...CallOption) *Request {
	seq, err := c.call()
	if err != nil {
		return failed(err)
	}
	if err := c.reduceScatterArgs(send, recv, dt, op); err != nil {
		return failed(err)
	}
	algo, o, err := c.choose(OpReduceScatter, len(recv), opts)
	if err != nil {
		return failed(err)
	}
	if c.hier != nil && len(recv) > 0 {
		return c.launch(ctx, c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.reduceScatter(ctx, send, recv, dt, op, opts) }))
	}
	rs, err := c.reduceScatterPost(ctx, algo, o, send, recv, dt, op)
	if err != nil {
		return failed(err)
	}
	return start(ctx, c.guarded(seq, func(ctx context.Context) error { return c.reduceScatter(ctx, seq, algo, rs) }))
}

// reduceScatterCall is one reduce-scatter's arguments, and for the
// in-network algorithm its posted aggregation.
type reduceScatterCall struct {
	send, recv []byte
	dt         wire.Dtype
	op         ReduceOp
	agg        *msgBatch // innet: the aggregations in flight
	all        []byte    // innet, small buffers: the whole reduced buffer
}

// rsOneAggregation is the largest buffer (all blocks) the in-network
// reduce-scatter reduces as one allreduce: below it latency dominates,
// and one aggregation's round trip beats one per block; above it the
// blocks go to their owners only, so each rank's link carries its own
// block down rather than all of them.
const rsOneAggregation = 4 << 10

// reduceScatterArgs checks ReduceScatterBytes's arguments.
func (c *Communicator) reduceScatterArgs(send, recv []byte, dt wire.Dtype, op ReduceOp) error {
	es := dt.Size()
	switch {
	case es == 0:
		return fmt.Errorf("%w: reducescatter: unknown element type %v", ErrArg, dt)
	case !knownReduceOp(op):
		return fmt.Errorf("%w: reducescatter: unknown reduction %v", ErrArg, op)
	case len(recv)%es != 0:
		return fmt.Errorf("%w: reducescatter: recv %d bytes is not a whole number of %v", ErrArg, len(recv), dt)
	case len(send) != len(recv)*c.size:
		return fmt.Errorf("%w: reducescatter: send %d bytes for %d ranks × %d", ErrArg, len(send), c.size, len(recv))
	}
	return nil
}

// knownReduceOp reports whether op is one of the reductions.
func knownReduceOp(op ReduceOp) bool {
	switch op {
	case Sum, Prod, Min, Max:
		return true
	}
	return false
}

// reduceScatterPost prepares one call; for the in-network algorithm it
// posts the aggregation on the caller's goroutine, so that overlapping
// non-blocking calls reach the switch in call order (it matches every
// member's aggregations by their order).
func (c *Communicator) reduceScatterPost(ctx context.Context, algo Algo, o callOpts, send, recv []byte, dt wire.Dtype, op ReduceOp) (*reduceScatterCall, error) {
	rs := &reduceScatterCall{send: send, recv: recv, dt: dt, op: op}
	if algo != AlgoInNet || len(recv) == 0 || c.size == 1 {
		return rs, nil
	}
	b := len(recv)
	rs.agg = newMsgBatch(ctx, c)
	if len(send) <= rsOneAggregation {
		// One allreduce; each rank keeps its block.
		rs.all = make([]byte, len(send))
		rs.agg.postSwitchOps(&endpoint.Op{Kind: endpoint.KindAggregate, Buf: send, Recv: rs.all, Root: -1, Dtype: dt, Alu: op, Deterministic: o.deterministic},
			len(send), dt.Size(), subAggregate)
	} else {
		// One rooted aggregation per block, posted in block order on
		// every rank: the switch reduces block i and sends the result
		// to rank i alone, so a rank sends the whole buffer once and
		// receives only its own block.
		for i := range c.size {
			var out []byte
			if i == c.rank {
				out = recv
			}
			rs.agg.postSwitchOps(&endpoint.Op{Kind: endpoint.KindAggregate, Buf: send[i*b : (i+1)*b], Recv: out, Root: i,
				Dtype: dt, Alu: op, Deterministic: o.deterministic}, b, dt.Size(), subAggregate)
		}
	}
	if rs.agg.err != nil {
		return nil, rs.agg.err
	}
	return rs, nil
}

// reduceScatter runs one prepared reduce-scatter.
func (c *Communicator) reduceScatter(ctx context.Context, seq uint64, algo Algo, rs *reduceScatterCall) error {
	b := len(rs.recv)
	if b == 0 {
		return nil
	}
	if c.size == 1 {
		copy(rs.recv, rs.send)
		return nil
	}
	switch algo {
	case AlgoInNet:
		if err := rs.agg.wait(ctx); err != nil {
			return err
		}
		if rs.all != nil {
			copy(rs.recv, rs.all[c.rank*b:(c.rank+1)*b])
		}
		return nil
	case AlgoRing:
		return c.reduceScatterRing(ctx, seq, rs)
	case AlgoDirect:
		return c.reduceScatterDirect(ctx, seq, rs)
	}
	return fmt.Errorf("%w: reducescatter has no %s algorithm", ErrArg, algo)
}

// reduceScatterRing is the ring reduce-scatter: at step s each rank sends
// its partial result of block rank−s−1 to its right neighbour, receives
// the partial of block rank−s−2 from its left one and adds its own
// contribution; after N−1 steps block rank is complete. Each rank sends
// and receives (N−1)/N of the buffer.
func (c *Communicator) reduceScatterRing(ctx context.Context, seq uint64, rs *reduceScatterCall) error {
	n, r, b := c.size, c.rank, len(rs.recv)
	right, left := (r+1)%n, (r+n-1)%n
	blk := func(i int) []byte { i = (i%n + n) % n; return rs.send[i*b : (i+1)*b] }
	var scratch [2][]byte
	if n > 2 {
		buf := make([]byte, 2*b)
		scratch = [2][]byte{buf[:b], buf[b:]}
	}
	out := blk(r - 1)
	sends, recvs := newMsgBatch(ctx, c), newMsgBatch(ctx, c)
	for s := range n - 1 {
		in := rs.recv
		if s < n-2 {
			// Not out (scratch[(s−1)%2], or send at step 0) but the buffer
			// sent at step s−1: wait for that send first.
			in = scratch[s%2]
		}
		if err := sends.wait(ctx); err != nil {
			return err
		}
		sends.send(right, tag(seq, s), out)
		recvs.recv(left, tag(seq, s), in)
		if err := recvs.wait(ctx); err != nil {
			return err
		}
		reduce.Apply(in, blk(r-s-2), rs.dt, rs.op)
		out = in
	}
	return sends.wait(ctx)
}

// reduceScatterDirect sends block j to rank j and receives every rank's
// contribution to this rank's block at once, then reduces them in rank
// order (so the result is the same at every run).
func (c *Communicator) reduceScatterDirect(ctx context.Context, seq uint64, rs *reduceScatterCall) error {
	n, r, b := c.size, c.rank, len(rs.recv)
	contrib := make([]byte, n*b) // slot j: rank j's contribution (own slot unused)
	bt := newMsgBatch(ctx, c)
	for i := 1; i < n; i++ {
		from := (r - i + n) % n
		bt.recv(from, tag(seq, 0), contrib[from*b:(from+1)*b])
	}
	for i := 1; i < n; i++ {
		to := (r + i) % n
		bt.send(to, tag(seq, 0), rs.send[to*b:(to+1)*b])
	}
	if err := bt.wait(ctx); err != nil {
		return err
	}
	copy(contrib[r*b:(r+1)*b], rs.send[r*b:(r+1)*b])
	copy(rs.recv, contrib[:b])
	for j := 1; j < n; j++ {
		reduce.Apply(rs.recv, contrib[j*b:(j+1)*b], rs.dt, rs.op)
	}
	return nil
}
