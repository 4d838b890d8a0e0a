package coll

import (
	"context"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

// Barrier returns once every rank has entered it.
//
// Algorithms: AlgoInNet (an allreduce of one int32 through the switch:
// its result comes back only when every member has contributed) and
// AlgoRecursiveDoubling (the dissemination barrier, ⌈log2 N⌉ rounds of
// empty messages to rank+2^k, for any N).
func (c *Communicator) Barrier(ctx context.Context, opts ...CallOption) error {
	return c.execute(ctx, c.barrierPlan(opts))
}

// Ibarrier is Barrier's non-blocking form: the request completes once
// every rank has entered the barrier.
func (c *Communicator) Ibarrier(ctx context.Context, opts ...CallOption) *Request {
	return c.launch(ctx, c.barrierPlan(opts))
}

func (c *Communicator) barrierPlan(opts []CallOption) callPlan {
	seq, err := c.call()
	if err != nil {
		return callPlan{err: err}
	}
	algo, o, err := c.choose(OpBarrier, 0, opts)
	if err != nil {
		return callPlan{err: err}
	}
	if c.hier != nil {
		return c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.barrier(ctx, opts) })
	}
	return c.barrierWith(seq, algo, o)
}

// barrierWith prepares one barrier with a resolved algorithm.
func (c *Communicator) barrierWith(seq uint64, algo Algo, _ callOpts) callPlan {
	if c.size == 1 {
		return callPlan{}
	}
	switch algo {
	case AlgoInNet:
		return c.switchPlan(&endpoint.Op{Kind: endpoint.KindAggregate, Buf: make([]byte, 4), Recv: make([]byte, 4),
			Root: -1, Dtype: wire.DtypeI32, Alu: wire.AluAdd})
	case AlgoRecursiveDoubling:
		return callPlan{host: c.guarded(seq, func(ctx context.Context) error { return c.barrierDissemination(ctx, seq) })}
	}
	return callPlan{err: fmt.Errorf("%w: barrier has no %s algorithm", ErrArg, algo)}
}

// barrierDissemination: in round k every rank signals rank+2^k and waits
// for rank−2^k; after ⌈log2 N⌉ rounds each rank has heard, directly or
// not, from every other.
func (c *Communicator) barrierDissemination(ctx context.Context, seq uint64) error {
	n := c.size
	for k, step := 1, 0; k < n; k, step = k<<1, step+1 {
		if err := c.sendrecv(ctx, (c.rank+k)%n, nil, (c.rank-k+n)%n, nil, tag(seq, step)); err != nil {
			return err
		}
	}
	return nil
}
