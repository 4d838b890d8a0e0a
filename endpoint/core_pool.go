package endpoint

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Pool accesses: memory requests at pool addresses, sent to the forwarding
// node as self-contained datagrams (wire.ModePool) outside the transport's
// streams. The switch translates each one to a memory node and forwards it
// there; the node answers this endpoint directly. Both sides are here: the
// client (ops with Op.Pool set) and the memory node's server
// (Config.PoolNode).
//
// Client reliability is per datagram: every request has its own id (the
// header's MsgID), is resent after a retransmission timeout (RFC 6298
// estimator, exponential backoff) until answered or until the op's deadline,
// and answers are matched by id. Ids are never reused, so a late answer to
// an abandoned request matches nothing. Reads are idempotent; memory nodes
// answer duplicates of mutating requests from a reply cache
// (memnode.Replies), so a resent WRITE, CAS, FETCHADD or VECTOR is applied
// once. Congestion control is a window of requests in flight per lane
// (Op.Lane: the pool client uses one per memory node), AIMD: +1 per window
// answered, halved on a timeout.

// PoolServe makes an endpoint a memory node of a pool.
type PoolServe struct {
	// Switch is the forwarding node whose pool the node lends to. Pool
	// requests and grants are accepted from this address only (a node
	// answering anyone's FlagReplyTo would be a reflector).
	Switch netip.AddrPort
	// Key is the Store region lent to the pool.
	Key uint64
	// Token authenticates the switch's grants (the fabric token).
	Token []byte
	// Replies bounds the reply cache (entries); zero means 65536.
	Replies int
	// ReplyTTL is how long a mutating request's reply is remembered; zero
	// means 30s. It must exceed the clients' op timeout.
	ReplyTTL time.Duration
}

// PoolStats counts pool traffic at an endpoint.
type PoolStats struct {
	// Client side.
	Requests, Retransmits, Responses, LateResponses uint64
	// Server side (memory node).
	Served, Refused, Duplicates, Dropped uint64
	Grants, Revokes                      uint64
	RepliesEvicted                       uint64
}

// Limits of the pool client.
const (
	poolMinRTO     = 2 * time.Millisecond
	poolInitRTO    = 50 * time.Millisecond
	poolMaxRTO     = time.Second
	poolInitWindow = 16
	poolMaxWindow  = 1024
	maxPoolRaw     = 8192 // server responses queued between Polls
)

type laneKey struct {
	sw   netip.AddrPort
	pool uint32
	lane uint16
}

// poolLane is one congestion window and its queue of ops waiting to send.
type poolLane struct {
	cwnd, ssthresh float64
	inflight       int
	queue          []*poolOp
}

type poolOp struct {
	op   *Op
	lane *poolLane
	segs []poolSeg
	next int // next segment to send for the first time
	left int // segments not yet answered
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
	lanes map[laneKey]*poolLane
	reqs  map[uint64]*poolOp // request id → op
	ops   map[*Op]*poolOp
	srtt  time.Duration
	rttv  time.Duration
	seg   int // payload bytes per request
	next  time.Time

	// Server side.
	serve   *PoolServe
	node    *memnode.PoolNode
	replies *memnode.Replies

	raw   []netio.Datagram // datagrams to send at the next Poll
	bufs  [][]byte         // free buffers
	inUse [][]byte         // buffers of the last Poll's datagrams
	stats PoolStats
}

func (c *Core) initPool() error {
	p := &c.pool
	p.lanes = make(map[laneKey]*poolLane)
	p.reqs = make(map[uint64]*poolOp)
	p.ops = make(map[*Op]*poolOp)
	mtu := c.cfg.Transport.MTU
	if mtu == 0 {
		mtu = 9000
	}
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
	case KindCAS, KindFetchAdd:
	default:
		return fmt.Errorf("%w: kind %v at a pool address", ErrBadOp, op.Kind)
	}
	if n == 0 && (op.Kind == KindRead || op.Kind == KindWrite || op.Kind == KindVector) {
		return fmt.Errorf("%w: empty pool access", ErrBadOp)
	}
	po := &poolOp{op: op}
	if n == 0 {
		po.segs = []poolSeg{{}}
	} else {
		for off := 0; off < n; off += p.seg {
			po.segs = append(po.segs, poolSeg{off: uint32(off), n: uint32(min(p.seg, n-off))})
		}
	}
	po.left = len(po.segs)
	k := laneKey{op.Peer, op.Pool, op.Lane}
	l := p.lanes[k]
	if l == nil {
		l = &poolLane{cwnd: poolInitWindow, ssthresh: poolMaxWindow}
		p.lanes[k] = l
	}
	po.lane = l
	c.start(now, op)
	p.ops[op] = po
	l.queue = append(l.queue, po)
	c.pumpLane(now, l)
	return nil
}

// pumpLane sends new segments of l's queued ops while its window allows.
func (c *Core) pumpLane(now time.Time, l *poolLane) {
	for len(l.queue) > 0 && float64(l.inflight) < l.cwnd {
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
	} else {
		po.lane.inflight++
		s.rto = p.rto()
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
	}
	h.MsgLen = uint32(len(payload))
	c.queueRaw(op.Peer, &h, payload)
	p.stats.Requests++
}

func (p *poolCore) rto() time.Duration {
	if p.srtt == 0 {
		return poolInitRTO
	}
	return min(max(p.srtt+4*p.rttv, poolMinRTO), poolMaxRTO)
}

// queueRaw encodes a datagram for the next Poll. It reports false (and
// counts a drop) if too many are queued.
func (c *Core) queueRaw(to netip.AddrPort, h *wire.Header, payload []byte) bool {
	p := &c.pool
	if len(p.raw) >= maxPoolRaw {
		p.stats.Dropped++
		return false
	}
	var b []byte
	if n := len(p.bufs); n > 0 {
		b, p.bufs = p.bufs[n-1], p.bufs[:n-1]
	}
	b, _ = wire.AppendPacket(b[:0], h, payload)
	p.raw = append(p.raw, netio.Datagram{Addr: to, Buf: b})
	return true
}

// stepPool handles a datagram whose mode byte says ModePool. It reports
// false if the datagram does not parse (the transport counts it malformed).
func (c *Core) stepPool(now time.Time, from netip.AddrPort, pkt []byte) bool {
	var h wire.Header
	payload, _, err := wire.Parse(pkt, &h)
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
			op.fail(ErrShortRead)
		case op.Kind == KindRead:
			copy(op.Buf[s.off:], payload)
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
		p.sample(now.Sub(s.sent))
	}
	if l.cwnd < l.ssthresh {
		l.cwnd++
	} else {
		l.cwnd += 1 / l.cwnd
	}
	l.cwnd = min(l.cwnd, poolMaxWindow)
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

// sample updates the RTT estimator (RFC 6298).
func (p *poolCore) sample(rtt time.Duration) {
	if p.srtt == 0 {
		p.srtt, p.rttv = rtt, rtt/2
		return
	}
	d := p.srtt - rtt
	if d < 0 {
		d = -d
	}
	p.rttv = (3*p.rttv + d) / 4
	p.srtt = (7*p.srtt + rtt) / 8
}

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
	op.finished = true
	if op.Err == nil {
		c.stats.OpsOK++
	} else {
		c.stats.OpsFailed++
	}
	c.done = append(c.done, op)
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
	for _, po := range p.ops {
		halved := false
		for i := range po.segs {
			s := &po.segs[i]
			if s.id == 0 || s.done {
				continue
			}
			if !now.Before(s.deadline) {
				if !halved {
					// One loss event per op and round: halve the window.
					l := po.lane
					l.ssthresh = max(l.cwnd/2, 2)
					l.cwnd = l.ssthresh
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

// flushPool appends the queued datagrams to out. Their buffers stay valid
// until the next flush.
func (c *Core) flushPool(out []netio.Datagram) []netio.Datagram {
	p := &c.pool
	p.bufs = append(p.bufs, p.inUse...)
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
	if p.node == nil || from != p.serve.Switch || h.Flags&wire.FlagReplyTo == 0 || h.Flags&wire.FlagAuth != 0 {
		p.stats.Dropped++
		return
	}
	payload, client, err := wire.SplitReplyTo(payload)
	if err != nil {
		p.stats.Dropped++
		return
	}
	var res memnode.Result
	mut := memnode.Mutating(h.Op)
	cached := false
	if mut {
		res, cached = p.replies.Lookup(now, client, h.MsgID)
	}
	switch {
	case cached:
		p.stats.Duplicates++
	case h.Op == wire.OpRead && h.Operand1 > uint64(p.seg+wire.ReplyToLen):
		res.Status = wire.StatusTooLarge
	default:
		h.Offset = 0 // a pool request is one datagram
		res = p.node.Exec(h, payload)
		if mut {
			p.replies.Add(now, client, h.MsgID, res)
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
	if p.node == nil || d.Peer.Addr != p.serve.Switch || !d.MsgDone || d.Header.Offset != 0 {
		return false
	}
	var m fabric.CtrlMsg
	if err := fabric.ParseCtrl(d.Payload, &m, p.serve.Token); err != nil {
		return false
	}
	resp := &fabric.CtrlMsg{Type: m.Type, Resp: true}
	st := wire.StatusOK
	switch m.Type {
	case fabric.CtrlPoolGrant:
		err := p.node.Grant(memnode.Grant{Region: m.Region, Key: m.Key, Perm: memnode.Perm(m.Pool.Perm), Base: m.Base, Len: m.Length})
		if err != nil {
			st = wire.StatusOutOfBounds
		} else {
			p.stats.Grants++
		}
	case fabric.CtrlPoolRevoke:
		p.node.Revoke(m.Region, m.Key)
		p.stats.Revokes++
	default:
		return false
	}
	rh := wire.Header{Op: wire.OpControl, Flags: wire.FlagResp, MsgID: d.Header.MsgID, Status: st}
	var buf []byte
	if st == wire.StatusOK {
		var err error
		if buf, err = fabric.AppendCtrl(nil, resp, p.serve.Token); err != nil {
			return false
		}
	}
	if _, err := c.eng.Send(d.Peer, &rh, buf, 0); err != nil {
		c.stats.ResponsesDropped++
	}
	return true
}
