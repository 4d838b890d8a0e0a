package transport

import (
	"time"

	"github.com/ndma/ndma/transport/cc"
	"github.com/ndma/ndma/wire"
)

// peer is the per-peer sequence state inside a group context. Sender and
// receiver halves are independent: each direction has its own PSN space.
//
// Size: the struct itself is 584 bytes on 64-bit platforms, plus the
// receive bitmap (RecvWindow/8+8 bytes: 136 B at the default) once the
// peer has sent data, the partial-message map while multi-packet messages
// arrive (at most MaxPartial entries of 120 bytes), and — only while
// packets are in flight to the peer — a send ring of SendWindow 48-byte
// records (48 KiB at the default) that goes back to a pool when the peer
// is idle. TestPeerStateSize pins these numbers; see docs/ARCHITECTURE.md.
type peer struct {
	e        *Engine
	id       PeerID
	isActive bool
	removed  bool
	stranger bool // on the strangers list (see Engine.create)
	proven   bool // acknowledged data sent to it: it receives at its address
	waiting  bool // messages queued, nothing in flight: lastProgress is when that began

	nmsgs int32 // messages queued or in flight to the peer

	// Lifetime: the engine's list of strangers or established peers, and
	// the last activity (Unix ns) that orders it.
	prev, next *peer
	lastActive int64
	// credit is the bytes that may still be sent to an
	// amplification-limited peer: ampFactor times the bytes received
	// from it, less the bytes sent.
	credit int64

	// Sender half.
	sndUna, sndNxt uint32
	ring           []pktRec // nil while nothing is in flight
	qhead, qtail   *outMsg  // messages not yet fully segmented
	inflight       int      // records in state recInflight
	lost           []uint32 // PSNs awaiting retransmission, FIFO; may hold stale entries
	lostHead       int
	synAcked       bool // an ACK (not a challenge) has been received from this peer
	sealHint       bool // the peer's address said it takes sealed datagrams only (wire.HandshakeSealRequired), before any ACK
	rwnd           uint32
	// rtt.Min is the lowest RTT of any packet (the reordering window);
	// win.Base that of a full-size packet (the delay target's base).
	rtt cc.RTT
	rto time.Duration
	win cc.Swift
	// The one-way delay bases of both directions: the sender's, of its
	// packets' forward delay (from the ACKs), and the receiver's, of the
	// peer's packets (what its ACKs report as queueing, Ack.QDelay).
	owd          cc.OWD
	lastBackoff  time.Time
	lastProgress time.Time
	rtoAt        time.Time // earliest sentAt+rto among in-flight records (may be early)
	rackTime     time.Time // send time of the latest-sent packet known delivered

	// Receiver half.
	rcvInit    bool
	rcvNxt     uint32 // every PSN before it has been received
	rcvHigh    uint32 // one past the highest PSN received
	bitmap     []uint64
	partial    map[msgKey]*partialMsg
	ackPending bool
	// ackAt, while an ACK is pending, is when (Unix ns) it must go out
	// at the latest if no data to the peer takes it along first (a
	// delayed ACK of a lone response); zero: at once.
	ackAt       int64
	nackCum     uint32 // Cum value a NACK was last sent for
	nackSent    bool
	echoTS      uint64
	lastArrival time.Time
	// The receiver's measure of the forward queueing (Ack.QDelay): the
	// echoed packet's one-way delay (its arrival here less its send
	// time there, with the clocks' offset) above the lowest of a
	// full-size packet on this stream (owd.SampleIn); echoQ is what the
	// next ACK reports (µs + 1; 0 while there is no base).
	echoQ     uint32
	advWindow uint32 // receive window advertised; zero = Config.RecvWindow
	// Address validation (see buildAck): peerBase is the latest AckBase
	// received, acknowledged instead of the data while the peer is
	// amplification-limited; challenge is a PSN to echo in an ACK
	// (echoPending), asked for by a peer that has not validated us.
	peerBase    uint32
	challenge   uint32
	echoPending bool
	// A restart of the sender's stream (a SYN or an AckBase a window or
	// more ahead) on a receiver that has state is applied only once the
	// sender echoes a challenge (resetNonce): a forged datagram cannot
	// move or reset a live stream's window. resetChallenge asks poll to
	// send the challenge, at most once per RTO.
	resetPending, resetChallenge bool
	resetBase, resetNonce        uint32
	lastChallenge                time.Time
}

func newPeer(e *Engine, id PeerID) *peer {
	isn := e.rng.Uint32()
	return &peer{
		e:      e,
		id:     id,
		sndUna: isn,
		sndNxt: isn,
		rwnd:   uint32(e.cfg.RecvWindow),
		win:    cc.Swift{Cwnd: e.cfg.InitialCwnd},
		rto:    e.cfg.InitialRTO,
	}
}

// limited reports whether the peer is amplification-limited: a stranger
// that has not acknowledged data sent to it, at an address not validated.
func (p *peer) limited() bool {
	return p.stranger && !p.proven && p.e.addrRefs[p.id.Addr] == 0
}

// ampFactor is the anti-amplification factor: until its address is
// validated, a peer is sent at most ampFactor times the bytes received
// from it (QUIC's rule, RFC 9000 section 8).
const ampFactor = 3

// received credits an incoming datagram of n bytes to the amplification
// budget.
func (p *peer) received(n int) {
	if p.stranger && p.credit < 1<<40 {
		p.credit += ampFactor * int64(n)
	}
}

// afford reports whether a data packet with n payload bytes fits the
// amplification budget.
func (p *peer) afford(n uint32) bool { return p.credit >= int64(wire.HeaderLen)+int64(n) }

// idle reports whether the peer holds nothing to send, resend or
// acknowledge.
func (p *peer) idle() bool { return p.sndUna == p.sndNxt && p.qhead == nil && !p.ackPending }

func (p *peer) hasWork(now time.Time) bool {
	if (p.ackPending && !p.ackWaits(now)) || p.echoPending || p.resetChallenge {
		return true
	}
	if p.inflight >= p.sendLimit() {
		return false
	}
	if !p.limited() {
		return p.lostPending() || (p.qhead != nil && p.canSendNew())
	}
	// Must agree with poll, or Poll would ask to be called again at once
	// with nothing to do.
	if p.lostPending() {
		rec := &p.ring[p.lost[p.lostHead]&p.mask()]
		return rec.state != recLost || p.afford(rec.n)
	}
	if p.qhead != nil && p.canSendNew() {
		return p.afford(min(uint32(len(p.qhead.payload))-p.qhead.next, uint32(p.e.seg)))
	}
	return false
}

// pointToPoint reports whether the peer's stream has an engine at each
// end (wire.EngineToEngine: the point-to-point group and anycast), where
// ACKs ride on data and may be delayed.
func (p *peer) pointToPoint() bool { return wire.EngineToEngine(p.id.Mode, p.id.Group) }

// deadline is the next time the peer needs Poll without new input.
func (p *peer) deadline(now time.Time) time.Time {
	dl := p.sendDeadline()
	if at := p.stallDeadline(); !at.IsZero() && (dl.IsZero() || at.Before(dl)) {
		dl = at
	}
	if p.ackPending && p.ackWaits(now) {
		if at := time.Unix(0, p.ackAt); dl.IsZero() || at.Before(dl) {
			dl = at
		}
	}
	if p.qhead != nil && p.limited() {
		// Held by the amplification budget: another peer at the address
		// may validate it, so look again after a timeout's time.
		if r := now.Add(p.rto); dl.IsZero() || r.Before(dl) {
			dl = r
		}
	}
	return dl
}
