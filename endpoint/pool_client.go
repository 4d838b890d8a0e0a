package endpoint

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/internal/poolclient"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Pool accesses: memory requests at pool addresses, sent to the forwarding
// node as self-contained datagrams (wire.ModePool) outside the transport's
// streams. The switch translates each one to a memory node and forwards it
// there; the node answers this endpoint directly. The client (ops with
// Op.Pool set) is here; the memory node's server is the memory server's
// (memnode/server), run by the memory node's engine (memnode/node).
//
// Client reliability is per datagram: every request has its own id (the
// header's MsgID), is resent under the same id after a retransmission
// timeout (RFC 6298 estimator, exponential backoff) until answered or until
// the op's deadline, and answers are matched by id. Ids are never reused,
// so a late answer to an abandoned request matches nothing. Reads are
// idempotent; memory nodes answer duplicates of mutating requests from a
// reply cache (memnode.Replies), so a resent WRITE, CAS, FETCHADD or VECTOR
// is applied once. Congestion control is a window of requests in flight per
// lane (Op.Lane: the pool client uses one per memory node), delay-based
// like TCP Vegas (poolVegas) and halved on a timeout.

// PoolStats counts pool traffic at an endpoint.
type PoolStats struct {
	// Client side: request datagrams sent (retransmissions included),
	// those that were retransmissions, answers matched, and answers that
	// matched nothing (late, or a second answer from the same node).
	Requests, Retransmits, Responses, LateResponses uint64
	// RequestBytes is the bytes of the request datagrams queued
	// (retransmissions included): header and payload, before any seal.
	RequestBytes uint64
	// Proofs counts the control requests sent again to prove this
	// endpoint's address to a switch that stopped forwarding its pool
	// requests (SetPoolProof).
	Proofs uint64
	// Dropped counts the pool datagrams dropped: requests (an endpoint
	// serves no pool: memory nodes, memnode/node, do) and those the send
	// queue had no room for.
	Dropped uint64
}

type poolCore struct {
	cl     *poolclient.Client[*Op]
	seg    int                           // payload bytes per request
	proofs map[netip.AddrPort]*poolProof // by switch (SetPoolProof)
	out    poolclient.Outbox             // datagrams to send at the next Poll
	stats  PoolStats
}

// poolAccess is a pool op in flight: its segments and lane.
type poolAccess = poolclient.Access[*Op]

func (c *Core) initPool() error {
	p := &c.pool
	p.cl = poolclient.New[*Op]((*poolSender)(c))
	mtu := c.MTU()
	// Room for the reply-to trailer the switch adds; 8-byte aligned so
	// vector segments hold whole elements.
	p.seg = (mtu - wire.HeaderLen - wire.ReplyToLen) &^ 7
	if p.seg < 8 {
		return fmt.Errorf("endpoint: MTU %d leaves no room for pool requests", mtu)
	}
	return nil
}

// PoolSegment is the most bytes one pool request carries or reads.
func (c *Core) PoolSegment() int { return c.pool.seg }

// PoolStats returns the pool counters.
func (c *Core) PoolStats() PoolStats {
	s := c.pool.stats
	cs := c.pool.cl.Stats
	s.Requests, s.Retransmits, s.Responses, s.LateResponses = cs.Requests, cs.Retransmits, cs.Responses, cs.LateResponses
	s.Dropped += c.mem.Stats().Pool.Dropped
	return s
}

// postPool starts a pool access: op.Peer is the switch, op.Pool the region,
// op.Key its key, op.Addr the pool address.
func (c *Core) postPool(now time.Time, op *Op) error {
	p := &c.pool
	var n int
	switch op.Kind {
	case KindRead, KindWrite:
		n = len(op.Buf)
	case KindVector:
		es := op.Dtype.Size()
		if es == 0 || len(op.Buf)%es != 0 {
			return fmt.Errorf("%w: vector of %d bytes with dtype %v", ErrBadOp, len(op.Buf), op.Dtype)
		}
		n = len(op.Buf)
	case KindOptim:
		if len(op.Buf)%4 != 0 || op.Stride == 0 {
			return fmt.Errorf("%w: optimizer step with %d gradient bytes, stride %d", ErrBadOp, len(op.Buf), op.Stride)
		}
		n = len(op.Buf)
	case KindCAS, KindFetchAdd:
	case KindFence:
		if op.Fence.Token == 0 {
			return fmt.Errorf("%w: a fence raise with token 0", ErrBadOp)
		}
	case KindChain:
		if err := c.checkChain(op); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: kind %v at a pool address", ErrBadOp, op.Kind)
	}
	if op.Fence.Token != 0 && !op.Kind.opcode().Fenceable() {
		return fmt.Errorf("%w: a fenced %v (only writes, CAS, FetchAdd, vector ops and chains carry a fence)", ErrBadOp, op.Kind)
	}
	if n == 0 && (op.Kind == KindRead || op.Kind == KindWrite || op.Kind == KindVector || op.Kind == KindOptim) {
		return fmt.Errorf("%w: empty pool access", ErrBadOp)
	}
	po := &poolAccess{Op: op, Key: poolclient.LaneKey{Switch: op.Peer, Region: op.Pool, Lane: op.Lane, Chain: op.Kind == KindChain}}
	if op.Kind == KindChain {
		po.Scratch = append(wire.AppendChain(nil, op.Chain), op.Buf...)
	}
	switch {
	case op.Kind == KindChain:
		// One datagram (checkChain), under ChainID if it is set.
		po.Segs = []poolclient.Seg{{ID: op.ChainID}}
		op.ChainID = 0
	case n == 0:
		po.Segs = []poolclient.Seg{{}}
	default:
		seg := p.seg
		if op.Kind == KindOptim {
			seg = (p.seg - wire.OptimParamsLen) &^ 7
		}
		if op.Fence.Token != 0 {
			seg = (p.seg - wire.FenceLen) &^ 7
		}
		for off := 0; off < n; off += seg {
			po.Segs = append(po.Segs, poolclient.Seg{Off: uint32(off), N: uint32(min(seg, n-off))})
		}
	}
	c.start(now, op)
	p.cl.Start(now, po)
	return nil
}

// checkChain checks a chain op before it is posted.
func (c *Core) checkChain(op *Op) error {
	n, k := op.ChainLen, len(op.Chain)
	switch {
	case k == 0 || k > wire.MaxChainHops:
		return fmt.Errorf("%w: chain of %d hops (want 1 to %d)", ErrBadOp, k, wire.MaxChainHops)
	case n <= 0 || k*wire.ChainHopLen+n > c.pool.seg-fenceLen(op.Fence):
		return fmt.Errorf("%w: chain of %d hops over %d bytes: more than one %d-byte datagram", ErrBadOp, k, n, c.pool.seg-fenceLen(op.Fence))
	case (op.Chain[0].Op == wire.ChainLoad) != (op.Buf == nil):
		return fmt.Errorf("%w: a chain starts with a load or with data, not both", ErrBadOp)
	case op.Buf != nil && len(op.Buf) != n:
		return fmt.Errorf("%w: chain data of %d bytes, ChainLen %d", ErrBadOp, len(op.Buf), n)
	case op.Recv != nil && len(op.Recv) != n:
		return fmt.Errorf("%w: chain result buffer of %d bytes, ChainLen %d", ErrBadOp, len(op.Recv), n)
	}
	for i, h := range op.Chain {
		if err := h.Check(); err != nil {
			return fmt.Errorf("%w: chain hop %d: %v", ErrBadOp, i, err)
		}
		if i > 0 && h.Op == wire.ChainLoad {
			return fmt.Errorf("%w: chain hop %d: op %v", ErrBadOp, i, h.Op)
		}
	}
	return nil
}

// fenceLen is the bytes f's trailer takes in a request (none for no
// fence).
func fenceLen(f wire.Fence) int {
	if f.Token == 0 {
		return 0
	}
	return wire.FenceLen
}

// poolSender is the Core as its pool client's Sender.
type poolSender Core

// SendSeg encodes segment i of po's op and queues it.
func (ps *poolSender) SendSeg(now time.Time, po *poolAccess, i int) {
	c := (*Core)(ps)
	s := &po.Segs[i]
	op := po.Op
	h := wire.Header{Version: wire.Version, Op: op.Kind.opcode(), Mode: wire.ModePool,
		Group: op.Pool, MsgID: s.ID, Key: op.Key, Addr: op.Addr + uint64(s.Off)}
	var payload []byte
	switch op.Kind {
	case KindRead:
		h.Operand1 = uint64(s.N)
	case KindWrite:
		payload = op.Buf[s.Off : s.Off+s.N]
	case KindVector:
		h.Dtype, h.Alu = op.Dtype, op.Alu
		payload = op.Buf[s.Off : s.Off+s.N]
	case KindCAS:
		h.Operand1, h.Operand2 = op.Compare, op.Swap
	case KindFetchAdd:
		h.Operand1 = op.Add
	case KindOptim:
		h.Operand1, h.Dtype = op.Stride, wire.DtypeF32
		po.Scratch = append(wire.AppendOptim(po.Scratch[:0], &op.Optim), op.Buf[s.Off:s.Off+s.N]...)
		payload = po.Scratch
	case KindChain:
		op.ChainID = s.ID
		h.Operand1, h.Operand2 = uint64(op.ChainLen), uint64(len(op.Chain))
		h.Dtype, h.Alu = op.Dtype, op.Alu
		h.Addr = 0
		// The hop list and the data (a resend finds a fence trailer
		// after them, appended below).
		payload = po.Scratch[:len(op.Chain)*wire.ChainHopLen+len(op.Buf)]
	}
	if op.Fence.Token != 0 {
		// The fence trailer follows the request's own payload.
		h.Flags |= wire.FlagFence
		po.Scratch = wire.AppendFence(append(po.Scratch[:0], payload...), op.Fence)
		payload = po.Scratch
	}
	h.MsgLen = uint32(len(payload))
	if c.queueRaw(op.Peer, &h, payload) {
		c.pool.stats.RequestBytes += uint64(wire.HeaderLen + len(payload))
	}
}

// Unanswered proves this endpoint's address to sw again (SetPoolProof).
func (ps *poolSender) Unanswered(now time.Time, sw netip.AddrPort) { (*Core)(ps).prove(now, sw) }

// poolProof is a control request that proves this endpoint's address to
// a switch: the switch forwards the pool requests of an address only once
// it acknowledged a control response (or while the answer is small), and
// forgets addresses that stay silent, or all of them when it restarts.
type poolProof struct {
	msg  []byte
	last time.Time
	busy bool
}

// maxPoolProofs bounds the switches SetPoolProof remembers.
const maxPoolProofs = 16

// SetPoolProof gives the control request (encoded, with the fabric
// token; a ctrl.PoolOpen of a region this endpoint uses) that the core
// sends the switch sw again, at most once a second, while pool requests
// to sw go unanswered: its answer proves this endpoint's address again
// (after a switch restart, or a silence longer than the switch's
// PoolClientTTL), and the requests resent after it are forwarded.
func (c *Core) SetPoolProof(sw netip.AddrPort, msg []byte) {
	p := &c.pool
	if p.proofs == nil {
		p.proofs = make(map[netip.AddrPort]*poolProof)
	}
	if pr := p.proofs[sw]; pr != nil {
		pr.msg = append(pr.msg[:0], msg...)
		return
	}
	if len(p.proofs) >= maxPoolProofs {
		for a, pr := range p.proofs {
			if !pr.busy {
				delete(p.proofs, a)
				break
			}
		}
	}
	p.proofs[sw] = &poolProof{msg: append([]byte(nil), msg...)}
}

// prove sends sw the proof SetPoolProof gave, unless one is out or was
// sent less than a second ago.
func (c *Core) prove(now time.Time, sw netip.AddrPort) {
	pr := c.pool.proofs[sw]
	if pr == nil || pr.busy || !pr.last.IsZero() && now.Sub(pr.last) < time.Second {
		return
	}
	pr.busy, pr.last = true, now
	op := &Op{Kind: KindControl, Peer: sw, Buf: pr.msg, Timeout: 5 * time.Second}
	op.onDone = func(*Op) { pr.busy = false }
	if c.Post(now, op) != nil {
		pr.busy = false
		return
	}
	c.pool.stats.Proofs++
}

// queueRaw encodes a datagram for the next Poll. It reports false (and
// counts a drop) if too many are queued.
func (c *Core) queueRaw(to netip.AddrPort, h *wire.Header, payload []byte) bool {
	if !c.pool.out.Queue(to, h, payload) {
		c.pool.stats.Dropped++
		return false
	}
	return true
}

// stepPool handles a datagram whose mode byte says ModePool. It reports
// false if the datagram does not parse (the transport counts it malformed).
func (c *Core) stepPool(now time.Time, from netip.AddrPort, pkt []byte) bool {
	var h wire.Header
	payload, _, err := wire.ParseAfter(pkt, &h, c.cfg.Transport.Verified)
	if err != nil {
		return false
	}
	if h.Flags&wire.FlagResp != 0 {
		c.onPoolResponse(now, from, &h, payload)
		return true
	}
	c.mem.ServePool(now, from, &h, payload)
	return true
}

func (c *Core) onPoolResponse(now time.Time, from netip.AddrPort, h *wire.Header, payload []byte) {
	p := &c.pool
	po, i := p.cl.Match(h.MsgID)
	if po == nil || h.Op != po.Op.Kind.opcode() {
		p.cl.Stats.LateResponses++
		return
	}
	s := &po.Segs[i]
	op := po.Op
	if h.Copies&wire.CopiesDegraded != 0 {
		op.Degraded = true
	}
	dup, more := p.cl.Answer(po, i, from, h.Copies)
	if !dup {
		switch {
		case h.Status == wire.StatusFenced:
			// Not lost: refused for good (a newer holder raised the
			// fence), never resent. Old says the fence's token.
			op.Old = h.Operand1
			op.fail(h.Status)
		case h.Status != wire.StatusOK:
			op.fail(h.Status)
		case op.Kind == KindRead && len(payload) != int(s.N):
			op.fail(fmt.Errorf("%w: a pool response of %d bytes for a %d-byte stripe", ErrShortRead, len(payload), s.N))
		case op.Kind == KindRead:
			copy(op.Buf[s.Off:], payload)
		case op.Kind == KindChain && len(payload) > 0:
			if len(payload) != len(op.Recv) {
				op.fail(fmt.Errorf("%w: a chain's answer of %d bytes for a %d-byte buffer", ErrShortRead, len(payload), len(op.Recv)))
			} else {
				copy(op.Recv, payload)
			}
		default:
			op.Old = h.Operand1
		}
	}
	if more > 0 && op.Err == nil {
		return // wait for the other replica
	}
	p.cl.Complete(now, po, i)
	if op.Err != nil || po.Left() == 0 {
		c.finish(op)
	}
	p.cl.Pump(now, po)
}

// finishPool releases a finished pool op's requests and window share.
func (c *Core) finishPool(op *Op) {
	if c.pool.cl.Release(op) {
		c.complete(op)
	}
}

// pollPool resends segments whose timer ran out and returns the pool's
// next timer.
func (c *Core) pollPool(now time.Time) time.Time { return c.pool.cl.Poll(now) }

// flushPool appends the queued datagrams to out. Their buffers stay valid
// until the next flush.
func (c *Core) flushPool(out []netio.Datagram) []netio.Datagram { return c.pool.out.Flush(out) }
