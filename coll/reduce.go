package coll

import (
	"context"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/reduce"
	"github.com/ndma/ndma/wire"
)

// ReduceBytes reduces send (whole dt elements) element-wise with op over
// all ranks into recv at root. recv is ignored at the other ranks and may
// be nil there. At the root, send nil means in place (recv holds the
// root's input, MPI_IN_PLACE) and otherwise len(send) must equal
// len(recv); send is never modified. Reduce is the typed form.
//
// Algorithms: AlgoInNet (one aggregation through the switch, delivered
// to the root only; bitwise reproducible only WithDeterministic) and
// AlgoBinomial: with relative ranks v = rank−root, rank v receives the
// partial results of v+1, v+2, v+4, … (while below its lowest set bit),
// combining each as acc ⊕ child, then sends acc to v minus that bit. The
// root thus computes, for N = 8, ((x0⊕x1)⊕(x2⊕x3))⊕((x4⊕x5)⊕(x6⊕x7)) in
// relative ranks: a fixed order, so results are bitwise reproducible.
func (c *Communicator) ReduceBytes(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, root int, opts ...CallOption) error {
	return c.execute(ctx, c.reducePlan(send, recv, dt, op, root, opts))
}

// IreduceBytes is ReduceBytes's non-blocking form. send and recv must not
// be touched until the request completes.
func (c *Communicator) IreduceBytes(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, root int, opts ...CallOption) *Request {
	return c.launch(ctx, c.reducePlan(send, recv, dt, op, root, opts))
}

// Ireduce is Reduce's non-blocking form. send and recv must not be
// touched until the request completes.
func Ireduce[T Number](ctx context.Context, c *Communicator, send, recv []T, op ReduceOp, root int, opts ...CallOption) *Request {
	return c.IreduceBytes(ctx, asBytes(send), asBytes(recv), dtypeOf[T](), op, root, opts...)
}

func (c *Communicator) reducePlan(send, recv []byte, dt wire.Dtype, op ReduceOp, root int, opts []CallOption) callPlan {
	seq, err := c.call()
	if err != nil {
		return callPlan{err: err}
	}
	if root < 0 || root >= c.size {
		return callPlan{err: fmt.Errorf("%w: reduce: root %d of %d ranks", ErrArg, root, c.size)}
	}
	n := len(send)
	if c.rank == root {
		if send != nil && len(send) != len(recv) {
			return callPlan{err: fmt.Errorf("%w: reduce: send %d bytes, recv %d", ErrArg, len(send), len(recv))}
		}
		n = len(recv)
	}
	if err := checkReduction("reduce", n, dt, op); err != nil {
		return callPlan{err: err}
	}
	algo, o, err := c.choose(OpReduce, n, opts)
	if err != nil {
		return callPlan{err: err}
	}
	if c.hier != nil && n > 0 {
		if c.rank == root && send != nil && sameStart(send, recv) {
			send = nil
		}
		return c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.reduce(ctx, send, recv, dt, op, root, opts) })
	}
	return c.reduceWith(seq, algo, o, send, recv, dt, op, root)
}

// reduceWith prepares one reduce with a resolved algorithm (arguments
// checked).
func (c *Communicator) reduceWith(seq uint64, algo Algo, o callOpts, send, recv []byte, dt wire.Dtype, op ReduceOp, root int) callPlan {
	isRoot := c.rank == root
	if isRoot && send != nil && sameStart(send, recv) {
		send = nil
	}
	if !isRoot {
		recv = nil
	}
	if (isRoot && len(recv) == 0) || (!isRoot && len(send) == 0) {
		return callPlan{}
	}
	if c.size == 1 {
		if send != nil {
			copy(recv, send)
		}
		return callPlan{}
	}
	switch algo {
	case AlgoInNet:
		if isRoot && send == nil { // keep the contribution apart from the result
			send = append([]byte(nil), recv...)
		}
		return c.switchOps(&endpoint.Op{Kind: endpoint.KindAggregate, Buf: send, Recv: recv, Root: root,
			Dtype: dt, Alu: op, Deterministic: o.deterministic}, len(send), dt.Size(), subAggregate)
	case AlgoBinomial:
		return callPlan{host: c.guarded(seq, func(ctx context.Context) error { return c.reduceBinomial(ctx, seq, send, recv, dt, op, root) })}
	}
	return callPlan{err: fmt.Errorf("%w: reduce has no %s algorithm", ErrArg, algo)}
}

// reduceBinomial: see ReduceBytes for the order.
func (c *Communicator) reduceBinomial(ctx context.Context, seq uint64, send, recv []byte, dt wire.Dtype, op ReduceOp, root int) error {
	n := c.size
	v := (c.rank - root + n) % n
	t := tag(seq, 0)
	acc, owned := send, false // acc is send until something is folded in
	if c.rank == root {
		if send != nil {
			copy(recv, send)
		}
		acc, owned = recv, true
	}
	var tmp []byte
	for mask := 1; mask < n; mask <<= 1 {
		if v&mask != 0 {
			return c.send(ctx, (c.rank-mask+n)%n, t, acc)
		}
		if v+mask >= n {
			continue
		}
		if tmp == nil {
			tmp = make([]byte, len(acc))
		}
		if err := c.recv(ctx, (c.rank+mask)%n, t, tmp); err != nil {
			return err
		}
		if !owned {
			acc, owned = append([]byte(nil), acc...), true
		}
		reduce.Apply(acc, tmp, dt, op)
	}
	return nil
}
