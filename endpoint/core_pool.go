package endpoint

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/transport/cc"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// Pool accesses: memory requests at pool addresses, sent to the forwarding
// node as self-contained datagrams (wire.ModePool) outside the transport's
// streams. The switch translates each one to a memory node and forwards it
// there; the node answers this endpoint directly. Both sides are here: the
// client (ops with Op.Pool set) and the memory node's server
// (Config.PoolNode).
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

// PoolServe makes an endpoint a memory node of a pool.
type PoolServe struct {
	// Switch is the forwarding node whose pool the node lends to. Pool
	// requests and grants are accepted from this address only (a node
	// answering anyone's FlagReplyTo would be a reflector).
	Switch netip.AddrPort
	// Key is the Store region lent to the pool.
	Key uint64
	// Token authenticates the switch's grants (the fabric token). It must
	// not be empty unless Insecure is set.
	Token []byte
	// Insecure serves the pool without a fabric token: grants are
	// accepted from anyone who can forge the switch's address. The
	// endpoint refuses an empty Token without it (an error wrapping
	// secure.ErrNoToken).
	Insecure bool
	// Replies bounds the reply cache (entries); zero means 65536.
	Replies int
	// ReplyTTL is how long a mutating request's reply is remembered; zero
	// means 30s. It must exceed the clients' op timeout.
	ReplyTTL time.Duration
}

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
	// poolStartupGrace is how long a memory node that just started
	// leaves requests for regions it holds no grant of unanswered,
	// rather than refusing them (see servePool).
	poolStartupGrace = 2 * time.Second
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

	// Server side.
	serve   *PoolServe
	node    *memnode.PoolNode
	replies *memnode.Replies

	started       time.Time // the core's first Step or Poll (a memory node's startup grace)
	chainBuf, fwd []byte    // scratch of chain hops
	rebuilds      map[uint32]*rebuildTask
	now           time.Time // of the current Step or Poll, for internal ops
	reportedTo    uint64    // the switch incarnation the node last reported its grants to

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
	p.rebuilds = make(map[uint32]*rebuildTask)
	p.bufs = netio.Pool{Min: 2048, Keep: maxPoolRaw}
	mtu := c.MTU()
	// Room for the reply-to trailer the switch adds; 8-byte aligned so
	// vector segments hold whole elements.
	p.seg = (mtu - wire.HeaderLen - wire.ReplyToLen) &^ 7
	if p.seg < 8 {
		return fmt.Errorf("endpoint: MTU %d leaves no room for pool requests", mtu)
	}
	if ps := c.cfg.PoolNode; ps != nil {
		node, err := memnode.NewPoolNode(c.store, ps.Key)
		if err != nil {
			return err
		}
		if !ps.Switch.IsValid() {
			return fmt.Errorf("endpoint: PoolNode.Switch is not set")
		}
		if err := secure.CheckToken(ps.Token, ps.Insecure); err != nil {
			return fmt.Errorf("endpoint: PoolNode.Token: %w", err)
		}
		n, ttl := ps.Replies, ps.ReplyTTL
		if n == 0 {
			n = 1 << 16
		}
		if ttl == 0 {
			ttl = 30 * time.Second
		}
		if n < 0 || ttl < 0 {
			return fmt.Errorf("endpoint: PoolNode.Replies and ReplyTTL must not be negative")
		}
		p.serve, p.node, p.replies = ps, node, memnode.NewReplies(n, ttl)
	}
	return nil
}

// PoolSegment is the most bytes one pool request carries or reads.
func (c *Core) PoolSegment() int { return c.pool.seg }

// PoolStats returns the pool counters.
func (c *Core) PoolStats() PoolStats {
	s := c.pool.stats
	if c.pool.replies != nil {
		s.RepliesEvicted = c.pool.replies.Evicted()
		s.GrantsHeld = c.pool.node.Grants()
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
	c.servePool(now, from, &h, payload)
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

// servePool executes a pool request forwarded by the switch and answers
// the client it names.
func (c *Core) servePool(now time.Time, from netip.AddrPort, h *wire.Header, payload []byte) {
	p := &c.pool
	if p.node == nil || from != p.serve.Switch || h.Flags&wire.FlagReplyTo == 0 || h.Flags&wire.FlagAuth != 0 || !c.fromSwitchRole(from) {
		p.stats.Dropped++
		return
	}
	payload, client, err := wire.SplitReplyTo(payload)
	if err != nil {
		p.stats.Dropped++
		return
	}
	if !p.node.HasGrant(h.Group) && now.Sub(p.started) < poolStartupGrace {
		// Just started: the switch may not know yet that this node
		// restarted and still send it the regions of its previous life.
		// Unanswered, the client resends, and by then the switch sends
		// the request to another copy (or answers LOST).
		p.stats.Dropped++
		return
	}
	if h.Op == wire.OpChain {
		c.serveChain(now, client, h, payload)
		return
	}
	var res memnode.Result
	mut := memnode.Mutating(h.Op)
	cached := false
	if mut {
		res, cached = p.replies.Lookup(now, client, h.MsgID, 0)
	}
	switch {
	case cached:
		p.stats.Duplicates++
	case h.Op == wire.OpRead && h.Operand1 > uint64(p.seg+wire.ReplyToLen):
		res.Status = wire.StatusTooLarge
	case h.Op == wire.OpOptim:
		if o, err := wire.ParseOptim(payload); err != nil {
			res.Status = wire.StatusBadOperand
		} else {
			res = p.node.ExecOptim(h, &o, payload[wire.OptimParamsLen:])
		}
		p.replies.Add(now, client, h.MsgID, 0, res)
	default:
		h.Offset = 0 // a pool request is one datagram
		res = p.node.Exec(h, payload)
		if mut {
			p.replies.Add(now, client, h.MsgID, 0, res)
		}
		if mut && res.Status == wire.StatusOK && h.Copies&wire.CopiesDegraded != 0 {
			// The region's other copy missed this write: a restarted
			// switch must take this copy for the current one.
			p.node.MarkDegraded(h.Group)
		}
	}
	if res.Status == wire.StatusOK {
		p.stats.Served++
	} else {
		p.stats.Refused++
	}
	rh := wire.Header{Version: wire.Version, Op: h.Op, Mode: wire.ModePool, Flags: wire.FlagResp,
		Group: h.Group, MsgID: h.MsgID, Status: res.Status, Operand1: res.Old, Copies: h.Copies}
	var data []byte
	if h.Op == wire.OpRead && res.Status == wire.StatusOK {
		data = res.Data
		rh.MsgLen = uint32(len(data))
	}
	c.queueRaw(client, &rh, data)
}

// servePoolControl handles a grant or revoke from the switch. It reports
// whether the request was one (and so is answered).
func (c *Core) servePoolControl(d *transport.Delivery) bool {
	p := &c.pool
	if p.node == nil || d.Peer.Addr != p.serve.Switch || !d.MsgDone || d.Header.Offset != 0 || !c.fromSwitchRole(d.Peer.Addr) {
		return false
	}
	var m ctrl.Msg
	if err := secure.ParseCtrl(d.Payload, &m, p.serve.Token); err != nil {
		return false
	}
	resp := &ctrl.Msg{Type: m.Type, Resp: true}
	st := wire.StatusOK
	switch m.Type {
	case ctrl.PoolGrant:
		err := p.node.Grant(grantOf(&m))
		if err != nil {
			st = wire.StatusOutOfBounds
		} else {
			p.stats.Grants++
		}
	case ctrl.PoolRevoke:
		// Key 0: the switch drops a grant it does not know the key of
		// (one of a region freed while this node was away).
		if m.Key == 0 {
			p.node.RevokeAny(m.Region)
		} else {
			p.node.Revoke(m.Region, m.Key)
		}
		delete(p.rebuilds, m.Region)
		p.stats.Revokes++
	case ctrl.PoolEpoch:
		if !p.node.SetEpoch(m.Region, m.Key, m.Epoch) {
			st = wire.StatusBadKey
		}
	case ctrl.PoolRebuild:
		err := p.node.GrantRebuild(grantOf(&m))
		if err != nil {
			st = wire.StatusOutOfBounds
		} else {
			p.stats.Grants++
			p.rebuilds[m.Region] = &rebuildTask{spec: m.Pool, key: m.Key, column: int(m.Node), base: m.Base}
		}
	case ctrl.PoolRebuildGo:
		t := p.rebuilds[m.Region]
		if t == nil || t.key != m.Key || t.started {
			st = wire.StatusBadKey
		} else {
			c.startRebuild(m.Region, t)
		}
	default:
		return false
	}
	rh := wire.Header{Op: wire.OpControl, Flags: wire.FlagResp, MsgID: d.Header.MsgID, Status: st}
	var buf []byte
	if st == wire.StatusOK {
		var err error
		if buf, err = secure.AppendCtrl(nil, resp, p.serve.Token); err != nil {
			return false
		}
	}
	if _, err := c.eng.Send(d.Peer, &rh, buf, 0); err != nil {
		c.stats.ResponsesDropped++
	}
	return true
}

// SetIdentities gives the core the certified identity of each peer
// address (a security layer's Layer.Peer): from then on a memory node
// takes pool requests and grants only from a switch whose certificate
// says it is one.
func (c *Core) SetIdentities(peer func(netip.AddrPort) (secure.Cert, bool)) { c.idents = peer }

// fromSwitchRole reports whether addr may act as the switch: always
// without identities, else only with a switch's certificate.
func (c *Core) fromSwitchRole(addr netip.AddrPort) bool {
	if c.idents == nil {
		return true
	}
	cert, ok := c.idents(addr)
	return ok && cert.Role == secure.RoleSwitch
}

// grantOf is the grant a ctrl.PoolGrant or ctrl.PoolRebuild gives.
func grantOf(m *ctrl.Msg) memnode.Grant {
	g := memnode.Grant{Region: m.Region, Key: m.Key, Perm: wire.Perm(m.Pool.Perm), Base: m.Base, Len: m.Length,
		Column: int(m.Node), Epoch: m.Epoch,
		Layout: memnode.GrantLayout{Size: m.Pool.Size, Stripe: m.Pool.Stripe, Columns: m.Pool.Columns, Replicas: m.Pool.Replicas},
		Homes:  make([]memnode.GrantHome, len(m.Homes))}
	for i, h := range m.Homes {
		g.Homes[i] = memnode.GrantHome{Addr: h.Addr, Base: h.Base}
	}
	return g
}

// poolReportBytes bounds one ctrl.PoolReport message (it is sent in
// several packets; the switch takes control messages of up to 256 KiB).
const poolReportBytes = 32 << 10

// PoolReports returns the ctrl.PoolReport messages (encoded, with the
// fabric token) that tell the switch incarnation switchInc (from its
// ctrl.PoolNode answer) which grants this memory node holds, the last
// one Final; nil if the node reported to that incarnation already (or
// serves no pool). The caller sends them in order, each after the last
// was answered, and calls PoolReported once all were.
func (c *Core) PoolReports(switchInc uint64) ([][]byte, error) {
	p := &c.pool
	if p.node == nil || switchInc == p.reportedTo {
		return nil, nil
	}
	var msgs [][]byte
	m := &ctrl.Msg{Type: ctrl.PoolReport}
	size := 0
	flush := func(final bool) error {
		m.Final = final
		b, err := secure.AppendCtrl(nil, m, p.serve.Token)
		if err != nil {
			return err
		}
		msgs = append(msgs, b)
		m.Reports, size = m.Reports[:0], 0
		return nil
	}
	for _, g := range p.node.State() {
		e := ctrl.GrantReport{Region: g.Region, Column: uint16(g.Column),
			Pool: ctrl.PoolSpec{Size: g.Layout.Size, Stripe: g.Layout.Stripe, Columns: g.Layout.Columns, Replicas: g.Layout.Replicas, Perm: uint8(g.Perm)},
			Base: g.Base, Length: g.Len, Epoch: g.Epoch, Digest: ctrl.PoolKeyDigest(g.Region, g.Key),
			Rebuilding: g.Rebuilding, Degraded: g.Degraded, Homes: make([]ctrl.PoolHome, len(g.Homes))}
		for i, h := range g.Homes {
			e.Homes[i] = ctrl.PoolHome{Addr: h.Addr, Base: h.Base}
		}
		n := 80 + 30*len(e.Homes)
		if size > 0 && size+n > poolReportBytes {
			if err := flush(false); err != nil {
				return nil, err
			}
		}
		m.Reports = append(m.Reports, e)
		size += n
	}
	if err := flush(true); err != nil {
		return nil, err
	}
	return msgs, nil
}

// PoolReported records that switch incarnation switchInc has the node's
// report (every message PoolReports returned was answered).
func (c *Core) PoolReported(switchInc uint64) { c.pool.reportedTo = switchInc }

// serveChain executes the current hop of a chain and passes the packet to
// the switch for the next hop, or answers the client after the last.
func (c *Core) serveChain(now time.Time, client netip.AddrPort, h *wire.Header, payload []byte) {
	p := &c.pool
	answer := func(st wire.Status, data []byte) {
		if st == wire.StatusOK {
			p.stats.Served++
		} else {
			p.stats.Refused++
		}
		rh := wire.Header{Version: wire.Version, Op: wire.OpChain, Mode: wire.ModePool, Flags: wire.FlagResp,
			Group: h.Group, MsgID: h.MsgID, Status: st, Copies: h.Copies, MsgLen: uint32(len(data))}
		c.queueRaw(client, &rh, data)
	}
	hops, data, err := wire.SplitChain(h, payload)
	if err != nil {
		answer(wire.StatusBadOperand, nil)
		return
	}
	hop := wire.ChainHopAt(hops, int(h.Hop))
	var res memnode.Result
	out := data
	cached := false
	if hop.Op.Mutates() {
		res, cached = p.replies.Lookup(now, client, h.MsgID, h.Hop)
	}
	if cached {
		// Applied before: pass the same data on, do not apply it again.
		p.stats.Duplicates++
	} else {
		res, out = p.node.ExecHop(h, hop.Op, data, p.chainBuf)
		if hop.Op == wire.ChainLoad || hop.Op == wire.ChainApply {
			p.chainBuf = out
		}
		if hop.Op.Mutates() {
			p.replies.Add(now, client, h.MsgID, h.Hop, res)
		}
	}
	if res.Status != wire.StatusOK {
		answer(res.Status, nil)
		return
	}
	if int(h.Hop)+1 == len(hops)/wire.ChainHopLen {
		if hop.Op.Mutates() {
			out = nil
		}
		answer(wire.StatusOK, out)
		return
	}
	fh := wire.Header{Version: wire.Version, Op: wire.OpChain, Mode: wire.ModePool, Flags: wire.FlagReplyTo,
		Group: h.Group, Key: h.Key, MsgID: h.MsgID, Hop: h.Hop + 1, Operand1: h.Operand1, Operand2: h.Operand2,
		Dtype: h.Dtype, Alu: h.Alu}
	b := append(append(p.fwd[:0], hops...), out...)
	b = wire.AppendReplyTo(b, client)
	p.fwd = b
	fh.MsgLen = uint32(len(b))
	c.queueRaw(p.serve.Switch, &fh, b)
	p.stats.Served++
}

// A memory node rebuilding a copy it lost in a restart (fabric's
// POOLREBUILD, POOLREBUILDGO): it reads every stripe its column holds
// through the switch (which serves reads from the other copies), fills
// the bytes no client wrote since the rebuild grant, and reports
// POOLREBUILT.

// rebuildWindow is the stripe reads a rebuild keeps in flight.
const rebuildWindow = 8

type rebuildTask struct {
	spec     ctrl.PoolSpec
	key      uint64
	column   int
	base     uint64
	started  bool
	pieces   []rebuildPiece
	next     int
	inflight int
	failed   bool
}

type rebuildPiece struct {
	off, n, local uint64 // pool offset, length, node-local address
}

// startRebuild lists the stripes column t.column holds and starts reading
// them.
func (c *Core) startRebuild(region uint32, t *rebuildTask) {
	t.started = true
	l, err := poolmap.NewLayout(t.spec.Size, t.spec.Stripe, t.spec.Columns, t.spec.Replicas)
	if err != nil {
		c.endRebuild(region, t, false)
		return
	}
	for s := range l.Stripes() {
		off := s * l.Stripe
		n := min(l.Stripe, l.Size-off)
		for rep := range l.Replicas {
			es, err := l.Extents(off, n, rep, nil)
			if err == nil && len(es) == 1 && es[0].Column == t.column {
				t.pieces = append(t.pieces, rebuildPiece{off: off, n: n, local: t.base + es[0].Local})
			}
		}
	}
	c.pumpRebuild(region, t)
}

func (c *Core) pumpRebuild(region uint32, t *rebuildTask) {
	p := &c.pool
	for !t.failed && t.inflight < rebuildWindow && t.next < len(t.pieces) {
		pc := t.pieces[t.next]
		op := &Op{Kind: KindRead, Peer: p.serve.Switch, Pool: region, Key: t.key, Addr: pc.off,
			Lane: uint16(t.column), Buf: make([]byte, pc.n)}
		op.onDone = func(op *Op) {
			t.inflight--
			if p.rebuilds[region] != t {
				return // revoked meanwhile
			}
			if op.Err != nil || p.node.Fill(region, t.key, pc.local, op.Buf) != nil {
				t.failed = true
			} else {
				p.stats.RebuildBytes += pc.n
			}
			c.pumpRebuild(region, t)
		}
		if err := c.Post(p.now, op); err != nil {
			t.failed = true
			break
		}
		t.inflight++
		t.next++
	}
	if t.inflight == 0 && (t.failed || t.next == len(t.pieces)) {
		c.endRebuild(region, t, !t.failed)
	}
}

// endRebuild stops a rebuild and reports how it ended to the switch.
func (c *Core) endRebuild(region uint32, t *rebuildTask, ok bool) {
	p := &c.pool
	delete(p.rebuilds, region)
	p.node.EndRebuild(region)
	if ok {
		p.stats.Rebuilt++
	} else {
		p.stats.RebuildsFailed++
	}
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolRebuilt, Region: region, Key: t.key, Node: uint16(t.column), Failed: !ok}, p.serve.Token)
	if err != nil {
		return
	}
	op := &Op{Kind: KindControl, Peer: p.serve.Switch, Buf: buf}
	op.onDone = func(*Op) {}
	_ = c.Post(p.now, op)
}
