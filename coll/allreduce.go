package coll

import (
	"context"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/reduce"
	"github.com/ndma/ndma/wire"
)

// Reduction order and reproducibility.
//
// Every host algorithm combines the ranks' contributions in an order
// fixed by the algorithm, the number of ranks, the root (Reduce) and the
// buffer length — never by timing — so for those fixed a result is
// bitwise identical from run to run, and (allreduce) on every rank.
// Different algorithms group the operands differently, so float Sum and
// Prod results agree between algorithms only up to rounding; integer
// results (wrapping Sum and Prod, Min, Max) agree exactly, and so do float
// Min and Max except for which of two equal-comparing values (±0) or
// NaN payloads are kept. AlgoInNet reduces in arrival order at the switch
// unless WithDeterministic(true) asks for member order; only then is it
// reproducible, and it matches no host algorithm bitwise in general.
//
// Where two partial results a (from lower ranks) and b meet, the host
// algorithms compute a ⊕ b (reduce.Apply(a, b)), whichever rank does the
// work, so both partners of an exchange hold the same bits.

// AllreduceBytes reduces send (whole dt elements) element-wise with op
// over all ranks into recv on every rank; send nil means in place (recv
// holds this rank's input, MPI_IN_PLACE). send is not modified. Every
// rank gets the same bits. Allreduce is the typed form.
//
// Algorithms: AlgoInNet (one aggregation through the switch; bitwise
// reproducible only WithDeterministic), AlgoRing (a ring reduce-scatter
// of N blocks of whole elements, then a ring allgather: 2(N−1) steps,
// bandwidth-optimal), AlgoRecursiveDoubling (log2 N exchanges of the
// whole buffer; latency-optimal) and AlgoRabenseifner (recursive-halving
// reduce-scatter, recursive-doubling allgather). For N not a power of
// two, recursive doubling and Rabenseifner first fold the first 2r ranks
// pairwise (r = N − 2^⌊log2 N⌋; the even rank of each pair hands its data
// to the odd one and idles), as MPICH does, and hand the result back at
// the end.
func (c *Communicator) AllreduceBytes(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, opts ...CallOption) error {
	return c.execute(ctx, c.allreducePlan(send, recv, dt, op, opts))
}

// IallreduceBytes is AllreduceBytes's non-blocking form. send and recv
// must not be touched until the request completes.
func (c *Communicator) IallreduceBytes(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, opts ...CallOption) *Request {
	return c.launch(ctx, c.allreducePlan(send, recv, dt, op, opts))
}

// Iallreduce is Allreduce's non-blocking form. send and recv must not be
// touched until the request completes.
func Iallreduce[T Number](ctx context.Context, c *Communicator, send, recv []T, op ReduceOp, opts ...CallOption) *Request {
	if send != nil && len(send) != len(recv) {
		return failed(fmt.Errorf("%w: send %d elements, recv %d", ErrArg, len(send), len(recv)))
	}
	return c.IallreduceBytes(ctx, asBytes(send), asBytes(recv), dtypeOf[T](), op, opts...)
}

func (c *Communicator) allreducePlan(send, recv []byte, dt wire.Dtype, op ReduceOp, opts []CallOption) callPlan {
	seq, err := c.call()
	if err != nil {
		return callPlan{err: err}
	}
	if err := checkReduction("allreduce", len(recv), dt, op); err != nil {
		return callPlan{err: err}
	}
	if send != nil && len(send) != len(recv) {
		return callPlan{err: fmt.Errorf("%w: allreduce: send %d bytes, recv %d", ErrArg, len(send), len(recv))}
	}
	algo, o, err := c.choose(OpAllreduce, len(recv), opts)
	if err != nil {
		return callPlan{err: err}
	}
	if c.hier != nil && len(recv) > 0 {
		if send != nil && sameStart(send, recv) {
			send = nil
		}
		return c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.allreduce(ctx, send, recv, dt, op, opts) })
	}
	return c.allreduceWith(seq, algo, o, send, recv, dt, op)
}

// allreduceWith prepares one allreduce with a resolved algorithm.
func (c *Communicator) allreduceWith(seq uint64, algo Algo, o callOpts, send, recv []byte, dt wire.Dtype, op ReduceOp) callPlan {
	if send != nil && sameStart(send, recv) {
		send = nil
	}
	if len(recv) == 0 {
		return callPlan{}
	}
	if c.size == 1 {
		if send != nil {
			copy(recv, send)
		}
		return callPlan{}
	}
	if algo == AlgoInNet {
		if send == nil { // the switch op reads send while recv fills: keep them apart
			send = append([]byte(nil), recv...)
		}
		return c.switchOps(&endpoint.Op{Kind: endpoint.KindAggregate, Buf: send, Recv: recv, Root: -1,
			Dtype: dt, Alu: op, Deterministic: o.deterministic}, len(recv), dt.Size(), subAggregate)
	}
	var run func(ctx context.Context, seq uint64, buf []byte, dt wire.Dtype, op ReduceOp) error
	switch algo {
	case AlgoRing:
		run = c.allreduceRing
	case AlgoRecursiveDoubling:
		run = c.allreduceRecursiveDoubling
	case AlgoRabenseifner:
		run = c.allreduceRabenseifner
	default:
		return callPlan{err: fmt.Errorf("%w: allreduce has no %s algorithm", ErrArg, algo)}
	}
	return callPlan{host: c.guarded(seq, func(ctx context.Context) error {
		if send != nil {
			copy(recv, send)
		}
		return run(ctx, seq, recv, dt, op)
	})}
}

// allreduceRing reduces buf in place around the ring rank → rank+1. Block
// i holds elements [i·E/N, (i+1)·E/N) of the E elements. Reduce-scatter:
// at step s rank r sends block r−s and folds block r−s−1 from the left
// into its own (own ⊕ incoming), so block b is reduced in the order
// x_{b+N−1} ⊕ (… ⊕ (x_{b+1} ⊕ x_b)) and ends complete at rank b−1.
// Allgather: at step s rank r passes block r+1−s on. Empty blocks (E <
// N) are not sent.
func (c *Communicator) allreduceRing(ctx context.Context, seq uint64, buf []byte, dt wire.Dtype, op ReduceOp) error {
	n, r, es := c.size, c.rank, dt.Size()
	e := len(buf) / es
	block := func(i int) []byte {
		i = (i%n + n) % n
		return buf[i*e/n*es : (i+1)*e/n*es]
	}
	right, left := (r+1)%n, (r-1+n)%n
	tmp := make([]byte, (e+n-1)/n*es)
	for s := range n - 1 {
		sb, rb := block(r-s), block(r-s-1)
		in := tmp[:len(rb)]
		if err := c.exchange(ctx, tag(seq, s), right, sb, left, in); err != nil {
			return err
		}
		reduce.Apply(rb, in, dt, op)
	}
	for s := range n - 1 {
		if err := c.exchange(ctx, tag(seq, n-1+s), right, block(r+1-s), left, block(r-s)); err != nil {
			return err
		}
	}
	return nil
}

// allreduceRecursiveDoubling: after the fold (see AllreduceBytes) the
// 2^k remaining ranks exchange their whole partial result with the rank
// whose new rank differs in bit j, for j = 0, 1, …; both compute
// lower ⊕ higher.
func (c *Communicator) allreduceRecursiveDoubling(ctx context.Context, seq uint64, buf []byte, dt wire.Dtype, op ReduceOp) error {
	f := newFold(c.size, c.rank)
	tmp := make([]byte, len(buf))
	if err := c.foldIn(ctx, seq, f, buf, tmp, dt, op); err != nil {
		return err
	}
	if f.newRank >= 0 {
		for mask, step := 1, 1; mask < f.pof2; mask, step = mask<<1, step+1 {
			pn := f.newRank ^ mask
			peer := f.rankOf(pn)
			if err := c.exchange(ctx, tag(seq, step), peer, buf, peer, tmp); err != nil {
				return err
			}
			combine(buf, tmp, dt, op, f.newRank < pn)
		}
	}
	return c.foldOut(ctx, seq, f, buf)
}

// allreduceRabenseifner: after the fold, recursive halving (MPICH's
// reduce_scatter_allgather): in round j each of the 2^k ranks sends the
// half of its current block range its partner keeps and reduces the
// half it keeps (lower ⊕ higher), until each owns 1/2^k of the elements;
// then recursive doubling gathers the blocks back in reverse.
func (c *Communicator) allreduceRabenseifner(ctx context.Context, seq uint64, buf []byte, dt wire.Dtype, op ReduceOp) error {
	f := newFold(c.size, c.rank)
	tmp := make([]byte, len(buf))
	if err := c.foldIn(ctx, seq, f, buf, tmp, dt, op); err != nil {
		return err
	}
	if f.newRank >= 0 {
		es := dt.Size()
		e, p, me := len(buf)/es, f.pof2, f.newRank
		off := func(i int) int { return i * e / p * es } // start of block i, in bytes
		step := 1
		sendIdx, recvIdx, lastIdx := 0, 0, p
		for mask := 1; mask < p; mask <<= 1 {
			pn := me ^ mask
			peer := f.rankOf(pn)
			half := p / (mask * 2)
			var sa, sb, ra, rb int
			if me < pn {
				sendIdx = recvIdx + half
				sa, sb, ra, rb = sendIdx, lastIdx, recvIdx, sendIdx
			} else {
				recvIdx = sendIdx + half
				sa, sb, ra, rb = sendIdx, recvIdx, recvIdx, lastIdx
			}
			if err := c.exchange(ctx, tag(seq, step), peer, buf[off(sa):off(sb)], peer, tmp[off(ra):off(rb)]); err != nil {
				return err
			}
			combine(buf[off(ra):off(rb)], tmp[off(ra):off(rb)], dt, op, me < pn)
			step++
			sendIdx = recvIdx
			if mask*2 < p { // the last round leaves lastIdx for the allgather
				lastIdx = recvIdx + half
			}
		}
		for mask := p >> 1; mask > 0; mask >>= 1 {
			pn := me ^ mask
			peer := f.rankOf(pn)
			half := p / (mask * 2)
			var sa, sb, ra, rb int
			if me < pn {
				if mask != p/2 {
					lastIdx += half
				}
				recvIdx = sendIdx + half
				sa, sb, ra, rb = sendIdx, recvIdx, recvIdx, lastIdx
			} else {
				recvIdx = sendIdx - half
				sa, sb, ra, rb = sendIdx, lastIdx, recvIdx, sendIdx
			}
			if err := c.exchange(ctx, tag(seq, step), peer, buf[off(sa):off(sb)], peer, buf[off(ra):off(rb)]); err != nil {
				return err
			}
			step++
			if me > pn {
				sendIdx = recvIdx
			}
		}
	}
	return c.foldOut(ctx, seq, f, buf)
}

// fold maps a rank count that is not a power of two onto pof2 ranks: of
// the first 2·rem ranks only the odd ones take part (new rank r/2); the
// others get new rank r−rem.
type fold struct {
	pof2, rem int
	rank      int
	newRank   int // −1: idle (an even rank below 2·rem)
}

func newFold(n, rank int) fold {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	f := fold{pof2: p, rem: n - p, rank: rank}
	switch {
	case rank >= 2*f.rem:
		f.newRank = rank - f.rem
	case rank%2 == 1:
		f.newRank = rank / 2
	default:
		f.newRank = -1
	}
	return f
}

// rankOf is the rank of new rank nr.
func (f fold) rankOf(nr int) int {
	if nr < f.rem {
		return 2*nr + 1
	}
	return nr + f.rem
}

// Tag steps of the fold; the algorithms' rounds use steps 1 and up.
const (
	stepFoldIn  = 0
	stepFoldOut = maxSteps
)

// foldIn: an even rank below 2·rem sends its buffer to rank+1, which
// combines (even ⊕ odd).
func (c *Communicator) foldIn(ctx context.Context, seq uint64, f fold, buf, tmp []byte, dt wire.Dtype, op ReduceOp) error {
	if f.rank >= 2*f.rem {
		return nil
	}
	if f.newRank < 0 {
		return c.send(ctx, f.rank+1, tag(seq, stepFoldIn), buf)
	}
	if err := c.recv(ctx, f.rank-1, tag(seq, stepFoldIn), tmp); err != nil {
		return err
	}
	combine(buf, tmp, dt, op, false)
	return nil
}

// foldOut hands the result back to the ranks that idled.
func (c *Communicator) foldOut(ctx context.Context, seq uint64, f fold, buf []byte) error {
	if f.rank >= 2*f.rem {
		return nil
	}
	if f.newRank < 0 {
		return c.recv(ctx, f.rank+1, tag(seq, stepFoldOut), buf)
	}
	return c.send(ctx, f.rank-1, tag(seq, stepFoldOut), buf)
}

// combine leaves lower ⊕ higher in mine, where mine is the lower operand
// when mineFirst. theirs may be overwritten.
func combine(mine, theirs []byte, dt wire.Dtype, op ReduceOp, mineFirst bool) {
	if mineFirst {
		reduce.Apply(mine, theirs, dt, op)
		return
	}
	reduce.Apply(theirs, mine, dt, op)
	copy(mine, theirs)
}

// exchange sends sbuf to rank to while receiving rbuf from rank from, both
// with tag t; an empty side is skipped (its peer skips it too: message
// sizes follow from the arguments every rank shares).
func (c *Communicator) exchange(ctx context.Context, t uint64, to int, sbuf []byte, from int, rbuf []byte) error {
	switch {
	case len(sbuf) > 0 && len(rbuf) > 0:
		return c.sendrecv(ctx, to, sbuf, from, rbuf, t)
	case len(sbuf) > 0:
		return c.send(ctx, to, t, sbuf)
	case len(rbuf) > 0:
		return c.recv(ctx, from, t, rbuf)
	}
	return nil
}

// checkReduction checks a reduction's element type, operation and length
// in bytes.
func checkReduction(name string, n int, dt wire.Dtype, op ReduceOp) error {
	es := dt.Size()
	switch {
	case es == 0:
		return fmt.Errorf("%w: %s: unknown element type %v", ErrArg, name, dt)
	case op != Sum && op != Prod && op != Min && op != Max:
		return fmt.Errorf("%w: %s: unknown reduction %v", ErrArg, name, op)
	case n%es != 0:
		return fmt.Errorf("%w: %s: %d bytes is not a whole number of %v", ErrArg, name, n, dt)
	}
	return nil
}

// sameStart reports whether a and b (both non-empty or not) begin at the
// same byte: a send buffer that is the receive buffer means in place.
func sameStart(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}
