package coll

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ndma/ndma/endpoint"
)

// A sharded communicator (Config.Switches with K > 1 addresses) is a
// member of one group per forwarding node: group 0 on Config.Endpoint at
// Switches[0], which also carries the host algorithms' two-sided
// messages and Barrier, and group i on StripeEndpoints[i−1] at
// Switches[i]. An in-network Allreduce, Reduce, ReduceScatter, Bcast or
// Allgather cuts each message into K stripes of whole elements (stripe
// i holds elements [i·E/K, (i+1)·E/K) of E) and runs stripe i through
// switch i, every member sending each stripe once: each switch carries
// about 1/K of the bytes and spends about 1/K of the CPU. A stripe with
// no element (E < K) is skipped by every member alike. The stripes run
// at once; the call ends when all did, or with the first failure, the
// others then canceled.

// MaxSwitches bounds Config.Switches: the forwarding nodes one
// communicator stripes over.
const MaxSwitches = 16

// shard is the communicator's membership at one forwarding node.
type shard struct {
	ep    *endpoint.Endpoint
	group *endpoint.Group
	sw    netip.AddrPort
}

// stripeOp is one stripe of an in-network call: a group operation for
// shard's switch.
type stripeOp struct {
	shard int
	op    *endpoint.Op
}

// StripeError is the error of a sharded in-network call whose stripe
// failed for a reason other than a rank's (a *RankError is returned as
// it is): the stripe's forwarding node died or went silent
// (endpoint.ErrSwitchSilent, *transport.PeerError). Stripe is its index,
// Switch its address; Unwrap gives the cause.
type StripeError struct {
	Stripe, Stripes int
	Switch          netip.AddrPort
	Err             error
}

func (e *StripeError) Error() string {
	return fmt.Sprintf("coll: stripe %d of %d, through the switch %v, failed: %v", e.Stripe, e.Stripes, e.Switch, e.Err)
}

func (e *StripeError) Unwrap() error { return e.Err }

// checkShards validates Config.Switches and Config.StripeEndpoints and
// returns the switch list (nil without sharding).
func checkShards(cfg *Config) ([]string, error) {
	if len(cfg.Switches) == 0 {
		if len(cfg.StripeEndpoints) > 0 {
			return nil, fmt.Errorf("%w: %d stripe endpoints without Switches", ErrArg, len(cfg.StripeEndpoints))
		}
		return nil, nil
	}
	k := len(cfg.Switches)
	switch {
	case k > MaxSwitches:
		return nil, fmt.Errorf("%w: %d switches, at most %d", ErrArg, k, MaxSwitches)
	case cfg.Switch != "" && cfg.Switch != cfg.Switches[0]:
		return nil, fmt.Errorf("%w: Switch %q is not Switches[0] %q", ErrArg, cfg.Switch, cfg.Switches[0])
	case len(cfg.StripeEndpoints) != k-1:
		return nil, fmt.Errorf("%w: %d switches need %d stripe endpoints (one per switch after the first), got %d", ErrArg, k, k-1, len(cfg.StripeEndpoints))
	}
	seen := map[string]bool{}
	for _, s := range cfg.Switches {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("%w: switch list %q: an empty or repeated address", ErrArg, cfg.Switches)
		}
		seen[s] = true
	}
	eps := map[*endpoint.Endpoint]bool{cfg.Endpoint: true}
	for i, ep := range cfg.StripeEndpoints {
		if ep == nil || eps[ep] {
			return nil, fmt.Errorf("%w: stripe endpoint %d is nil or used twice: each switch needs an endpoint of its own", ErrArg, i+1)
		}
		eps[ep] = true
	}
	cfg.Switch = cfg.Switches[0]
	return cfg.Switches, nil
}

// joinShards joins the job at switches 1..K−1, each on its stripe
// endpoint, as the same rank: every rank joins the switches in the same
// order, so each rendezvous completes. Shard 0 (the group joined on
// c.ep) must be in c.shards already.
func (c *Communicator) joinShards(ctx context.Context, cfg Config, job string) error {
	for i, ep := range cfg.StripeEndpoints {
		ap, err := endpoint.ResolveAddr(cfg.Switches[i+1])
		if err != nil {
			return fmt.Errorf("%w: switch address %v", ErrArg, err)
		}
		g, err := ep.JoinJob(ctx, ap.String(), job, cfg.Size, cfg.Rank, endpoint.FabricOptions{Token: cfg.Token, Insecure: cfg.Insecure})
		if err != nil {
			return fmt.Errorf("coll: rendezvous at switch %d (%v): %w", i+1, ap, err)
		}
		c.shards = append(c.shards, shard{ep: ep, group: g, sw: ap})
	}
	return nil
}

// leaveShards leaves the groups at switches 1..K−1 (the first error is
// returned) and closes the stripe endpoints the communicator opened.
func (c *Communicator) leaveShards(ctx context.Context) error {
	var first error
	for _, s := range c.shards[min(1, len(c.shards)):] {
		if err := s.group.Leave(ctx); err != nil && first == nil {
			first = err
		}
	}
	for _, ep := range c.ownEps {
		ep.Close()
	}
	return first
}

// Switches returns the forwarding nodes in-network collectives stripe
// over (one address without sharding, none without a switch).
func (c *Communicator) Switches() []netip.AddrPort {
	out := make([]netip.AddrPort, len(c.shards))
	for i, s := range c.shards {
		out[i] = s.sw
	}
	return out
}

// stripeBounds returns the byte range [lo, hi) of stripe i of k over n
// bytes of es-byte elements.
func stripeBounds(n, es, k, i int) (lo, hi int) {
	e := n / es
	return i * e / k * es, (i + 1) * e / k * es
}

// stripes cuts one in-network operation over n bytes of es-byte elements
// into one op per non-empty stripe: mk builds stripe [lo, hi)'s op
// (Peer and Group are filled in here).
func (c *Communicator) stripes(n, es int, mk func(lo, hi int) *endpoint.Op) []stripeOp {
	k := len(c.shards)
	var out []stripeOp
	for i := range k {
		lo, hi := stripeBounds(n, es, k, i)
		if lo == hi {
			continue
		}
		op := mk(lo, hi)
		op.Peer, op.Group = c.shards[i].sw, c.shards[i].group.ID()
		out = append(out, stripeOp{shard: i, op: op})
	}
	return out
}

// sharded reports whether in-network calls stripe over several switches.
func (c *Communicator) sharded() bool { return len(c.shards) > 1 }

// switchOps is one in-network operation as a plan: a single op to switch
// 0 (the path of a communicator with one switch) or, sharded, its
// stripes. sub slices op's buffers ([lo, hi) of the n bytes of es-byte
// elements the op works on) for a stripe.
func (c *Communicator) switchOps(op *endpoint.Op, n, es int, sub func(op *endpoint.Op, lo, hi int)) callPlan {
	if !c.sharded() {
		return c.switchPlan(op)
	}
	return callPlan{stripes: c.stripes(n, es, func(lo, hi int) *endpoint.Op {
		s := *op
		sub(&s, lo, hi)
		return &s
	})}
}

// postSwitchOps posts one in-network operation on bt: to switch 0, or
// in stripes (see switchOps).
func (bt *msgBatch) postSwitchOps(op *endpoint.Op, n, es int, sub func(op *endpoint.Op, lo, hi int)) {
	p := bt.c.switchOps(op, n, es, sub)
	if p.gop != nil {
		bt.postSwitch(p.gop)
		return
	}
	for _, s := range p.stripes {
		bt.postOn(s.shard, s.op)
	}
}

// subAggregate slices an aggregation's contribution and result.
func subAggregate(op *endpoint.Op, lo, hi int) {
	if op.Buf != nil {
		op.Buf = op.Buf[lo:hi]
	}
	if op.Recv != nil {
		op.Recv = op.Recv[lo:hi]
	}
}

// subBuf slices a multicast's data or a receive's buffer.
func subBuf(op *endpoint.Op, lo, hi int) { op.Buf = op.Buf[lo:hi] }

// shardOf returns the shard an in-network op went to (0 when none
// matches).
func (c *Communicator) shardOf(op *endpoint.Op) int {
	for i, s := range c.shards {
		if op != nil && op.Peer == s.sw && op.Group == s.group.ID() {
			return i
		}
	}
	return 0
}

// stripeErr wraps the failure of a sharded call's stripe that no rank
// caused in a *StripeError naming the stripe's switch.
func (c *Communicator) stripeErr(err error, op *endpoint.Op) error {
	var re *RankError
	if err == nil || !c.sharded() || errors.As(err, &re) || op == nil || op.Kind == endpoint.KindSendMsg || op.Kind == endpoint.KindRecvMsg {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, endpoint.ErrCanceled) || errors.Is(err, ErrArg) {
		return err
	}
	i := c.shardOf(op)
	return &StripeError{Stripe: i, Stripes: len(c.shards), Switch: c.shards[i].sw, Err: err}
}

// runStripes posts a plan's stripes in call order and waits for them.
func (c *Communicator) runStripes(ctx context.Context, ops []stripeOp) error {
	bt := newMsgBatch(ctx, c)
	for _, s := range ops {
		bt.postOn(s.shard, s.op)
	}
	return bt.wait(ctx)
}

// launchStripes posts a plan's stripes on the caller's goroutine (the
// switches match a member's operations in posting order) and returns a
// request that waits for them.
func (c *Communicator) launchStripes(ctx context.Context, ops []stripeOp) *Request {
	if err := ctx.Err(); err != nil {
		return failed(err)
	}
	bt := newMsgBatch(ctx, c)
	for _, s := range ops {
		bt.postOn(s.shard, s.op)
	}
	return start(ctx, bt.wait)
}
