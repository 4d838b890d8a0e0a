package endpoint

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Kind is the kind of a one-sided operation.
type Kind uint8

// Operation kinds.
const (
	KindRead     Kind = Kind(wire.OpRead)
	KindWrite    Kind = Kind(wire.OpWrite)
	KindCAS      Kind = Kind(wire.OpCAS)
	KindFetchAdd Kind = Kind(wire.OpFetchAdd)
	KindVector   Kind = Kind(wire.OpVector)
	KindNop      Kind = Kind(wire.OpNop)
	KindControl  Kind = Kind(wire.OpControl) // request to a forwarding node (join, heartbeat...)
	KindChain    Kind = Kind(wire.OpChain)   // chained instruction through memory nodes (pool accesses only)
	KindOptim    Kind = Kind(wire.OpOptim)   // optimizer step on parameters in the pool (pool accesses only)
	// Group operations through a forwarding node.
	KindAnycast   Kind = 0x20 // request to one member of a service group; Resp holds the reply
	KindMulticast Kind = 0x21 // send Buf to every member of Group
	KindRecv      Kind = 0x22 // receive the next multicast from member From of Group into Buf
	KindAggregate Kind = 0x23 // contribute Buf to an aggregation; the result lands in Recv
	// Two-sided messages between endpoints (core_msg.go).
	KindSendMsg Kind = 0x24 // send Buf to Peer with Comm and Tag
	KindRecvMsg Kind = 0x25 // receive the next message from Peer with Comm and Tag into Buf; N = its length
)

var kindNames = map[Kind]string{KindAnycast: "anycast", KindMulticast: "multicast", KindRecv: "recv", KindAggregate: "aggregate",
	KindSendMsg: "send", KindRecvMsg: "recvmsg"}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return wire.Opcode(k).String()
}

// opcode is the wire opcode of a kind's request.
func (k Kind) opcode() wire.Opcode {
	switch {
	case k == KindSendMsg || k == KindRecvMsg:
		return wire.OpSend
	case k >= KindAnycast:
		return wire.OpData
	}
	return wire.Opcode(k)
}

// Errors of the endpoint layer. Remote refusals are wire.Status values
// (errors.Is(err, wire.StatusBadKey)); see OpError.
var (
	ErrTimeout = errors.New("endpoint: operation timed out")
	// ErrPeerSilent (wrapping ErrTimeout) fails a RecvMsg whose peer sent
	// nothing of its message for the op's Idle time.
	ErrPeerSilent = fmt.Errorf("%w: the peer went silent", ErrTimeout)
	ErrCanceled   = errors.New("endpoint: operation canceled")
	ErrClosed     = errors.New("endpoint: closed")
	ErrBadOp      = errors.New("endpoint: invalid operation")
	// ErrShortRead: a response or message whose length is not the
	// buffer's (longer or shorter; the error says both).
	ErrShortRead = errors.New("endpoint: message length differs from the buffer's")
	ErrTruncated = errors.New("endpoint: message longer than the receive buffer")
)

// OpError describes a failed operation: what it was, against which peer,
// and why. Unwrap gives the cause: a wire.Status for a remote refusal, a
// *transport.PeerError for a dead peer, ErrTimeout, ErrCanceled or a
// context error.
type OpError struct {
	Kind Kind
	Peer netip.AddrPort
	Key  uint64
	Addr uint64
	Err  error
}

// Error names the operation, its peer and, for a memory access, the
// address; never the key, which is a capability.
func (e *OpError) Error() string {
	switch e.Kind {
	case KindRead, KindWrite, KindCAS, KindFetchAdd, KindVector, KindChain, KindOptim:
		return fmt.Sprintf("%v %v at %#x: %v", e.Kind, e.Peer, e.Addr, e.Err)
	}
	return fmt.Sprintf("%v %v: %v", e.Kind, e.Peer, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Op is one one-sided operation. Fill the request fields, post it with
// Core.Post (or Endpoint.Start), and read the result fields after it
// completes. An Op must not be reused until it has completed.
type Op struct {
	Kind Kind
	Peer netip.AddrPort
	Key  uint64 // region key at the peer
	Addr uint64 // byte offset in the region
	// Buf is the data to write or apply (Write, Vector), or the buffer a
	// Read fills (its length is the read length). It must not be touched
	// until the op completes.
	Buf     []byte
	Compare uint64 // CAS: expected value
	Swap    uint64 // CAS: new value
	Add     uint64 // FetchAdd: addend
	Dtype   wire.Dtype
	Alu     wire.Alu
	// Timeout bounds the operation from Post to completion; zero means
	// Config.OpTimeout, or none for group and message operations (see
	// Config.OpTimeout).
	Timeout time.Duration
	// Token is for the caller; the endpoint never reads it.
	Token uint64

	// Group operations.
	Group uint32 // group id (from Group/Service handles)
	From  uint16 // Recv: the sending member
	// A two-sided send or receive (SendMsg, RecvMsg) that sets Group is
	// with member From of that group (Peer is its address): when the
	// switch reports the member dead or gone, or this endpoint itself
	// counted dead, the op fails with a *MemberError, at once if the
	// switch said so before it was posted.
	Recv []byte // Aggregate: result buffer (root or every member); nil for a non-root Reduce
	Root int    // Aggregate: -1 = allreduce, else the member that gets the result
	// Deterministic asks the switch to reduce in member order (bitwise
	// reproducible floats).
	Deterministic bool
	// Continue lets a multicast complete although a member died (the
	// switch stops waiting for it); otherwise the op fails naming it.
	// Without Continue, a multicast in flight when the switch's notice of
	// a crash arrives fails, also if the crash came before the op was
	// posted: the notice can arrive late, and the data did not reach
	// the dead member. Once the notice is in (DeadMember), later
	// multicasts go to the live members.
	Continue bool
	// Eager completes a multicast of at most EagerMulticastMax bytes, or
	// a two-sided send (KindSendMsg) of at most EagerSendMax, as soon as
	// the transport has its own copy (see MulticastOptions.Eager): Buf is
	// free at once and the transport goes on delivering. A send that is
	// then not delivered fails the receives from its peer that wait and
	// every two-sided operation with the peer after it, until ForgetPeer.
	// While many eager messages are unacknowledged (64 to one peer, 512
	// in all), an eager op waits as one without Eager.
	Eager bool
	// AtMost lets a multicast receive (KindRecv) take a message of at
	// most len(Buf) bytes instead of exactly len(Buf); its length is N.
	AtMost bool

	// Pool accesses (core_pool.go): a non-zero Pool sends a Read, Write,
	// CAS, FetchAdd or Vector to pool region Pool through the switch Peer;
	// Key is the region's key and Addr the pool address. Lane picks the
	// congestion window it shares (the pool client uses the column).
	Pool uint32
	Lane uint16
	// Chain (KindChain): the hops, each an op at a pool address of region
	// Pool; ChainLen the vector bytes every hop works on. Buf is the data
	// the chain starts with (nil if the first hop is a Load); Recv
	// receives the data the last hop answers with (a Load or Apply last),
	// ChainLen bytes, or is nil. Dtype and Alu apply to Apply and
	// Accumulate hops.
	Chain    []wire.ChainHop
	ChainLen int
	// Optimizer step (KindOptim): Buf holds the f32 gradients of the
	// parameters at Addr, Optim the hyperparameters, Stride the distance
	// from the parameters to their first moment (and from it to Adam's
	// second): a multiple of the region's stripe times its columns.
	Optim  wire.OptimParams
	Stride uint64
	// Degraded (result): a pool write reached fewer replicas than its
	// region keeps, because a memory node is dead.
	Degraded bool

	// Two-sided messages.
	Comm uint32 // communicator (context) id: messages match only within one
	Tag  uint64 // tag: messages match only with the same tag
	// Idle, for a RecvMsg, fails the receive with ErrPeerSilent when no
	// fragment of its message arrives for that long (from the post, then
	// from the last fragment): a liveness bound for peers no switch
	// watches. Zero: none.
	Idle time.Duration

	// Results.
	N    int    // RecvMsg, and Recv with AtMost: length of the message received
	Old  uint64 // CAS, FetchAdd: value before the op
	Resp []byte // Control, Anycast: the reply payload
	Err  error  // nil, or an *OpError

	sw     netip.AddrPort // forwarding node, for group ops
	onDone func(*Op)      // internal ops (a memory node's rebuild reads): called instead of reporting the op
	mkey   msgMatch       // RecvMsg: the message it matches
	gkey   gopKey

	msgID     uint64
	deadline  time.Time  // the earlier of timeoutAt and idleAt that is set
	timeoutAt time.Time  // from Timeout
	idleAt    time.Time  // from Idle (RecvMsg)
	asm       reassembly // the message it receives: a response, a multicast, a two-sided message
	posted    bool
	acked     bool // Control: the peer acknowledged the whole request
	finished  bool
	done      chan struct{} // closed on completion by Endpoint
	cq        chan<- *Op
	waiter    bool // a goroutine sleeps in Endpoint.Do for it (under Endpoint.mu)
}

// Config configures a Core or Endpoint. Zero values select defaults.
type Config struct {
	// Transport configures the reliable transport engine.
	Transport transport.Config
	// OpTimeout bounds every one-sided, control and anycast operation
	// that sets no Timeout of its own. Zero means 10s. Group and message
	// operations (multicast, group receive, aggregation, SendMsg,
	// RecvMsg) have no default deadline, as in MPI: a large collective on
	// a slow network takes as long as it takes. They end when done, at
	// their own Timeout or context deadline, by Cancel, or when the
	// switch reports a member dead or the transport a peer dead (no
	// progress for transport.Config.DeadTimeout).
	OpTimeout time.Duration
	// MaxOps bounds the operations outstanding at once; Post fails with
	// transport.ErrQueueFull beyond it. Zero means 4096.
	MaxOps int
	// Store is the local memory exposed to peers' one-sided operations; nil
	// means a private empty store (peers get StatusBadKey).
	Store *memnode.Store
	// MaxUnexpected bounds the bytes of messages (multicast and
	// two-sided) buffered because no receive was posted for them yet. A
	// message is charged its full length when its first fragment arrives,
	// and every later fragment must agree with that length, so what is
	// buffered never exceeds the charge. Messages from strangers (a
	// source with no stream of this core's sends or receives, a group
	// this core is not a member of) may take at most a quarter of it.
	// Beyond it a new message is held back: its packets are not
	// acknowledged and the sender resends them, so nothing is lost; a
	// posted receive always admits its own message. Zero means 64 MiB.
	MaxUnexpected int
	// MaxUnexpectedMsgs bounds the number of such buffered messages, a
	// quarter of them from strangers, in the same way. Zero means 16384.
	MaxUnexpectedMsgs int
	// MaxResponse bounds a control or anycast reply, and an anycast
	// request served here, in bytes. Zero means 64 MiB.
	MaxResponse int
	// MaxIncoming bounds the anycast requests this core holds at once:
	// those being received plus those handed to a handler (Requests) and
	// not yet answered (Reply). Beyond it a new request is refused at
	// once with StatusBusy, which its client sees (nothing waits on
	// anything, so this cannot deadlock). Zero means 1024.
	MaxIncoming int
	// MaxIncomingBytes bounds the bytes of anycast requests being
	// received; beyond it a new request is refused with StatusBusy. A
	// partial request idle for the transport's DeadTimeout is forgotten.
	// Zero means 64 MiB.
	MaxIncomingBytes int
	// PoolNode, if set, makes the endpoint a memory node of a pool: it
	// serves the pool requests and grants of the switch it names.
	PoolNode *PoolServe
}

// Stats counts what the core did.
type Stats struct {
	Transport                       transport.Stats
	OpsPosted, OpsOK, OpsFailed     uint64
	RequestsServed, RequestsRefused uint64
	ResponsesDropped                uint64 // responder could not queue a response
	// LentRefused counts one-sided requests refused because they named
	// the region a memory node lends to the pool (reachable only
	// through the pool path).
	LentRefused        uint64
	UnmatchedResponses uint64 // response for no outstanding op (late or forged)
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
// table of outstanding operations, and the server side that executes
// peers' requests against the local Store. Not safe for concurrent use.
type Core struct {
	// idents, when set (SetIdentities), gives each peer address's
	// certified identity.
	idents    func(netip.AddrPort) (secure.Cert, bool)
	cfg       Config
	eng       *transport.Engine
	store     *memnode.Store
	ops       map[uint64]*Op
	inStatus  map[inKey]*inReq
	done      []*Op // completed since the last Poll
	doneSpare []*Op
	nextDL    time.Time // earliest op deadline (may be early)
	now       time.Time // of the current Step (admission runs inside it)
	inSweep   time.Time // earliest next sweep of inStatus

	// Group state (core_group.go).
	gops        map[gopKey]*Op
	joined      map[uint32]uint16         // groups this core is a member of (SetMember)
	groupSw     map[uint32]netip.AddrPort // the forwarding node of a group (SetGroupSwitch)
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

type inReq struct {
	status wire.Status
	total  uint32 // the request's length, fixed by its first packet
	last   time.Time
}

// maxInRequests bounds the multi-packet requests being received; stale
// ones (their sender gave up) are swept when the bound is reached, and
// while it is, the first packet of a new one is held back (not
// acknowledged: its sender resends it).
const maxInRequests = 1 << 16

// MTU is the largest datagram the core's transport sends, in bytes.
func (c *Core) MTU() int {
	if c.cfg.Transport.MTU == 0 {
		return transport.DefaultMTU
	}
	return c.cfg.Transport.MTU
}

// WithDefaults returns c with every zero field set to its documented
// default, as NewCore applies them (the transport configuration keeps its
// own zero fields: see transport.Config.WithDefaults).
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 10 * time.Second
	}
	def(&c.MaxOps, 4096)
	def(&c.MaxUnexpected, 64<<20)
	def(&c.MaxResponse, 64<<20)
	def(&c.MaxIncoming, 1024)
	def(&c.MaxUnexpectedMsgs, 16384)
	def(&c.MaxIncomingBytes, 64<<20)
	return c
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
	c := &Core{cfg: cfg, eng: eng, store: st, ops: make(map[uint64]*Op), inStatus: make(map[inKey]*inReq)}
	c.initGroups()
	c.initMsgs()
	if err := c.initPool(); err != nil {
		return nil, err
	}
	return c, nil
}

// Store is the local memory served to peers.
func (c *Core) Store() *memnode.Store { return c.store }

// Stats returns the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.Transport = c.eng.Stats()
	s.Pool = c.PoolStats()
	return s
}

// Outstanding is the number of operations posted and not yet completed.
func (c *Core) Outstanding() int { return len(c.ops) + len(c.pool.ops) }

// inFlight is the number of operations of every kind posted and not yet
// completed (what MaxOps bounds).
func (c *Core) inFlight() int { return len(c.ops) + len(c.gops) + len(c.pool.ops) }

// Idle reports whether the core holds no operation, no message queued or
// in flight, and no partially received request: nothing is retained.
func (c *Core) Idle() bool {
	return len(c.ops) == 0 && len(c.gops) == 0 && len(c.pool.ops) == 0 && c.eng.Pending() == 0 && len(c.inStatus) == 0
}

func (op *Op) fail(err error) {
	op.Err = &OpError{Kind: op.Kind, Peer: op.Peer, Key: op.Key, Addr: op.Addr, Err: err}
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

// longRunning reports whether operations of kind k move data whose
// duration depends on its size and on other ranks (collectives), and so
// get no default deadline.
func (k Kind) longRunning() bool {
	switch k {
	case KindMulticast, KindRecv, KindAggregate, KindSendMsg, KindRecvMsg:
		return true
	}
	return false
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

// Step is Receive for a datagram with no receive time.
func (c *Core) Step(now time.Time, from netip.AddrPort, pkt []byte) {
	c.Receive(now, netio.Datagram{Addr: from, Buf: pkt})
}

// Receive handles one received datagram. d.RxTime is when the kernel
// received it (Unix ns, 0: unknown): see transport.Engine.Receive.
func (c *Core) Receive(now time.Time, dg netio.Datagram) {
	from, pkt, rx := dg.Addr, dg.Buf, dg.RxTime
	c.now = now
	c.pool.now = now
	if c.pool.started.IsZero() {
		c.pool.started = now
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
	c.serve(now, &d)
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

// serve executes a request packet against the local store, and answers
// when the request message is complete.
func (c *Core) serve(now time.Time, d *transport.Delivery) {
	h := &d.Header
	if h.Op == wire.OpControl && c.servePoolControl(d) {
		return
	}
	var r *inReq
	k := inKey{d.Peer, h.MsgID}
	if !d.MsgDone || h.Offset != 0 || h.MsgLen != uint32(h.Len) {
		// Multi-packet request: remember the first refusal until the
		// last packet arrives. Admission (admitRequest) made room.
		if r = c.inStatus[k]; r == nil {
			if len(c.inStatus) >= maxInRequests {
				c.stats.RequestsRefused++
				return
			}
			r = &inReq{total: h.MsgLen}
			c.inStatus[k] = r
		}
		r.last = now
	}
	var res memnode.Result
	switch {
	case r != nil && h.MsgLen != r.total:
		// Not a packet of the request it names: the request fails.
		c.stats.FragmentsRefused++
		res.Status = wire.StatusBadOperand
	case h.Op == wire.OpNop:
		res.Status = wire.StatusOK
	case c.pool.node != nil && h.Key == c.pool.node.Key():
		// The memory lent to the pool is reachable only through the
		// pool path (the switch checks each region's own key), never
		// with the lent region's key.
		c.stats.LentRefused++
		res.Status = wire.StatusBadKey
	default:
		res = c.store.Exec(h, d.Payload)
	}
	st, old := res.Status, res.Old
	if r != nil {
		if r.status == wire.StatusOK {
			r.status = st
		}
		if !d.MsgDone {
			return
		}
		st = r.status
		delete(c.inStatus, k)
	}
	if st == wire.StatusOK {
		c.stats.RequestsServed++
	} else {
		c.stats.RequestsRefused++
	}
	rh := wire.Header{Op: h.Op, Flags: wire.FlagResp, MsgID: h.MsgID, Status: st, Operand1: old}
	var payload []byte
	if h.Op == wire.OpRead && st == wire.StatusOK {
		// Zero-copy: the response streams straight from region memory
		// (RDMA READ semantics: not a snapshot against concurrent writes).
		payload = res.Data
	}
	if _, err := c.eng.Send(d.Peer, &rh, payload, 0); err != nil {
		c.stats.ResponsesDropped++
	}
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
// where Go's map iteration starts, a random place), so that no Step pays
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

// admitRequest holds back the first packet of a multi-packet request
// while maxInRequests are being received (after forgetting those idle
// for the dead timeout): its sender resends it, and the requests already
// under way are not disturbed.
func (c *Core) admitRequest(d *transport.Delivery) bool {
	h := &d.Header
	if h.MsgLen == uint32(h.Len) || len(c.inStatus) < maxInRequests || c.inStatus[inKey{d.Peer, h.MsgID}] != nil {
		return true
	}
	if c.sweepDue(c.now, &c.inSweep) {
		idle, n := c.deadTimeout(), 0
		for k, r := range c.inStatus {
			if n++; n > sweepBatch {
				break
			}
			if c.now.Sub(r.last) > idle {
				delete(c.inStatus, k)
			}
		}
	}
	return len(c.inStatus) < maxInRequests
}

// FailAll completes every outstanding operation with err.
// FlushAcks makes every ACK the transport holds back due at the next
// Poll (transport.Engine.FlushAcks).
func (c *Core) FlushAcks() { c.eng.FlushAcks() }

// Owed reports whether the transport owes a peer an ACK
// (transport.Engine.Owed), or an eager multicast that completed for its
// caller is not yet acknowledged by every member.
func (c *Core) Owed() bool { return c.eagerOut > 0 || c.eng.Owed() }

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
	c.pool.now = now
	if c.pool.started.IsZero() {
		c.pool.started = now
	}
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
		for _, po := range c.pool.sortedOps() {
			c.expire(now, po.op)
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
