package transport

import (
	"fmt"
	"net/netip"

	"github.com/ndma/ndma/wire"
)

// MaxMessage is the largest message in bytes (MsgLen is 32 bits).
const MaxMessage = 1<<32 - 1

// PeerID names one reliable stream's far end: its address, the group, its
// member id there, and the delivery mode. Each mode has its own sequence
// space, so a member's multicast stream and its unicast stream through the
// same forwarding node never mix. Point-to-point traffic uses group 0,
// member 0, unicast. A forwarding node is member wire.MemberAll of its
// groups.
type PeerID struct {
	Addr   netip.AddrPort
	Group  uint32
	Member uint16
	Mode   wire.Mode
}

// String names the peer for people: its address, and for a group
// stream the group, the member (or "switch" for a forwarding node's
// stream) and the mode.
func (p PeerID) String() string {
	if p.Group == 0 && p.Member == 0 && p.Mode == wire.ModeUnicast {
		return p.Addr.String()
	}
	who := fmt.Sprintf("member %d", p.Member)
	if p.Member == wire.MemberAll {
		who = "switch"
	}
	return fmt.Sprintf("%v (group %d, %s, %v)", p.Addr, p.Group, who, p.Mode)
}

// Completion reports that an outgoing message was fully acknowledged
// (Err nil) or abandoned (Err non-nil, e.g. a *PeerError).
type Completion struct {
	Token uint64 // the caller's token from Send
	MsgID uint64
	Peer  PeerID
	Err   error
}

// Delivery is one newly received data packet handed to the layer above.
// Header and Payload alias the datagram passed to Receive and are valid only
// until the caller reuses that buffer.
type Delivery struct {
	Header  wire.Header
	Payload []byte
	Peer    PeerID
	// MsgDone is true for the packet that completes its message: every
	// byte of [0, MsgLen) has now been delivered exactly once.
	//
	// The engine guarantees this contract: a data packet whose Offset+Len
	// exceeds its MsgLen, whose MsgLen differs from the message (MsgID,
	// FlagResp) it joins, or whose bytes overlap bytes already delivered
	// for that message is never delivered (it is acknowledged, so that a
	// faulty sender does not resend it forever, and counted in
	// Stats.Contradicting). A message id reused after its message
	// completed starts a new message.
	MsgDone bool
}

// Stats are cumulative counters.
type Stats struct {
	PacketsSent, PacketsRetransmitted, PacketsReceived uint64
	BytesSent, BytesReceived                           uint64 // payload bytes of data packets
	AcksSent, AcksReceived, NacksSent                  uint64
	// AcksPiggybacked counts the ACKs (of AcksSent) that rode on a data
	// packet (wire.FlagAck) instead of a datagram of their own.
	AcksPiggybacked                          uint64
	Duplicates, OutOfWindow, PartialOverflow uint64
	Malformed, Unexpected, Refused           uint64
	FastRetransmits, Timeouts, PeersDead     uint64
	SelfStalls                               uint64 // Polls that came late enough to mean this process did not run (selfStall)
	MessagesCompleted, MessagesFailed        uint64
	// Contradicting counts data packets refused because their fragment
	// disagrees with the message it joins (see Delivery.MsgDone).
	Contradicting uint64
	// SealRequired counts notices that a unicast stream's peer takes
	// sealed datagrams only (wire.HandshakeSealRequired) received while
	// the stream had no ACK: the stream carries on, the notice kept to
	// explain its failure (ErrSealRequired).
	SealRequired uint64
	// StrangersEvicted counts stranger peers evicted for a newer one;
	// PeersSwept counts idle peers removed after IdleTimeout.
	StrangersEvicted, PeersSwept uint64
	// AmplificationLimited counts Polls in which a peer whose address is
	// not validated had data or an ACK held back by the
	// anti-amplification budget.
	AmplificationLimited uint64
	// ResetChallenges counts data packets that asked to restart a live
	// receive window (a SYN or an AckBase a window ahead), answered with
	// a challenge; Resets counts restarts done on the sender's echo.
	ResetChallenges, Resets uint64
	// Peers and Strangers are the peers with state now, and how many of
	// them are strangers (gauges, not counters).
	Peers, Strangers int
}
