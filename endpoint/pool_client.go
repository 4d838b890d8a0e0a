package endpoint

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport/cc"
	"github.com/ndma/ndma/wire"
)

// Pool accesses: memory requests at pool addresses, sent to the forwarding
// node as self-contained datagrams (wire.ModePool) outside the transport's
// streams. The switch translates each one to a memory node and forwards it
// there; the node answers this endpoint directly. The client (ops with
// Op.Pool set) is here; the memory node's server (Config.PoolNode) is the
// memory server's (memserver_pool.go).
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
	// Proofs counts the control requests sent again to prove this
	// endpoint's address to a switch that stopped forwarding its pool
	// requests (SetPoolProof).
	Proofs uint64
	// Memory node side: requests (and chain hops) executed with status OK
	// or refused, duplicates answered from the reply cache, pool
	// datagrams dropped (not from the switch, malformed reply-to, or the
	// send queue full), grants and revokes received, replies pushed out
	// of the cache before their TTL, and the grants held now.
	Served, Refused, Duplicates, Dropped uint64
	Grants, Revokes                      uint64
	RepliesEvicted                       uint64
	GrantsHeld                           int
	// Rebuilds of lost copies completed and failed, and bytes copied.
	Rebuilt, RebuildsFailed, RebuildBytes uint64
}

// Limits of the pool client.
const (
	poolMinRTO     = 2 * time.Millisecond
	poolInitRTO    = 50 * time.Millisecond
	poolMaxRTO     = time.Second
	poolInitWindow = 16
	poolMaxWindow  = 1024
	maxPoolRaw     = 8192 // server responses queued between Polls
	maxPoolLanes   = 1024 // lanes kept before idle ones are forgotten
)

type laneKey struct {
	sw    netip.AddrPort
	pool  uint32
	lane  uint16
	chain bool // chains cross many links: their RTT is not a single access's
}

// poolLane is one congestion window, its RTT estimator and its queue of
// ops waiting to send.
type poolLane struct {
	win      cc.Vegas
	inflight int
	queue    []*poolOp
	rtt      cc.RTT
}

type poolOp struct {
	seq   uint64 // post order: timers and timeouts visit ops in it (determinism on simnet)
	op    *Op
	chain []byte // KindChain: the encoded hop list and the first data
	lane  *poolLane
	segs  []poolSeg
	next  int // next segment to send for the first time
	left  int // segments not yet answered
}

type poolSeg struct {
	id       uint64 // request id (0: not sent)
	off, n   uint32
	copies   int               // answers to wait for (Header.Copies of the first)
	from     [2]netip.AddrPort // memory nodes that answered
	sent     time.Time
	deadline time.Time
	rto      time.Duration
	tries    int
	done     bool
}

type poolCore struct {
	seq   uint64
	opSeq uint64
	lanes map[laneKey]*poolLane
	reqs  map[uint64]*poolOp // request id → op
	ops   map[*Op]*poolOp
	seg   int // payload bytes per request
	next  time.Time

	proofs map[netip.AddrPort]*poolProof // by switch (SetPoolProof)

	raw   []netio.Datagram // datagrams to send at the next Poll
	bufs  netio.Pool       // the datagrams' buffers (one class up to 2 KiB); at most maxPoolRaw free per class
	inUse [][]byte         // buffers of the last Poll's datagrams
	stats PoolStats
}

func (c *Core) initPool() error {
	p := &c.pool
	p.lanes = make(map[laneKey]*poolLane)
	p.reqs = make(map[uint64]*poolOp)
	p.ops = make(map[*Op]*poolOp)
	p.bufs = netio.Pool{Min: 2048, Keep: maxPoolRaw}
	mtu := c.MTU()
	// Room for the reply-to trailer the switch adds; 8-byte aligned so
	// vector segments hold whole elements.
	p.seg = (mtu - wire.HeaderLen - wire.ReplyToLen) &^ 7
	if p.seg < 8 {
		return fmt.Errorf("endpoint: MTU %d leaves no room for pool requests", mtu)
	}
	return c.mem.initPool(c.cfg.PoolNode, p.seg, &p.stats)
}

// PoolSegment is the most bytes one pool request carries or reads.
func (c *Core) PoolSegment() int { return c.pool.seg }

// PoolStats returns the pool counters.
func (c *Core) PoolStats() PoolStats {
	s := c.pool.stats
	if c.mem.pool.replies != nil {
		s.RepliesEvicted = c.mem.pool.replies.Evicted()
		s.GrantsHeld = c.mem.pool.node.Grants()
	}
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
	case KindChain:
		if err := c.checkChain(op); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: kind %v at a pool address", ErrBadOp, op.Kind)
	}
	if n == 0 && (op.Kind == KindRead || op.Kind == KindWrite || op.Kind == KindVector || op.Kind == KindOptim) {
		return fmt.Errorf("%w: empty pool access", ErrBadOp)
	}
	p.opSeq++
	po := &poolOp{op: op, seq: p.opSeq}
	if op.Kind == KindChain {
		po.chain = append(wire.AppendChain(nil, op.Chain), op.Buf...)
	}
	if n == 0 {
		po.segs = []poolSeg{{}}
	} else {
		seg := p.seg
		if op.Kind == KindOptim {
			seg = (p.seg - wire.OptimParamsLen) &^ 7
		}
		for off := 0; off < n; off += seg {
			po.segs = append(po.segs, poolSeg{off: uint32(off), n: uint32(min(seg, n-off))})
		}
	}
	po.left = len(po.segs)
	k := laneKey{op.Peer, op.Pool, op.Lane, op.Kind == KindChain}
	l := p.lanes[k]
	if l == nil {
		if len(p.lanes) >= maxPoolLanes {
			// Forget idle lanes (regions long freed, say): the table stays
			// bounded; an idle lane only loses its RTT history.
			for k, l := range p.lanes {
				if l.inflight == 0 && len(l.queue) == 0 {
					delete(p.lanes, k)
				}
			}
		}
		l = &poolLane{win: cc.Vegas{Cwnd: poolInitWindow, Ssthresh: poolMaxWindow}}
		p.lanes[k] = l
	}
	po.lane = l
	c.start(now, op)
	p.ops[op] = po
	l.queue = append(l.queue, po)
	c.pumpLane(now, l)
	return nil
}

// checkChain checks a chain op before it is posted.
func (c *Core) checkChain(op *Op) error {
	n, k := op.ChainLen, len(op.Chain)
	switch {
	case k == 0 || k > wire.MaxChainHops:
		return fmt.Errorf("%w: chain of %d hops (want 1 to %d)", ErrBadOp, k, wire.MaxChainHops)
	case n <= 0 || k*wire.ChainHopLen+n > c.pool.seg:
		return fmt.Errorf("%w: chain of %d hops over %d bytes: more than one %d-byte datagram", ErrBadOp, k, n, c.pool.seg)
	case (op.Chain[0].Op == wire.ChainLoad) != (op.Buf == nil):
		return fmt.Errorf("%w: a chain starts with a load or with data, not both", ErrBadOp)
	case op.Buf != nil && len(op.Buf) != n:
		return fmt.Errorf("%w: chain data of %d bytes, ChainLen %d", ErrBadOp, len(op.Buf), n)
	case op.Recv != nil && len(op.Recv) != n:
		return fmt.Errorf("%w: chain result buffer of %d bytes, ChainLen %d", ErrBadOp, len(op.Recv), n)
	}
	for i, h := range op.Chain {
		if h.Op == 0 || h.Op > wire.ChainAccumulate || (i > 0 && h.Op == wire.ChainLoad) {
			return fmt.Errorf("%w: chain hop %d: op %v", ErrBadOp, i, h.Op)
		}
	}
	return nil
}

// pumpLane sends new segments of l's queued ops while its window allows.
func (c *Core) pumpLane(now time.Time, l *poolLane) {
	for len(l.queue) > 0 && float64(l.inflight) < l.win.Cwnd {
		po := l.queue[0]
		if po.op.finished {
			l.queue = l.queue[1:]
			continue
		}
		c.sendSeg(now, po, po.next)
		po.next++
		if po.next == len(po.segs) {
			l.queue[0] = nil
			l.queue = l.queue[1:]
		}
	}
}

// sendSeg sends segment i of po, or sends it again under the same
// request id (so the memory node recognizes a duplicate).
func (c *Core) sendSeg(now time.Time, po *poolOp, i int) {
	p := &c.pool
	s := &po.segs[i]
	op := po.op
	if s.id != 0 {
		p.stats.Retransmits++
		if s.tries >= 2 {
			c.prove(now, op.Peer)
		}
	} else {
		po.lane.inflight++
		s.rto = po.lane.rto()
		p.seq++
		s.id = p.seq
		p.reqs[s.id] = po
	}
	s.sent = now
	s.tries++
	s.deadline = now.Add(s.rto)
	if p.next.IsZero() || s.deadline.Before(p.next) {
		p.next = s.deadline
	}
	h := wire.Header{Version: wire.Version, Op: op.Kind.opcode(), Mode: wire.ModePool,
		Group: op.Pool, MsgID: s.id, Key: op.Key, Addr: op.Addr + uint64(s.off)}
	var payload []byte
	switch op.Kind {
	case KindRead:
		h.Operand1 = uint64(s.n)
	case KindWrite:
		payload = op.Buf[s.off : s.off+s.n]
	case KindVector:
		h.Dtype, h.Alu = op.Dtype, op.Alu
		payload = op.Buf[s.off : s.off+s.n]
	case KindCAS:
		h.Operand1, h.Operand2 = op.Compare, op.Swap
	case KindFetchAdd:
		h.Operand1 = op.Add
	case KindOptim:
		h.Operand1, h.Dtype = op.Stride, wire.DtypeF32
		po.chain = append(wire.AppendOptim(po.chain[:0], &op.Optim), op.Buf[s.off:s.off+s.n]...)
		payload = po.chain
	case KindChain:
		h.Operand1, h.Operand2 = uint64(op.ChainLen), uint64(len(op.Chain))
		h.Dtype, h.Alu = op.Dtype, op.Alu
		h.Addr = 0
		payload = po.chain
	}
	h.MsgLen = uint32(len(payload))
	c.queueRaw(op.Peer, &h, payload)
	p.stats.Requests++
}

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

// rto is the lane's retransmission timeout: RFC 6298's srtt + 4 rttvar,
// but at least twice srtt. The floor matters: a resent request costs a
// whole request (a chain, all its hops), and with steady delays rttvar
// decays to nothing, so one more packet queued anywhere would otherwise
// fire a spurious timeout.
func (l *poolLane) rto() time.Duration {
	if !l.rtt.Has() {
		return poolInitRTO
	}
	return l.rtt.RTO(0, max(2*l.rtt.SRTT, poolMinRTO), poolMaxRTO)
}

// queueRaw encodes a datagram for the next Poll. It reports false (and
// counts a drop) if too many are queued.
func (c *Core) queueRaw(to netip.AddrPort, h *wire.Header, payload []byte) bool {
	p := &c.pool
	if len(p.raw) >= maxPoolRaw {
		p.stats.Dropped++
		return false
	}
	b, _ := wire.AppendPacket(p.bufs.Get(wire.HeaderLen + len(payload))[:0], h, payload)
	p.raw = append(p.raw, netio.Datagram{Addr: to, Buf: b})
	return true
}

// stepPool handles a datagram whose mode byte says ModePool. It reports
// false if the datagram does not parse (the transport counts it malformed).
func (c *Core) stepPool(now time.Time, from netip.AddrPort, pkt []byte) bool {
	var h wire.Header
	var payload []byte
	var err error
	if c.cfg.Transport.Verified {
		payload, _, err = wire.ParseVerified(pkt, &h)
	} else {
		payload, _, err = wire.Parse(pkt, &h)
	}
	if err != nil {
		return false
	}
	if h.Flags&wire.FlagResp != 0 {
		c.onPoolResponse(now, from, &h, payload)
		return true
	}
	c.mem.servePool(now, from, &h, payload)
	return true
}

func (c *Core) onPoolResponse(now time.Time, from netip.AddrPort, h *wire.Header, payload []byte) {
	p := &c.pool
	po := p.reqs[h.MsgID]
	if po == nil || h.Op != po.op.Kind.opcode() {
		p.stats.LateResponses++
		return
	}
	i := po.find(h.MsgID)
	s := &po.segs[i]
	op := po.op
	// A resent request may reach fewer replicas (one died since): the
	// fewest copies any answer reports is what to wait for.
	if n := max(1, min(int(h.Copies&0xff), len(s.from))); s.copies == 0 || n < s.copies {
		s.copies = n
	}
	if h.Copies&wire.CopiesDegraded != 0 {
		op.Degraded = true
	}
	got, dup := 0, false
	for _, a := range s.from {
		if a.IsValid() {
			dup = dup || a == from
			got++
		}
	}
	if dup {
		p.stats.LateResponses++ // a second answer from the same node
		if got < s.copies {
			return
		}
		// The answers held are all the copies there now are.
	} else {
		p.stats.Responses++
		switch {
		case h.Status != wire.StatusOK:
			op.fail(h.Status)
		case op.Kind == KindRead && len(payload) != int(s.n):
			op.fail(fmt.Errorf("%w: a pool response of %d bytes for a %d-byte stripe", ErrShortRead, len(payload), s.n))
		case op.Kind == KindRead:
			copy(op.Buf[s.off:], payload)
		case op.Kind == KindChain && len(payload) > 0:
			if len(payload) != len(op.Recv) {
				op.fail(fmt.Errorf("%w: a chain's answer of %d bytes for a %d-byte buffer", ErrShortRead, len(payload), len(op.Recv)))
			} else {
				copy(op.Recv, payload)
			}
		default:
			op.Old = h.Operand1
		}
		if op.Err == nil && got+1 < s.copies {
			s.from[got] = from // wait for the other replica
			return
		}
	}
	delete(p.reqs, h.MsgID)
	s.done = true
	po.left--
	l := po.lane
	l.inflight--
	if s.tries == 1 {
		l.rtt.Sample(now.Sub(s.sent))
	}
	l.win.OnAnswer(&poolVegas, &l.rtt)
	if op.Err != nil || po.left == 0 {
		c.finish(op)
	}
	c.pumpLane(now, l)
}

func (po *poolOp) find(id uint64) int {
	for i := range po.segs {
		if po.segs[i].id == id {
			return i
		}
	}
	panic("endpoint: pool request id not in its op")
}

// poolVegas is the lanes' window: it grows (by one per answer in slow
// start, one per window after) while fewer than 2 of the lane's requests
// wait in queues (cwnd × (1 − minRTT/srtt)), and shrinks by one per
// window beyond 8, leaving slow start. Keeping the queues short keeps
// the RTT, and so the retransmission timer, honest: a window that filled
// the queues would make the RTT outgrow the timer and every request be
// sent twice.
var poolVegas = cc.VegasLimits{QueueLow: 2, QueueHigh: 8, Min: 2, Max: poolMaxWindow}

// finishPool releases a finished pool op's requests and window share.
func (c *Core) finishPool(op *Op) {
	p := &c.pool
	po := p.ops[op]
	if po == nil {
		return
	}
	delete(p.ops, op)
	for i := range po.segs {
		s := &po.segs[i]
		if s.id != 0 && !s.done {
			delete(p.reqs, s.id)
			po.lane.inflight--
		}
	}
	c.complete(op)
}

// pollPool resends segments whose timer ran out and returns the pool's
// next timer.
func (c *Core) pollPool(now time.Time) time.Time {
	p := &c.pool
	if p.next.IsZero() || now.Before(p.next) {
		return p.next
	}
	p.next = time.Time{}
	var pumped []*poolLane
	for _, po := range p.sortedOps() {
		halved := false
		for i := range po.segs {
			s := &po.segs[i]
			if s.id == 0 || s.done {
				continue
			}
			if !now.Before(s.deadline) {
				if !halved {
					// One loss event per op and round: halve the window.
					po.lane.win.OnLoss(&poolVegas)
					halved = true
				}
				s.rto = min(2*s.rto, poolMaxRTO)
				c.sendSeg(now, po, i)
			}
			if p.next.IsZero() || s.deadline.Before(p.next) {
				p.next = s.deadline
			}
		}
		pumped = append(pumped, po.lane)
	}
	for _, l := range pumped {
		c.pumpLane(now, l)
	}
	return p.next
}

// sortedOps returns the pool ops in post order, so that what depends on
// visiting them (resends, timeouts) does not depend on map order.
func (p *poolCore) sortedOps() []*poolOp {
	out := make([]*poolOp, 0, len(p.ops))
	for _, po := range p.ops {
		out = append(out, po)
	}
	slices.SortFunc(out, func(a, b *poolOp) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// flushPool appends the queued datagrams to out. Their buffers stay valid
// until the next flush.
func (c *Core) flushPool(out []netio.Datagram) []netio.Datagram {
	p := &c.pool
	for _, b := range p.inUse {
		p.bufs.Put(b)
	}
	clear(p.inUse)
	p.inUse = p.inUse[:0]
	for _, d := range p.raw {
		p.inUse = append(p.inUse, d.Buf)
	}
	out = append(out, p.raw...)
	clear(p.raw)
	p.raw = p.raw[:0]
	return out
}
