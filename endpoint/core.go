package endpoint

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Stats counts what the core did.
type Stats struct {
	Transport                       transport.Stats
	OpsPosted, OpsOK, OpsFailed     uint64
	RequestsServed, RequestsRefused uint64 // one-sided requests served here (status OK, any other)
	ResponsesDropped                uint64 // responder could not queue a response
	UnmatchedResponses              uint64 // response for no outstanding op (late or forged)
	// FragmentsRefused counts fragments that contradicted the message
	// they join (ErrBadFragment) and were dropped; FragmentsDropped those
	// of messages whose receive had already ended (failed or canceled),
	// and events or group traffic for groups this core is not in.
	FragmentsRefused, FragmentsDropped uint64
	// ForeignGroup counts datagrams of a group that came from another
	// address than the group's forwarding node (SetGroupSwitch).
	ForeignGroup uint64
	OpsByKind    [8]uint64
	Pool         PoolStats
}

type inKey struct {
	peer transport.PeerID
	id   uint64
}

// Core is the sans-I/O heart of an endpoint: the transport engine, the
// table of outstanding operations, and the memory server
// (memnode/server) that executes peers' requests against the local
// Store. Not safe for concurrent use.
type Core struct {
	cfg       Config
	eng       *transport.Engine
	mem       *server.Server
	ops       map[uint64]*Op
	done      []*Op // completed since the last Poll
	doneSpare []*Op
	nextDL    time.Time // earliest op deadline (may be early)
	now       time.Time // of the current Receive (admission runs inside it)

	// Group state (core_group.go).
	gops    map[gopKey]*Op
	joined  map[uint32]uint16         // groups this core is a member of (SetMember)
	groupSw map[uint32]netip.AddrPort // the forwarding node of a group (SetGroupSwitch)
	// swHeard: when a datagram last came from each of the groups'
	// forwarding nodes (zero: none yet), a sign of life (switchHeard).
	// An entry per address in groupSw.
	swHeard     map[netip.AddrPort]time.Time
	unexp       map[unexpKey]*unexpected
	unexpUse    [2]unexpUse // buffered unexpected messages: [0] all, [1] from strangers
	unexpSweep  time.Time   // earliest next sweep of idle partial unexpected messages
	anyIn       map[inKey]*Request
	anyInBytes  int
	anySweep    time.Time // earliest next sweep of idle partial requests
	serving     int       // requests handed out by Requests and not yet answered
	requests    []*Request
	mcSeq       map[uint32]uint64 // per group: last multicast id sent
	eagerOut    int               // eager multicasts and sends not yet acknowledged
	aggSeq      map[uint32]uint64 // per group: last aggregation id
	rxSeq       map[gopKey]uint64 // per (group, sender): last multicast id received
	rxWhole     map[gopKey]uint64 // per (group, sender): latest multicast id here whole
	deadMembers map[gopKey]*MemberError
	// brokenGroups: per group, the first member crash the switch reported
	// (one entry per joined group, freed by LeaveGroup): two-sided
	// messages bound to the group fail with it (memberDead).
	brokenGroups map[uint32]*MemberError
	admitFn      func(*transport.Delivery) bool

	// Two-sided messages (core_msg.go).
	sendSeq  map[msgStream]uint64
	recvSeq  map[msgStream]uint64
	msgPeers map[netip.AddrPort]int // streams in sendSeq and recvSeq per peer: the established sources
	recvs    map[msgMatch]*Op
	unexpMsg map[msgMatch]*unexpected
	recvID   uint64
	// eagerFailed: per peer, why an eager send to it was not delivered
	// (at most maxEagerFailed peers, until ForgetPeer): later two-sided
	// operations with that peer fail with it.
	eagerFailed map[netip.AddrPort]error

	pool  poolCore
	stats Stats
}

// MTU is the largest datagram the core's transport sends, in bytes.
func (c *Core) MTU() int {
	if c.cfg.Transport.MTU == 0 {
		return transport.DefaultMTU
	}
	return c.cfg.Transport.MTU
}

// NewCore returns a core.
func NewCore(cfg Config) (*Core, error) {
	cfg = cfg.WithDefaults()
	if cfg.OpTimeout < 0 || cfg.MaxOps < 0 || cfg.MaxUnexpected < 0 || cfg.MaxResponse < 0 || cfg.MaxIncoming < 0 ||
		cfg.MaxUnexpectedMsgs < 0 || cfg.MaxIncomingBytes < 0 {
		return nil, fmt.Errorf("endpoint: OpTimeout, MaxOps and the Max* bounds must not be negative")
	}
	eng, err := transport.New(cfg.Transport)
	if err != nil {
		return nil, err
	}
	st := cfg.Store
	if st == nil {
		if st, err = memnode.NewStore(memnode.Config{}); err != nil {
			return nil, err
		}
	}
	c := &Core{cfg: cfg, eng: eng, ops: make(map[uint64]*Op)}
	c.initGroups()
	c.initMsgs()
	if err := c.initPool(); err != nil {
		return nil, err
	}
	if c.mem, err = server.New(server.Config{Store: st, Segment: c.pool.seg, DeadTimeout: c.deadTimeout()}, (*memHost)(c)); err != nil {
		return nil, err
	}
	return c, nil
}

// Store is the local memory served to peers.
func (c *Core) Store() *memnode.Store { return c.mem.Store() }

// Stats returns the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.Transport = c.eng.Stats()
	s.Pool = c.PoolStats()
	ms := c.mem.Stats()
	s.RequestsServed += ms.RequestsServed
	s.RequestsRefused += ms.RequestsRefused
	s.ResponsesDropped += ms.ResponsesDropped
	s.FragmentsRefused += ms.FragmentsRefused
	return s
}

// Outstanding is the number of operations posted and not yet completed.
func (c *Core) Outstanding() int { return len(c.ops) + c.pool.cl.Len() }

// inFlight is the number of operations of every kind posted and not yet
// completed (what MaxOps bounds).
func (c *Core) inFlight() int { return len(c.ops) + len(c.gops) + c.pool.cl.Len() }

// Idle reports whether the core holds no operation, no message queued or
// in flight, and no partially received request: nothing is retained.
func (c *Core) Idle() bool {
	return len(c.ops) == 0 && len(c.gops) == 0 && c.pool.cl.Len() == 0 && c.eng.Pending() == 0 && c.mem.InRequests() == 0
}

// Post starts op at time now. Errors in the op itself (bad kind, bad
// vector length, queue full) are returned immediately and the op is not
// posted.
func (c *Core) Post(now time.Time, op *Op) error {
	if op.posted && !op.finished {
		return fmt.Errorf("%w: op already in flight", ErrBadOp)
	}
	if c.inFlight() >= c.cfg.MaxOps {
		return transport.ErrQueueFull
	}
	if op.Pool != 0 {
		return c.postPool(now, op)
	}
	if op.Fence.Token != 0 || op.Kind == KindFence {
		return fmt.Errorf("%w: fences are for pool accesses (Op.Pool)", ErrBadOp)
	}
	switch op.Kind {
	case KindMulticast, KindRecv, KindAggregate:
		return c.postGroup(now, op)
	case KindRecvMsg:
		c.postRecvMsg(now, op)
		return nil
	}
	to := transport.PeerID{Addr: op.Peer}
	h := wire.Header{Op: op.Kind.opcode(), Key: op.Key, Addr: op.Addr}
	var payload []byte
	switch op.Kind {
	case KindRead:
		h.Operand1 = uint64(len(op.Buf))
	case KindWrite:
		payload = op.Buf
	case KindCAS:
		h.Operand1, h.Operand2 = op.Compare, op.Swap
	case KindFetchAdd:
		h.Operand1 = op.Add
	case KindVector:
		es := op.Dtype.Size()
		if es == 0 || len(op.Buf)%es != 0 {
			return fmt.Errorf("%w: vector of %d bytes with dtype %v", ErrBadOp, len(op.Buf), op.Dtype)
		}
		h.Dtype, h.Alu = op.Dtype, op.Alu
		payload = op.Buf
	case KindNop:
	case KindControl:
		payload = op.Buf
	case KindAnycast:
		to = transport.PeerID{Addr: op.Peer, Group: op.Group, Member: wire.MemberAll, Mode: wire.ModeAnycast}
		payload = op.Buf
	case KindSendMsg:
		if me := c.msgPeerGone(op); me != nil {
			// The switch reported the member gone: fail now rather than
			// resend to it until the transport gives up.
			c.failPosted(now, op, me)
			return nil
		}
		if err := c.eagerFailure(op.Peer); err != nil {
			c.failPosted(now, op, err)
			return nil
		}
		h = c.msgHeader(op)
		payload = op.Buf
		if op.Eager && len(payload) <= EagerSendMax && c.eagerOut < eagerMaxOut && c.eng.PeerMessages(to) < eagerBacklog {
			return c.postEagerSend(now, op, &h)
		}
	default:
		return fmt.Errorf("%w: kind %v", ErrBadOp, op.Kind)
	}
	id, err := c.eng.Send(to, &h, payload, 0)
	if err != nil {
		if op.Kind == KindSendMsg {
			c.unsendSeq(op)
		}
		return err
	}
	op.msgID = id
	c.start(now, op)
	c.ops[id] = op
	return nil
}

// start resets op's results and arms its deadline.
func (c *Core) start(now time.Time, op *Op) {
	op.posted, op.finished, op.acked = true, false, false
	op.Err, op.Old, op.asm, op.Resp, op.Degraded = nil, 0, reassembly{}, nil, false
	t := op.Timeout
	if t <= 0 && !op.Kind.longRunning() {
		t = c.cfg.OpTimeout
	}
	op.deadline, op.timeoutAt, op.idleAt = time.Time{}, time.Time{}, time.Time{}
	if t > 0 {
		op.timeoutAt = now.Add(t)
	}
	if op.Kind == KindRecvMsg && op.Idle > 0 {
		op.idleAt = now.Add(op.Idle)
	}
	c.armDeadline(op)
}

// armDeadline sets op's deadline to the earlier of its timeout and its
// idle bound and makes sure Poll looks at it by then.
func (c *Core) armDeadline(op *Op) {
	op.deadline = op.timeoutAt
	if !op.idleAt.IsZero() && (op.deadline.IsZero() || op.idleAt.Before(op.deadline)) {
		op.deadline = op.idleAt
	}
	if !op.deadline.IsZero() && (c.nextDL.IsZero() || op.deadline.Before(c.nextDL)) {
		c.nextDL = op.deadline
	}
	c.stats.OpsPosted++
	c.stats.OpsByKind[op.Kind&7]++
}

// Cancel abandons op: it completes with ErrCanceled (reported by the next
// Poll). A response that arrives later is ignored.
func (c *Core) Cancel(op *Op) {
	if !op.posted || op.finished {
		return
	}
	op.fail(c.sealHint(op, ErrCanceled))
	c.finish(op)
}

// sealHint returns err, or err with transport.ErrSealRequired when op's
// peer said it takes sealed datagrams only (transport.Engine.SealRequired):
// what explains an operation that got no answer.
func (c *Core) sealHint(op *Op, err error) error {
	if op.Peer.IsValid() && c.eng.SealRequired(op.Peer) {
		return fmt.Errorf("%w: %w", err, transport.ErrSealRequired)
	}
	return err
}

func (c *Core) finish(op *Op) {
	if op.Pool != 0 {
		c.finishPool(op)
		return
	}
	if op.gkey != (gopKey{}) {
		c.finishGroup(op)
		return
	}
	delete(c.ops, op.msgID)
	if op.Err != nil {
		// Timed out, canceled or failed: stop (re)sending the request so
		// op.Buf is free for the caller once the op completes.
		c.eng.Abandon(transport.PeerID{Addr: op.Peer}, op.msgID)
	}
	c.complete(op)
}

// complete marks a finished op done, counts it and hands it to its
// internal callback or to the next Poll.
func (c *Core) complete(op *Op) {
	op.finished = true
	if op.Err == nil {
		c.stats.OpsOK++
	} else {
		c.stats.OpsFailed++
	}
	if op.onDone != nil {
		op.onDone(op)
		return
	}
	c.done = append(c.done, op)
}

// Receive handles one received datagram. d.RxTime is when the kernel
// received it (Unix ns, 0: unknown): see transport.Engine.Receive.
func (c *Core) Receive(now time.Time, dg netio.Datagram) {
	from, pkt, rx := dg.Addr, dg.Buf, dg.RxTime
	c.now = now
	c.mem.Observe(now)
	if _, ok := c.swHeard[from]; ok && len(pkt) >= wire.HeaderLen {
		c.swHeard[from] = now
	}
	if len(pkt) >= wire.HeaderLen && wire.Mode(pkt[2]) == wire.ModePool && c.stepPool(now, from, pkt) {
		return
	}
	if len(pkt) >= wire.HeaderLen {
		if sw, ok := c.groupSw[binary.BigEndian.Uint32(pkt[4:8])]; ok && from != sw {
			c.stats.ForeignGroup++
			return
		}
	}
	d, ok := c.eng.Receive(now, netio.Datagram{Addr: from, Buf: pkt, RxTime: rx}, transport.Admission{Admit: c.admitFn})
	if !ok {
		return
	}
	h := &d.Header
	if h.Mode != wire.ModeUnicast || h.Op == wire.OpEvent || (h.Mode == wire.ModeAnycast) {
		c.onGroup(&d)
		return
	}
	if h.Flags&wire.FlagResp != 0 {
		c.onResponse(&d)
		return
	}
	if h.Op == wire.OpSend {
		c.onMsg(&d)
		return
	}
	c.mem.Serve(now, &d)
}

func (c *Core) onResponse(d *transport.Delivery) {
	h := &d.Header
	op := c.ops[h.MsgID]
	if op == nil || op.Peer != d.Peer.Addr || op.Kind.opcode() != h.Op {
		c.stats.UnmatchedResponses++
		return
	}
	if h.Status == wire.StatusOK && (op.Kind == KindRead || op.Kind == KindControl || op.Kind == KindAnycast) {
		// A response with data: the first fragment fixes its length.
		if !op.asm.Started() {
			switch {
			case op.Kind == KindRead && int(h.MsgLen) != len(op.Buf):
				op.fail(fmt.Errorf("%w: a response of %d bytes for a %d-byte read", ErrShortRead, h.MsgLen, len(op.Buf)))
				c.finish(op)
				return
			case op.Kind == KindRead:
				op.asm.start(len(op.Buf), op.Buf)
			case int(h.MsgLen) > c.cfg.MaxResponse:
				op.fail(wire.StatusTooLarge)
				c.finish(op)
				return
			default:
				op.Resp = make([]byte, h.MsgLen)
				op.asm.start(len(op.Resp), op.Resp)
			}
		}
		if !c.placeFrag(op, d) {
			return
		}
	} else if !d.MsgDone {
		return
	}
	if h.Status != wire.StatusOK {
		op.fail(h.Status)
	}
	op.Old = h.Operand1
	// The response proves the request arrived whole: release its payload
	// now, so the caller may reuse op.Buf as soon as the op completes.
	c.eng.Delivered(d.Peer, op.msgID)
	c.finish(op)
}

// deadTimeout is the transport's dead-peer timeout: how long a partial
// message may sit idle before its sender is taken to have given up.
func (c *Core) deadTimeout() time.Duration {
	if c.cfg.Transport.DeadTimeout > 0 {
		return c.cfg.Transport.DeadTimeout
	}
	return transport.DefaultDeadTimeout
}

// sweepDue reports whether a sweep whose next run is *next may run now,
// and if so schedules the next one a 64th of the dead timeout later. A
// sweep looks at no more than sweepBatch entries of a full table (from
// where Go's map iteration starts, a random place), so that no Receive pays
// for a whole table: a table of 16384 entries is covered in about a
// quarter of the dead timeout.
func (c *Core) sweepDue(now time.Time, next *time.Time) bool {
	if now.Before(*next) {
		return false
	}
	*next = now.Add(c.deadTimeout() / 64)
	return true
}

// sweepBatch bounds the entries one sweep looks at.
const sweepBatch = 1024

// FlushAcks makes every ACK the transport holds back due at the next
// Poll (transport.Engine.FlushAcks).
func (c *Core) FlushAcks() { c.eng.FlushAcks() }

// Owed reports whether the transport owes a peer an ACK
// (transport.Engine.Owed), or an eager multicast that completed for its
// caller is not yet acknowledged by every member.
func (c *Core) Owed() bool { return c.eagerOut > 0 || c.eng.Owed() }

// FailAll completes every outstanding operation with err.
func (c *Core) FailAll(err error) {
	for _, op := range c.ops {
		op.fail(err)
		c.finish(op)
	}
	for _, op := range c.gops {
		op.fail(err)
		c.finish(op)
	}
}

func (c *Core) expire(now time.Time, op *Op) {
	if op.deadline.IsZero() {
		return // no deadline of its own
	}
	if !now.Before(op.deadline) {
		if !op.idleAt.IsZero() && !now.Before(op.idleAt) {
			op.fail(fmt.Errorf("%w: nothing from %v for %v", ErrPeerSilent, op.Peer, op.Idle))
		} else {
			op.fail(c.sealHint(op, ErrTimeout))
		}
		c.finish(op)
	} else if c.nextDL.IsZero() || op.deadline.Before(c.nextDL) {
		c.nextDL = op.deadline
	}
}

// Poll returns datagrams to send, operations completed since the last
// Poll, and the next time Poll must be called (zero: none). Both slices are
// valid until the next Poll.
func (c *Core) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, []*Op, time.Time) {
	c.mem.Observe(now)
	out, comps, next := c.eng.Poll(now, out)
	for i := range comps {
		cp := &comps[i]
		if c.onSendCompletion(cp) {
			continue
		}
		op := c.ops[cp.MsgID]
		if op == nil || op.Peer != cp.Peer.Addr {
			continue
		}
		if cp.Err == nil {
			// Delivered: a control request waits for its answer now
			// (Endpoint.control tells a switch that took the request
			// but did not answer from one that is not there).
			op.acked = op.acked || op.Kind == KindControl
			continue
		}
		// A request that could not be delivered fails its op; responses
		// (no op) that fail are dropped: their requester times out.
		op.fail(cp.Err)
		c.finish(op)
	}
	if !c.nextDL.IsZero() && !now.Before(c.nextDL) {
		c.nextDL = time.Time{}
		// In a fixed order (message ids, then group op keys), so that a
		// simnet run repeats exactly for a seed.
		for _, id := range slices.Sorted(maps.Keys(c.ops)) {
			if op := c.ops[id]; op != nil {
				c.expire(now, op)
			}
		}
		gks := slices.SortedFunc(maps.Keys(c.gops), func(a, b gopKey) int {
			return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.kind, b.kind), cmp.Compare(a.member, b.member), cmp.Compare(a.id, b.id))
		})
		for _, k := range gks {
			if op := c.gops[k]; op != nil {
				c.expire(now, op)
			}
		}
		for _, po := range c.pool.cl.Accesses() {
			c.expire(now, po.Op)
		}
	}
	if pn := c.pollPool(now); !pn.IsZero() && (next.IsZero() || pn.Before(next)) {
		next = pn
	}
	out = c.flushPool(out)
	if !c.nextDL.IsZero() && (next.IsZero() || c.nextDL.Before(next)) {
		next = c.nextDL
	}
	done := c.done
	c.done, c.doneSpare = c.doneSpare[:0], done
	return out, done, next
}
