package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

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
	KindFence    Kind = Kind(wire.OpFence)   // raise Op.Fence on the memory nodes holding a pool address (pool accesses only)
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
	case KindRead, KindWrite, KindCAS, KindFetchAdd, KindVector, KindChain, KindOptim, KindFence:
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

	// Pool accesses (pool_client.go): a non-zero Pool sends a Read, Write,
	// CAS, FetchAdd, Vector or Fence to pool region Pool through the switch Peer;
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
	// ChainID is the request id a chain is sent under. Set before the
	// op is started, to the ChainID of an earlier chain op of this
	// endpoint with the same hops and data, it sends that request
	// again: each hop that applied it answers from its memory node's
	// reply cache (for the node's reply TTL, 30 s by default) and passes
	// it on without applying it twice, so a chain cut short is taken to
	// its end. Zero (or an id this endpoint did not give out, or one in
	// use) sends a new request. After the op it holds the id it was sent
	// under (zero: never sent).
	ChainID uint64
	// Optimizer step (KindOptim): Buf holds the f32 gradients of the
	// parameters at Addr, Optim the hyperparameters, Stride the distance
	// from the parameters to their first moment (and from it to Adam's
	// second): a multiple of the region's stripe times its columns.
	Optim  wire.OptimParams
	Stride uint64
	// Degraded (result): a pool write reached fewer replicas than its
	// region keeps, because a memory node is dead.
	Degraded bool
	// Fence (a non-zero Token) makes a pool Write, CAS, FetchAdd, Vector
	// or Chain a fenced one (wire.Fence; a chain is checked at every hop,
	// and its hops and data then fill at most PoolSegment less
	// wire.FenceLen bytes): the memory nodes apply it only
	// while Token is at least the fence's, and refuse it otherwise with
	// wire.StatusFenced (Old then holds the fence's token). KindFence
	// raises the fence to Token on the node(s) holding Addr; Old is the
	// fence's token there after the raise.
	Fence wire.Fence

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

func (op *Op) fail(err error) {
	op.Err = &OpError{Kind: op.Kind, Peer: op.Peer, Key: op.Key, Addr: op.Addr, Err: err}
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
