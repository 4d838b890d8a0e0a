package coll

import (
	"context"
	"fmt"

	"github.com/ndma/ndma/endpoint"
)

// Bcast copies buf at root into buf at every other rank. Every rank
// passes a buffer of the same length.
//
// Algorithms: AlgoInNet (the root multicasts once through the switch,
// the others receive), AlgoBinomial (log2 N rounds), AlgoChain (a
// pipeline root → root+1 → … in segments of WithSegment bytes, each rank
// forwarding a segment as soon as it has it) and AlgoScatterAllgather
// (van de Geijn: a binomial scatter of N blocks, then a ring allgather).
//
// As with MPI, Bcast at the root returns once buf may be reused, not
// once every rank has it: with AlgoInNet a message of at most
// endpoint.EagerMulticastMax bytes is copied and returns at once (its
// delivery goes on in the background, and a rank's crash is reported by
// the next call); other ranks return when they have the data.
func (c *Communicator) Bcast(ctx context.Context, buf []byte, root int, opts ...CallOption) error {
	return c.execute(ctx, c.bcastPlan(buf, root, opts))
}

// Ibcast is Bcast's non-blocking form. buf must not be touched until the
// request completes.
func (c *Communicator) Ibcast(ctx context.Context, buf []byte, root int, opts ...CallOption) *Request {
	return c.launch(ctx, c.bcastPlan(buf, root, opts))
}

func (c *Communicator) bcastPlan(buf []byte, root int, opts []CallOption) callPlan {
	seq, err := c.call()
	if err != nil {
		return callPlan{err: err}
	}
	if root < 0 || root >= c.size {
		return callPlan{err: fmt.Errorf("%w: bcast: root %d of %d ranks", ErrArg, root, c.size)}
	}
	algo, o, err := c.choose(OpBcast, len(buf), opts)
	if err != nil {
		return callPlan{err: err}
	}
	if c.hier != nil && len(buf) > 0 {
		return c.hierPlan(func(ctx context.Context, h *hierarchy) error { return h.bcast(ctx, buf, root, opts) })
	}
	return c.bcastWith(seq, algo, o, buf, root)
}

// bcastWith prepares one broadcast with a resolved algorithm.
func (c *Communicator) bcastWith(seq uint64, algo Algo, o callOpts, buf []byte, root int) callPlan {
	if len(buf) == 0 || c.size == 1 {
		return callPlan{}
	}
	switch algo {
	case AlgoInNet:
		if c.rank == root {
			// A small message completes at the root as soon as the
			// transport holds its copy (endpoint.MulticastOptions.Eager),
			// as an MPI root returns from an eager send: the other ranks
			// receive it in the background.
			return c.switchOps(&endpoint.Op{Kind: endpoint.KindMulticast, Buf: buf, Eager: true}, len(buf), 1, subBuf)
		}
		return c.switchOps(&endpoint.Op{Kind: endpoint.KindRecv, From: uint16(root), Buf: buf}, len(buf), 1, subBuf)
	case AlgoBinomial:
		return callPlan{host: c.guarded(seq, func(ctx context.Context) error { return c.bcastBinomial(ctx, seq, buf, root) })}
	case AlgoChain:
		return callPlan{host: c.guarded(seq, func(ctx context.Context) error { return c.bcastChain(ctx, seq, buf, root, o.segment) })}
	case AlgoScatterAllgather:
		return callPlan{host: c.guarded(seq, func(ctx context.Context) error { return c.bcastScatterAllgather(ctx, seq, buf, root) })}
	}
	return callPlan{err: fmt.Errorf("%w: bcast has no %s algorithm", ErrArg, algo)}
}

// bcastBinomial: relative rank v = rank−root receives from v minus its
// lowest set bit, then sends to v+2^k for every 2^k below that bit, all
// sends in flight at once.
func (c *Communicator) bcastBinomial(ctx context.Context, seq uint64, buf []byte, root int) error {
	n := c.size
	v := (c.rank - root + n) % n
	t := tag(seq, 0)
	mask := 1
	for ; mask < n; mask <<= 1 {
		if v&mask != 0 {
			if err := c.recv(ctx, (c.rank-mask+n)%n, t, buf); err != nil {
				return err
			}
			break
		}
	}
	// One send at a time, largest subtree first (as MPICH does): the
	// first child starts forwarding after one full transfer instead of
	// after all of this rank's sends share its uplink.
	w := sendWindow{c: c, max: 1}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			if err := w.send(ctx, (c.rank+mask)%n, t, buf); err != nil {
				return err
			}
		}
	}
	return w.flush(ctx)
}

// chainWindow is how many segments a chain rank keeps in flight to its
// successor.
const chainWindow = 8

// maxSteps bounds the tag steps one call uses (tag keeps 20 bits).
const maxSteps = 1 << 19

// bcastChain pipelines buf along root, root+1, …, root−1 in segments of
// seg bytes (enlarged if there would be more than maxSteps of them).
// Segment k travels with step k. A middle rank receives segments in a
// goroutine and forwards each as soon as it is complete, so receiving
// segment k+1 overlaps forwarding segment k.
func (c *Communicator) bcastChain(ctx context.Context, seq uint64, buf []byte, root, seg int) error {
	n, size := c.size, len(buf)
	v := (c.rank - root + n) % n
	seg = max(seg, (size+maxSteps-1)/maxSteps)
	nseg := (size + seg - 1) / seg
	segment := func(k int) []byte { return buf[k*seg : min((k+1)*seg, size)] }
	prev, next := (c.rank-1+n)%n, (c.rank+1)%n
	if v == n-1 { // the end of the chain only receives
		for k := range nseg {
			if err := c.recv(ctx, prev, tag(seq, k), segment(k)); err != nil {
				return err
			}
		}
		return nil
	}
	w := sendWindow{c: c, max: chainWindow}
	if v == 0 {
		for k := range nseg {
			if err := w.send(ctx, next, tag(seq, k), segment(k)); err != nil {
				return err
			}
		}
		return w.flush(ctx)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan int, nseg)
	var rerr error // written before got is closed
	go func() {
		defer close(got)
		for k := range nseg {
			if err := c.recv(rctx, prev, tag(seq, k), segment(k)); err != nil {
				rerr = err
				return
			}
			got <- k
		}
	}()
	var ferr error
	for k := range got {
		if ferr == nil {
			ferr = w.send(ctx, next, tag(seq, k), segment(k))
			if ferr != nil {
				cancel()
			}
		}
	}
	if ferr != nil {
		return ferr
	}
	if rerr != nil {
		return rerr
	}
	return w.flush(ctx)
}

// bcastScatterAllgather is van de Geijn's broadcast: buf is cut into N
// blocks of ⌈len/N⌉ bytes (the last ones shorter or empty), block i
// belonging to relative rank i; a binomial scatter gives every rank its
// block, then a ring allgather gives every rank all of them. Empty
// blocks are not sent (both sides know their sizes).
func (c *Communicator) bcastScatterAllgather(ctx context.Context, seq uint64, buf []byte, root int) error {
	n, size := c.size, len(buf)
	v := (c.rank - root + n) % n
	bs := (size + n - 1) / n
	blocks := func(a, b int) []byte { return buf[min(a*bs, size):min(b*bs, size)] }
	abs := func(rel int) int { return (rel + root) % n }

	// Scatter: relative rank v gets blocks [v, v+mask) from v−mask, where
	// mask is v's lowest set bit, and hands [v+m, v+2m) to v+m for every
	// m below it.
	t := tag(seq, 0)
	mask := 1
	for ; mask < n; mask <<= 1 {
		if v&mask != 0 {
			if p := blocks(v, v+mask); len(p) > 0 {
				if err := c.recv(ctx, abs(v-mask), t, p); err != nil {
					return err
				}
			}
			break
		}
	}
	// One send at a time, largest subtree first (as MPICH does): the
	// first child starts forwarding after one full transfer instead of
	// after all of this rank's sends share its uplink.
	w := sendWindow{c: c, max: 1}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < n {
			if p := blocks(v+mask, v+2*mask); len(p) > 0 {
				if err := w.send(ctx, abs(v+mask), t, p); err != nil {
					return err
				}
			}
		}
	}
	if err := w.flush(ctx); err != nil {
		return err
	}

	// Ring allgather: at step s, send block v−s right and receive block
	// v−s−1 from the left. A block received is never one being sent.
	right, left := abs(v+1), abs(v-1+n)
	w.max = chainWindow
	for s := range n - 1 {
		t := tag(seq, 1+s)
		sb, rb := (v-s+n)%n, (v-s-1+n)%n
		if p := blocks(sb, sb+1); len(p) > 0 {
			if err := w.send(ctx, right, t, p); err != nil {
				return err
			}
		}
		if p := blocks(rb, rb+1); len(p) > 0 {
			if err := c.recv(ctx, left, t, p); err != nil {
				return err
			}
		}
	}
	return w.flush(ctx)
}

// sendWindow keeps up to max two-sided sends in flight, waiting for the
// oldest before posting more. The data of a send must not change until
// flush returns. After an error, sends still in flight end at their
// timeout (they only read their data).
type sendWindow struct {
	c   *Communicator
	max int
	ops []*endpoint.Op
}

func (w *sendWindow) send(ctx context.Context, to int, t uint64, data []byte) error {
	if len(w.ops) >= w.max {
		if err := w.c.awaitOp(ctx, w.ops[0]); err != nil {
			return err
		}
		w.ops = w.ops[1:]
	}
	op := w.c.sendOp(to, t, data)
	op.Timeout = ctxTimeout(ctx)
	if err := w.c.ep.Start(op, nil); err != nil {
		return err
	}
	w.ops = append(w.ops, op)
	return nil
}

// flush waits for every send in flight.
func (w *sendWindow) flush(ctx context.Context) error {
	for len(w.ops) > 0 {
		if err := w.c.awaitOp(ctx, w.ops[0]); err != nil {
			return err
		}
		w.ops = w.ops[1:]
	}
	return nil
}
