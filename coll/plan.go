package coll

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ndma/ndma/endpoint"
)

// A collective call is planned before it runs: its algorithm is chosen
// (an option, NDMA_ALGO_<OP>, or the Tuner: resolve), the operation's
// ...Plan method builds a callPlan with it, and the plan is executed on
// the caller's goroutine (execute) or launched as a non-blocking call
// (launch).

// Algorithm returns the algorithm a call of op with opts would run for a
// message of bytes per rank (the whole vector for Reduce and Allreduce,
// one rank's block for the others): the option, NDMA_ALGO_<OP> or the
// tuner's pick, with the tuner's host choice in place of innet when the
// communicator has no switch. Benchmarks use it to show what auto chose.
func (c *Communicator) Algorithm(op Operation, bytes int, opts ...CallOption) (Algo, error) {
	if _, ok := Algorithms[op]; !ok {
		return "", fmt.Errorf("%w: unknown operation %q", ErrArg, op)
	}
	a, _, err := c.resolve(op, bytes, opts)
	return a, err
}

// choose resolves the algorithm of one call (resolve) and logs it.
func (c *Communicator) choose(op Operation, bytes int, opts []CallOption) (Algo, callOpts, error) {
	a, o, err := c.resolve(op, bytes, opts)
	if err == nil {
		c.log.Debug("coll: algorithm", "op", op, "bytes", bytes, "ranks", c.size, "algo", a)
	}
	return a, o, err
}

// resolve picks the algorithm of one call: an explicit option, then
// NDMA_ALGO_<OP>, then the tuner; an in-network choice without a switch
// falls back to the tuner's host choice.
func (c *Communicator) resolve(op Operation, bytes int, opts []CallOption) (Algo, callOpts, error) {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	a := o.algo
	if a == "" || a == AlgoAuto {
		if env := os.Getenv("NDMA_ALGO_" + strings.ToUpper(string(op))); env != "" {
			e, err := ParseAlgo(env)
			if err != nil {
				return "", o, fmt.Errorf("NDMA_ALGO_%s: %w", strings.ToUpper(string(op)), err)
			}
			a = e
		}
	}
	if a == "" || a == AlgoAuto {
		a = c.tuner.Choose(op, bytes, c.size, c.group != nil)
	}
	if !Supported(op, a) {
		return "", o, fmt.Errorf("%w: %s has no %s algorithm", ErrArg, op, a)
	}
	if a == AlgoInNet && c.group == nil {
		if o.algo == AlgoInNet {
			return "", o, ErrNoSwitch
		}
		a = c.tuner.Choose(op, bytes, c.size, false)
	}
	if o.segment <= 0 {
		o.segment = 16 << 10
	}
	return a, o, nil
}

// callPlan is one collective call, prepared: an in-network operation to
// post at the switch, or a host algorithm to run (neither: nothing to do),
// or an error to report.
type callPlan struct {
	gop *endpoint.Op
	// stripes: the operation of a sharded communicator, one op per
	// switch that has a stripe of it (shard.go).
	stripes []stripeOp
	host    func(ctx context.Context) error
	err     error
}

// execute runs a plan on the caller's goroutine. A switch operation is
// run with endpoint.Do, so ending ctx cancels it.
func (c *Communicator) execute(ctx context.Context, p callPlan) error {
	switch {
	case p.err != nil:
		return p.err
	case p.gop != nil:
		return c.rankErr(c.ep.Do(ctx, p.gop), p.gop)
	case len(p.stripes) > 0:
		return c.runStripes(ctx, p.stripes)
	case p.host != nil:
		return p.host(ctx)
	}
	return nil
}

// launch starts a plan as a non-blocking collective. The switch matches
// a member's group operations in the order they are posted, so a switch
// operation is posted here, on the caller's goroutine, in call order; a
// goroutine only waits for it, and cancels it if ctx ends first.
func (c *Communicator) launch(ctx context.Context, p callPlan) *Request {
	switch {
	case p.err != nil:
		return failed(p.err)
	case p.gop != nil:
		if err := ctx.Err(); err != nil {
			return failed(err)
		}
		p.gop.Timeout = ctxTimeout(ctx)
		if err := c.ep.Start(p.gop, nil); err != nil {
			return failed(err)
		}
		op := p.gop
		if ctx.Value(inlineKey{}) != nil {
			return &Request{done: closedChan, err: c.awaitOp(ctx, op)}
		}
		// No goroutine: the op's completion completes the request, and
		// the context's end cancels the op.
		stop := context.AfterFunc(ctx, func() { c.ep.Cancel(op) })
		return &Request{done: op.Done(), op: true, result: func() error {
			stop()
			if op.Err != nil && ctx.Err() != nil && errors.Is(op.Err, endpoint.ErrCanceled) {
				return ctx.Err()
			}
			return c.rankErr(op.Err, op)
		}}
	case len(p.stripes) > 0:
		return c.launchStripes(ctx, p.stripes)
	case p.host != nil:
		return start(ctx, p.host)
	}
	return failed(nil)
}

// switchPlan completes a group operation (kind, buffers, dtype...) with
// the switch's address and the group, as a plan.
func (c *Communicator) switchPlan(op *endpoint.Op) callPlan {
	op.Peer, op.Group = c.swAP, c.group.ID()
	return callPlan{gop: op}
}

// ctxTimeout is the time left before ctx's deadline (zero: none, the
// endpoint's OpTimeout applies).
func ctxTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Nanosecond)
	}
	return 0
}

// awaitOp waits for an op started with Start, or for ctx: then the op is
// canceled, so once awaitOp returns the endpoint no longer touches its
// buffers.
func (c *Communicator) awaitOp(ctx context.Context, op *endpoint.Op) error {
	c.ep.Drive(ctx, func() bool { return closed(op.Done()) })
	select {
	case <-op.Done():
		return c.rankErr(op.Err, op)
	case <-ctx.Done():
		c.ep.Cancel(op)
		<-op.Done()
		return ctx.Err()
	}
}
