package transport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	mrand "math/rand/v2"
	"net/netip"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Errors returned by Send and carried by completions.
var (
	// ErrQueueFull means MaxMessages messages are already queued or in
	// flight; retry after completions drain.
	ErrQueueFull = errors.New("transport: send queue full")
	// ErrPeerQueueFull means the peer already has MaxPeerMessages (or,
	// for an amplification-limited stranger, MaxStrangerMessages)
	// messages queued or in flight. It wraps ErrQueueFull.
	ErrPeerQueueFull = fmt.Errorf("%w: per-peer limit", ErrQueueFull)
	// ErrTooLarge means the message exceeds MaxMessage bytes.
	ErrTooLarge = errors.New("transport: message too large")
	// ErrTooManyPeers means MaxPeers established peers already have state.
	ErrTooManyPeers = errors.New("transport: too many peers")
	// ErrEvicted completes the messages of a stranger peer whose state
	// was evicted to make room for a newer stranger (Config.MaxStrangers).
	ErrEvicted = errors.New("transport: stranger peer evicted")
	// ErrAbandoned completes a message given up with Abandon.
	ErrAbandoned = errors.New("transport: message abandoned")
	// ErrFragment means a SendFragment call was malformed (no id, larger
	// than a packet, or beyond MsgLen).
	ErrFragment = errors.New("transport: bad fragment")
	// ErrPeerDead is wrapped by *PeerError.
	ErrPeerDead = errors.New("transport: peer not responding")
	// ErrSealRequired is matched by the failure of messages to a peer
	// that answered that it takes sealed datagrams only
	// (wire.HandshakeSealRequired) and acknowledged nothing: the notice
	// is not authenticated, so it explains a failure (a *PeerError's, an
	// endpoint's timeout) and never causes one.
	ErrSealRequired = errors.New("transport: " + sealRequiredText)
)

// sealRequiredText is what ErrSealRequired says.
const sealRequiredText = "the peer takes only sealed datagrams: this process needs a credential (--credential, NDMA_CREDENTIAL)"

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

// PeerError reports that a peer stopped acknowledging for DeadTimeout.
type PeerError struct {
	Peer  PeerID
	Since time.Duration // time without progress
	// SealRequired: the peer's address answered that it takes sealed
	// datagrams only, and acknowledged nothing (Engine.SealRequired).
	SealRequired bool
}

func (e *PeerError) Error() string {
	msg := fmt.Sprintf("transport: peer %v not responding for %v", e.Peer, e.Since)
	if e.SealRequired {
		msg += ": " + sealRequiredText
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrPeerDead) true, and errors.Is(err,
// ErrSealRequired) when SealRequired.
func (e *PeerError) Unwrap() []error {
	if e.SealRequired {
		return []error{ErrPeerDead, ErrSealRequired}
	}
	return []error{ErrPeerDead}
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
// Header and Payload alias the datagram passed to Step and are valid only
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

// packet record states in the send ring.
const (
	recFree uint8 = iota
	recInflight
	recLost // waiting in the retransmit queue
	recAcked
)

type pktRec struct {
	msg    *outMsg
	sentAt time.Time
	off    uint32
	n      uint32
	state  uint8
	retx   uint8
}

type outMsg struct {
	hdr     wire.Header
	payload []byte
	token   uint64
	base    uint32 // offset of payload[0] in the message (fragments)
	next    uint32 // next offset to segment, relative to payload
	unacked int    // packets sent but not acknowledged
	allSent bool
	done    bool
	// stranger: sent to a stranger, counted in Engine.strangerMsgs.
	stranger bool
	next_    *outMsg // queue link
	// shared: the payload stays unchanged until the message completes
	// (SendFragmentShared), so that Poll may send it without a copy;
	// payloadCRC is its wire.PayloadCRC.
	shared     bool
	payloadCRC uint32
	// recs counts the send-ring records that point to the message; once
	// it is done, fully segmented and no record points to it, it goes
	// back to the engine's free list (freeMsg).
	recs int32
}

// MaxFreeMsgs bounds the engine's free list of finished messages.
const MaxFreeMsgs = 1024

// newMsg returns a zeroed message, from the free list when it has one:
// sending allocates nothing per message in steady state.
func (e *Engine) newMsg() *outMsg {
	if n := len(e.freeMsgs); n > 0 {
		m := e.freeMsgs[n-1]
		e.freeMsgs[n-1] = nil
		e.freeMsgs = e.freeMsgs[:n-1]
		return m
	}
	return new(outMsg)
}

// releaseRec zeroes a send-ring record and frees its message when it was
// the last record pointing to a finished message.
func (e *Engine) releaseRec(rec *pktRec) {
	if m := rec.msg; m != nil {
		m.recs--
		if m.recs == 0 && m.done && m.allSent && len(e.freeMsgs) < MaxFreeMsgs {
			*m = outMsg{}
			e.freeMsgs = append(e.freeMsgs, m)
		}
	}
	*rec = pktRec{}
}

// Engine is the sans-I/O reliable transport of one endpoint. It is not
// safe for concurrent use: one goroutine owns it, feeds received datagrams
// to Step, calls Poll for datagrams to send, completions and the next
// deadline, and never lets the engine see a socket or a clock.
type Engine struct {
	cfg Config
	// expectAt is the deadline the last Poll returned (zero: none): a
	// Poll that comes much later than it finds this engine's own process
	// stopped or starved meanwhile (SIGSTOP, a debugger, a suspended
	// host), whose time is not its peers' silence (selfStall).
	expectAt time.Time
	// arrival is when the datagram being received arrived: its kernel
	// receive time (Receive's d.RxTime), or the Step's now.
	arrival time.Time
	seg     int
	rng     *mrand.Rand
	msgSeq  uint64
	groups  map[uint32]*groupCtx
	npeers  int
	active  []*peer // peers with something to send
	nmsgs   int
	// strangerMsgs counts the messages queued to strangers when sent (at
	// most MaxMessages/4).
	strangerMsgs int

	comps      []Completion // accumulated since the last Poll
	compsSpare []Completion // returned by the last Poll; reused by the next
	arena      [][]byte     // Poll's output buffers, reused
	ack        wire.Ack
	admitD     Delivery // passed to Receive's Admission.Admit
	stats      Stats
	rings      [][]pktRec        // free send rings
	smallRings [][]pktRec        // free strangers' send rings
	freeMsgs   []*outMsg         // finished messages for reuse (newMsg, releaseRec)
	gather     bool              // SetGather
	locals     map[uint32]uint16 // member id per group (SetLocal)

	// Peer lifetimes. Every peer is on one of two lists, least recently
	// active first: strangers (bounded by MaxStrangers, the head is
	// evicted for a new one) and established peers (bounded by
	// MaxPeers). Poll sweeps idle peers from the heads.
	strangers, established peerList
	nstrangers             int
	// addrRefs counts the established peers per address: an address
	// with one is validated (Validated). At most MaxPeers entries; an
	// entry goes with its address's last established peer.
	addrRefs map[netip.AddrPort]int32
	// strangerRefs counts the strangers per address (at most
	// MaxStrangers entries): a Send to a new stream at an address known
	// only through strangers makes a stranger too, so that answering a
	// forged source on another stream neither escapes the amplification
	// limit nor validates the address.
	strangerRefs map[netip.AddrPort]int32
	now          time.Time // latest time seen by Step or Poll
}

// peerList is an intrusive doubly linked list of peers, oldest first.
type peerList struct{ head, tail *peer }

func (l *peerList) pushBack(p *peer) {
	p.prev, p.next = l.tail, nil
	if l.tail == nil {
		l.head = p
	} else {
		l.tail.next = p
	}
	l.tail = p
}

func (l *peerList) remove(p *peer) {
	if p.prev == nil {
		l.head = p.next
	} else {
		p.prev.next = p.next
	}
	if p.next == nil {
		l.tail = p.prev
	} else {
		p.next.prev = p.prev
	}
	p.prev, p.next = nil, nil
}

func (l *peerList) moveBack(p *peer) {
	if l.tail != p {
		l.remove(p)
		l.pushBack(p)
	}
}

// ampFactor is the anti-amplification factor: until its address is
// validated, a peer is sent at most ampFactor times the bytes received
// from it (QUIC's rule, RFC 9000 section 8).
const ampFactor = 3

// sweepPerPoll bounds the peers one Poll examines for the idle sweep, per
// list.
const sweepPerPoll = 8

// groupCtx is the per-group connection context: everything the engine
// knows about one group lives here.
type groupCtx struct {
	id    uint32
	peers map[peerKey]*peer
}

type peerKey struct {
	addr   netip.AddrPort
	member uint16
	mode   wire.Mode
}

// New returns an engine. It returns an error wrapping ErrConfig if cfg is
// invalid.
func New(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &Engine{
		cfg:          cfg,
		seg:          cfg.segSize(),
		rng:          rng,
		msgSeq:       rng.Uint64() >> 1,
		groups:       make(map[uint32]*groupCtx),
		addrRefs:     make(map[netip.AddrPort]int32),
		strangerRefs: make(map[netip.AddrPort]int32),
	}, nil
}

// SetLocal sets this endpoint's member id in a group (written as Src in
// the group's packets, and accepted as Dst); groups without one use
// Config.Local.
func (e *Engine) SetLocal(group uint32, member uint16) {
	if e.locals == nil {
		e.locals = make(map[uint32]uint16)
	}
	e.locals[group] = member
}

// ClearLocal forgets the member id set for a group.
func (e *Engine) ClearLocal(group uint32) { delete(e.locals, group) }

func (e *Engine) local(group uint32) uint16 {
	if m, ok := e.locals[group]; ok {
		return m
	}
	return e.cfg.Local
}

// SetGroupModes turns acceptance of non-unicast streams on or off (see
// Config.GroupModes).
func (e *Engine) SetGroupModes(on bool) { e.cfg.GroupModes = on }

// SegmentSize is the payload bytes carried per packet.
func (e *Engine) SegmentSize() int { return e.seg }

// SetVerified sets Config.Verified, for a driver that puts a security
// layer below an engine it did not configure; call it before Step sees a
// datagram.
func (e *Engine) SetVerified(v bool) { e.cfg.Verified = v }

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Peers, s.Strangers = e.npeers, e.nstrangers
	return s
}

// lookup returns the peer's state, or nil.
func (e *Engine) lookup(id PeerID) *peer {
	g := e.groups[id.Group]
	if g == nil {
		return nil
	}
	return g.peers[peerKey{id.Addr, id.Member, id.Mode}]
}

// create makes state for a peer that has none. A peer the local side
// contacts (trusted) or one at a validated address is established, if
// MaxPeers allows; otherwise an incoming peer is a stranger, evicting the
// least recently active stranger beyond MaxStrangers, and a trusted one
// is refused with ErrTooManyPeers.
func (e *Engine) create(id PeerID, trusted bool) (*peer, error) {
	established := e.npeers-e.nstrangers < e.cfg.MaxPeers
	if trusted && !established {
		return nil, ErrTooManyPeers
	}
	refs := e.addrRefs[id.Addr]
	stranger := !established || refs >= maxAddrStreams ||
		(!trusted && refs == 0) ||
		(trusted && refs == 0 && e.strangerRefs[id.Addr] > 0)
	for stranger && e.nstrangers >= e.cfg.MaxStrangers {
		old := e.strangers.head
		if r := e.addrRefs[old.id.Addr]; r > 0 && r < maxAddrStreams && e.promote(old) {
			continue // its address was validated through another peer
		}
		e.stats.StrangersEvicted++
		old.failAll(ErrEvicted)
		e.removePeer(old)
	}
	g := e.groups[id.Group]
	if g == nil {
		g = &groupCtx{id: id.Group, peers: make(map[peerKey]*peer)}
		e.groups[id.Group] = g
	}
	p := newPeer(e, id)
	p.lastActive = nanos(e.now)
	g.peers[peerKey{id.Addr, id.Member, id.Mode}] = p
	e.npeers++
	if stranger {
		p.stranger = true
		e.nstrangers++
		e.strangers.pushBack(p)
		e.strangerRefs[id.Addr]++
	} else {
		e.established.pushBack(p)
		e.addrRefs[id.Addr]++
	}
	return p, nil
}

// maxAddrStreams bounds the established peers of one address: a datagram
// with the address of a validated peer (possibly forged) on a new stream,
// or an answer sent to such a stream, gets an established peer only while
// the address has fewer; beyond, it is a stranger (not
// amplification-limited: the address is validated), evicted before any
// established peer, until it itself acknowledges data sent to it. A host
// has a few streams per group it is in (control, multicast, aggregation,
// anycast, unicast).
const maxAddrStreams = 64

// promote makes a stranger established once it (or another peer at its
// address) has shown that it receives at its address, if MaxPeers allows
// (otherwise it stays a stranger, though no longer
// amplification-limited). It reports whether p is established now.
func (e *Engine) promote(p *peer) bool {
	if !p.stranger {
		return true
	}
	if e.npeers-e.nstrangers >= e.cfg.MaxPeers {
		return false
	}
	e.strangers.remove(p)
	e.nstrangers--
	e.unrefStranger(p.id.Addr)
	p.stranger = false
	e.established.pushBack(p)
	e.addrRefs[p.id.Addr]++
	return true
}

func (e *Engine) unrefStranger(a netip.AddrPort) {
	if e.strangerRefs[a]--; e.strangerRefs[a] <= 0 {
		delete(e.strangerRefs, a)
	}
}

// touch records activity on a peer (any datagram from it, or a Send to
// it): it moves to the back of its list, away from the idle sweep.
func (e *Engine) touch(p *peer, now time.Time) {
	p.lastActive = nanos(now)
	if p.stranger {
		if r := e.addrRefs[p.id.Addr]; r > 0 && r < maxAddrStreams {
			e.promote(p) // another peer at its address validated it
		}
	}
	if p.stranger {
		e.strangers.moveBack(p)
	} else {
		e.established.moveBack(p)
	}
}

// nanos is t in Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (e *Engine) setNow(now time.Time) {
	if now.After(e.now) {
		e.now = now
	}
}

// maxHostDelay bounds the wait between the kernel's receive time and the
// Receive that accepts it: an older one is taken for a clock step.
const maxHostDelay = time.Second

// Validated reports whether addr has shown that it receives at that
// address (a peer there acknowledged data this engine sent it: proof,
// since initial sequence numbers are random), or the local side initiated
// contact with it (Send, SendFragment). It stays true while an established
// peer at addr has state. Until then the engine sends a peer at addr at
// most three times the bytes received from it.
func (e *Engine) Validated(addr netip.AddrPort) bool { return e.addrRefs[addr] > 0 }

// Send queues a message for reliable delivery to the peer. h is a template:
// the engine fills Version, Src, PSN, AckBase, Offset, MsgLen, Len and TS;
// Group, Dst and Mode are taken from to; a zero MsgID is replaced by a
// fresh one (callers that need an agreed id, such as a response or an
// aggregation, set it). payload must not be modified until the message's
// Completion is returned by Poll. The token comes back in that Completion.
// Send returns the message id.
func (e *Engine) Send(to PeerID, h *wire.Header, payload []byte, token uint64) (uint64, error) {
	if uint64(len(payload)) > MaxMessage {
		return 0, ErrTooLarge
	}
	return e.send(to, h, payload, token, 0, uint32(len(payload)), false, 0)
}

// SendFragment queues one piece of a larger message: payload is bytes
// [h.Offset, h.Offset+len(payload)) of a message of h.MsgLen bytes with id
// h.MsgID (which must be set). The receiver reassembles fragments sent by
// separate calls into one message. payload must fit in one packet
// (SegmentSize). A forwarding node uses it to send each reduced chunk as
// soon as it is ready.
func (e *Engine) SendFragment(to PeerID, h *wire.Header, payload []byte, token uint64) (uint64, error) {
	return e.sendFragment(to, h, payload, token, false, 0)
}

func (e *Engine) sendFragment(to PeerID, h *wire.Header, payload []byte, token uint64, shared bool, payloadCRC uint32) (uint64, error) {
	if len(payload) > e.seg || h.MsgID == 0 || uint64(h.Offset)+uint64(len(payload)) > uint64(h.MsgLen) {
		return 0, ErrFragment
	}
	return e.send(to, h, payload, token, h.Offset, h.MsgLen, shared, payloadCRC)
}

// SendFragmentShared is SendFragment for a payload the caller leaves
// unchanged until the message completes and the Poll after that, with its
// wire.PayloadCRC: with SetGather on, the engine then sends it without
// copying it into each packet (a datagram's Tail) and checksums each
// packet over its header only (wire.AppendHeaderShared), so that one
// payload sent to many peers (a forwarding node's reduced chunk) is
// neither copied nor checksummed once per peer.
func (e *Engine) SendFragmentShared(to PeerID, h *wire.Header, payload []byte, payloadCRC uint32, token uint64) (uint64, error) {
	return e.sendFragment(to, h, payload, token, true, payloadCRC)
}

// SetGather lets Poll send the payloads of SendFragmentShared messages as
// datagrams' Tails, after a header of their own, instead of copying them:
// only for a caller whose Conn sends Tails, and that leaves Poll's
// datagrams alone until it has written them.
func (e *Engine) SetGather(on bool) { e.gather = on }

func (e *Engine) send(to PeerID, h *wire.Header, payload []byte, token uint64, base, msgLen uint32, shared bool, payloadCRC uint32) (uint64, error) {
	if e.nmsgs >= e.cfg.MaxMessages {
		return 0, ErrQueueFull
	}
	p := e.lookup(to)
	if p == nil {
		var err error
		if p, err = e.create(to, true); err != nil {
			return 0, err
		}
	}
	limit := e.cfg.MaxPeerMessages
	if p.limited() {
		limit = e.cfg.MaxStrangerMessages
	}
	if int(p.nmsgs) >= limit {
		return 0, ErrPeerQueueFull
	}
	// Strangers together hold at most a quarter of MaxMessages, so that
	// answers to a flood of them cannot leave established peers without
	// room.
	if p.stranger && e.strangerMsgs >= e.cfg.MaxMessages/4 {
		return 0, ErrPeerQueueFull
	}
	m := e.newMsg()
	*m = outMsg{hdr: *h, payload: payload, token: token, base: base, stranger: p.stranger, shared: shared, payloadCRC: payloadCRC}
	if p.stranger {
		e.strangerMsgs++
	}
	m.hdr.Version = wire.Version
	m.hdr.Src = e.local(to.Group)
	m.hdr.Group = to.Group
	m.hdr.Dst = to.Member
	m.hdr.Mode = to.Mode
	m.hdr.MsgLen = msgLen
	m.hdr.Flags &^= wire.FlagRetx | wire.FlagSyn
	if m.hdr.MsgID == 0 {
		e.msgSeq++
		m.hdr.MsgID = e.msgSeq
	}
	e.nmsgs++
	p.nmsgs++
	e.touch(p, e.now)
	p.enqueue(m)
	e.activate(p)
	return m.hdr.MsgID, nil
}

func (e *Engine) activate(p *peer) {
	if !p.isActive {
		p.isActive = true
		e.active = append(e.active, p)
	}
}

// Step processes one received datagram at time now. If it carries new
// data, Step returns it as a Delivery with ok true; ACKs, duplicates and
// malformed datagrams return ok false (and are counted in Stats). It is
// Receive with no receive time and no admission control.
func (e *Engine) Step(now time.Time, from netip.AddrPort, pkt []byte) (d Delivery, ok bool) {
	return e.Receive(now, netio.Datagram{Addr: from, Buf: pkt}, Admission{})
}

// Admission is how Receive takes a datagram, beyond Step.
type Admission struct {
	// Admit, if not nil, is called for a new data packet before it
	// counts as received; if it returns false the packet is dropped
	// unacknowledged (counted in Stats.Refused) and the sender will
	// resend it. A forwarding node uses it to hold senders back when its
	// aggregation slots are full.
	Admit func(*Delivery) bool
	// Checked says the caller has just verified the packet's checksum
	// (wire.Parse succeeded on these very bytes): the engine does not
	// compute it again.
	Checked bool
}

// Receive is Step for the datagram d from d.Addr, with admission
// control as adm says. d.RxTime is when the kernel received it (Unix
// ns), before this process got to it: the forward queueing a receiver
// reports to the sender (its delay signal) is measured to that time, so
// that a wait of the receiving process for a CPU does not read as
// queueing in the network; the ACK's own delay is still counted from
// now, when the process took the datagram, so the sender's timeout
// covers that wait. Zero, or a time not within maxHostDelay before now,
// means now.
func (e *Engine) Receive(now time.Time, d netio.Datagram, adm Admission) (Delivery, bool) {
	return e.stepAdmit(now, d.Addr, d.Buf, d.RxTime, adm.Admit, adm.Checked || e.cfg.Verified)
}

func (e *Engine) stepAdmit(now time.Time, from netip.AddrPort, pkt []byte, rx int64, admit func(*Delivery) bool, verified bool) (d Delivery, ok bool) {
	e.setNow(now)
	e.arrival = now
	if rx != 0 {
		if t := time.Unix(0, rx); t.Before(now) && now.Sub(t) < maxHostDelay {
			e.arrival = t
		}
	}
	var payload []byte
	var err error
	if verified {
		payload, _, err = wire.ParseVerified(pkt, &d.Header)
	} else {
		payload, _, err = wire.Parse(pkt, &d.Header)
	}
	if err != nil {
		e.stats.Malformed++
		return d, false
	}
	h := &d.Header
	if h.Flags&wire.FlagAuth != 0 ||
		(h.Mode != wire.ModeUnicast && !e.cfg.GroupModes) ||
		(h.Group != 0 && h.Dst != e.local(h.Group) && h.Dst != wire.MemberAll) {
		// No security associations yet; group modes only when enabled;
		// group traffic must be addressed to us or to all members.
		e.stats.Unexpected++
		return d, false
	}
	id := PeerID{Addr: from, Group: h.Group, Member: h.Src, Mode: h.Mode}
	switch h.Op {
	case wire.OpHandshake:
		// The security layer's, in front of the engine: one that
		// reaches the engine finds no layer to answer it. One kind is
		// for an engine without a layer: the peer takes only sealed
		// datagrams. Anyone can forge it, so it fails nothing: it is
		// kept on our unicast stream to that address while nothing of
		// the stream was acknowledged, to explain the stream's failure
		// if it comes (SealRequired, PeerError.SealRequired).
		if len(payload) == 1 && payload[0] == wire.HandshakeSealRequired {
			if p := e.lookup(PeerID{Addr: from}); p != nil && !p.synAcked {
				e.stats.SealRequired++
				p.sealHint = true
				return d, false
			}
		}
		e.stats.Unexpected++
		return d, false
	case wire.OpAck, wire.OpNack:
		if err := e.ack.Decode(payload); err != nil {
			e.stats.Malformed++
			return d, false
		}
		p := e.lookup(id)
		if p == nil {
			e.stats.Unexpected++
			return d, false
		}
		p.received(len(pkt))
		if h.Flags&wire.FlagSyn == 0 && p.onResetEcho(&e.ack) {
			e.stats.AcksReceived++
			e.touch(p, now)
			return d, false
		}
		if !p.onAck(now, &e.ack, h.Op == wire.OpNack, h.TS, h.Src != wire.MemberAll, h.Flags&wire.FlagSyn != 0) {
			e.stats.Unexpected++
			return d, false
		}
		e.stats.AcksReceived++
		e.touch(p, now)
		if h.Flags&wire.FlagSyn != 0 && p.nearSent(e.ack.Cum) {
			// A challenge: the peer has not validated this address yet,
			// or asks whether this side restarted its stream at the
			// cumulative point. Echoed only if that point is near where
			// this side's stream is: a challenge caused by a datagram
			// forged in this side's name names another point.
			p.echoPending, p.challenge = true, h.PSN
			e.activate(p)
		}
		return d, false
	}
	piggy := h.Flags&wire.FlagAck != 0
	if piggy {
		// An ACK of this side's stream rides on the data: taken off here,
		// applied below as an OpAck would be.
		if payload, err = wire.SplitAck(payload, &e.ack); err != nil {
			e.stats.Malformed++
			return d, false
		}
		h.Flags &^= wire.FlagAck
		h.Len -= wire.AckFixedLen
	}
	p := e.lookup(id)
	if p == nil {
		// Incoming data never fails to find room: a stranger evicts an
		// older stranger.
		p, _ = e.create(id, false)
	}
	p.received(len(pkt))
	e.touch(p, now)
	if piggy {
		if p.onAck(now, &e.ack, false, h.TS, true, false) {
			e.stats.AcksReceived++
		} else {
			e.stats.Unexpected++
		}
	}
	e.stats.PacketsReceived++
	wasPending := p.ackPending
	ok, pm := p.checkData(now, h)
	if !ok {
		return d, false
	}
	if admit != nil {
		// A copy kept in the engine, so that d does not escape to the heap.
		e.admitD = Delivery{Header: *h, Payload: payload, Peer: id}
		if !admit(&e.admitD) {
			e.stats.Refused++
			return d, false
		}
	}
	d.MsgDone = p.commitData(now, h, pm)
	if !wasPending && d.MsgDone && !e.cfg.ImmediateAcks && (h.Flags&wire.FlagResp != 0 || h.Mode == wire.ModeAnycast || answered(h)) &&
		h.Offset == 0 && uint32(h.Len) == h.MsgLen && p.piggybacks(false) && !p.limited() {
		// A lone one-packet response: its ACK may wait for the next
		// request to ride on. A lone one-packet anycast request: for its
		// reply (the switch relays the member's; a member answers), which
		// goes back on the same stream. Aggregation likewise: a lone
		// contribution's ACK waits for the result, a result's for the
		// member's next contribution.
		p.ackAt = nanos(now) + int64(MaxAckDelay)
	}
	d.Payload = payload
	d.Peer = id
	e.stats.BytesReceived += uint64(len(payload))
	return d, true
}

// answered reports whether h is aggregation data whose ACK a packet back
// on the same stream can carry soon: a result (from the forwarding node,
// MemberAll), answered by the member's next contribution, or a
// contribution whose sender gets the result: every member's of an
// Allreduce (Operand1 0), the root's only of a rooted one (Operand1 is
// the root's member id + 1). Another member's contribution to a rooted
// aggregation gets nothing back, so its ACK must not wait.
func answered(h *wire.Header) bool {
	if h.Mode != wire.ModeAggregate {
		return false
	}
	return h.Src == wire.MemberAll || h.Operand1 == 0 || h.Operand1 == uint64(h.Src)+1
}

// SetWindow sets the receive window advertised to one peer, in packets
// (zero restores Config.RecvWindow; larger values are capped to it). A
// forwarding node shrinks it to the aggregation slots a sender may use.
func (e *Engine) SetWindow(id PeerID, packets uint32) {
	p := e.lookup(id)
	if p == nil {
		return
	}
	p.advWindow = min(packets, uint32(e.cfg.RecvWindow))
}

// Poll appends the datagrams to send now to out and returns them, along
// with completions since the last Poll and the time Poll should next be
// called (zero: nothing pending; a time not after now: call again at
// once). The datagrams' buffers belong to the engine and are valid until
// the next Poll; so is the completion slice. While peers have state, the
// time returned is no later than when the least recently active of them
// may be swept as idle (Config.IdleTimeout).
func (e *Engine) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, []Completion, time.Time) {
	e.setNow(now)
	e.selfStall(now)
	next := e.sweep(now)
	budget := e.cfg.MaxBurst
	used := 0
	keep := e.active[:0]
	for _, p := range e.active {
		if budget > 0 {
			var n int
			out, n = p.poll(now, out, used, budget)
			used += n
			budget -= n
		}
		if p.removed {
			p.isActive = false
			continue
		}
		var dl time.Time
		if p.hasWork(now) {
			dl = now
		} else {
			dl = p.deadline(now)
		}
		if dl.IsZero() {
			p.isActive = false
			p.releaseRingIfIdle()
			continue
		}
		keep = append(keep, p)
		if next.IsZero() || dl.Before(next) {
			next = dl
		}
	}
	for i := len(keep); i < len(e.active); i++ {
		e.active[i] = nil
	}
	e.active = keep
	// Rotate so the next Poll starts with a different peer (fairness when
	// the burst budget runs out).
	if len(e.active) > 1 && budget == 0 {
		first := e.active[0]
		copy(e.active, e.active[1:])
		e.active[len(e.active)-1] = first
	}
	comps := e.comps
	e.comps, e.compsSpare = e.compsSpare[:0], comps
	e.expectAt = next
	return out, comps, next
}

// selfStallGap is how late past its deadline a Poll must come for the
// engine to take the delay as its own process's stall.
const selfStallGap = 500 * time.Millisecond

// selfStall leaves this process's own stall out of its peers' silence:
// when Poll comes more than selfStallGap after the deadline it last gave,
// the process did not run meanwhile (stopped, paused, starved of CPU),
// so neither did it receive; the time its peers have been silent is
// shifted by the stall, and a peer is declared dead only if it stays
// silent for DeadTimeout of this process's running time. (What the peers
// decided about this process meanwhile, it learns from them: a switch
// that counted it dead says so.) The work is over the peers with data in
// flight, only after a stall.
func (e *Engine) selfStall(now time.Time) {
	if e.expectAt.IsZero() {
		return
	}
	gap := now.Sub(e.expectAt)
	e.expectAt = time.Time{}
	if gap <= selfStallGap {
		return
	}
	e.stats.SelfStalls++
	for _, p := range e.active {
		if !p.lastProgress.IsZero() {
			p.lastProgress = p.lastProgress.Add(gap)
		}
	}
}

// sweep removes idle peers not active for IdleTimeout, looking at no more
// than sweepPerPoll of each list's least recently active peers; a busy one
// found there goes to the back. It returns when the next sweep is due
// (zero if no peer has state).
func (e *Engine) sweep(now time.Time) time.Time {
	var next time.Time
	for _, l := range [2]*peerList{&e.strangers, &e.established} {
		for range sweepPerPoll {
			p := l.head
			if p == nil || nanos(now)-p.lastActive < int64(e.cfg.IdleTimeout) {
				break
			}
			if p.idle() {
				e.stats.PeersSwept++
				e.removePeer(p)
			} else {
				e.touch(p, now)
			}
		}
		if p := l.head; p != nil {
			if at := time.Unix(0, p.lastActive+int64(e.cfg.IdleTimeout)); next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	return next
}

// buf returns the i-th output buffer of this Poll, sized for one datagram.
func (e *Engine) buf(i int) []byte {
	for len(e.arena) <= i {
		e.arena = append(e.arena, make([]byte, e.cfg.MTU))
	}
	return e.arena[i]
}

func (e *Engine) complete(m *outMsg, p *peer, err error) {
	e.nmsgs--
	p.nmsgs--
	if m.stranger {
		e.strangerMsgs--
	}
	if err != nil {
		e.stats.MessagesFailed++
	} else {
		e.stats.MessagesCompleted++
	}
	e.comps = append(e.comps, Completion{Token: m.token, MsgID: m.hdr.MsgID, Peer: p.id, Err: err})
	m.done = true
	m.payload = nil
}

// getRing returns a send ring: SendWindow records, or a stranger's
// (strangerRing) if small.
func (e *Engine) getRing(small bool) []pktRec {
	pool, size := &e.rings, e.cfg.SendWindow
	if small && strangerRing < size {
		pool, size = &e.smallRings, strangerRing
	}
	if n := len(*pool); n > 0 {
		r := (*pool)[n-1]
		*pool = (*pool)[:n-1]
		return r
	}
	return make([]pktRec, size)
}

// putRing keeps a ring for reuse, up to 64 of each size. A ring
// returned zeroed (an idle peer's: records are zeroed as sndUna passes
// them) is not cleared again: a full ring is SendWindow records, and a
// stream that goes idle after every message returns it each time.
func (e *Engine) putRing(r []pktRec, zeroed bool) {
	pool := &e.rings
	if len(r) < e.cfg.SendWindow {
		pool = &e.smallRings
	}
	if len(*pool) < 64 {
		if !zeroed {
			clear(r)
		}
		*pool = append(*pool, r)
	}
}

// Delivered tells the engine that the peer holds message msgID in full —
// the layer above knows it, for instance from the peer's response — so its
// packets count as acknowledged and its payload is released at once (the
// caller may reuse the buffer, and the engine will not read it again).
// Messages carrying FlagResp are not matched.
func (e *Engine) Delivered(to PeerID, msgID uint64) {
	p := e.lookup(to)
	if p == nil || p.ring == nil {
		return
	}
	m := p.mask()
	for psn := p.sndUna; psn != p.sndNxt; psn++ {
		rec := &p.ring[psn&m]
		if rec.msg != nil && rec.msg.hdr.MsgID == msgID && rec.msg.hdr.Flags&wire.FlagResp == 0 {
			p.ackRec(rec)
		}
	}
	p.advanceAcked()
}

// Abandon gives up on message msgID to the peer: packets not yet sent are
// dropped, packets in flight are no longer retransmitted (the receiver
// skips them through AckBase), the payload is released at once, and the
// message completes with ErrAbandoned. The receiver may have got part of
// it. Messages carrying FlagResp are not matched.
func (e *Engine) Abandon(to PeerID, msgID uint64) {
	p := e.lookup(to)
	if p == nil {
		return
	}
	var msg *outMsg
	// Unsent remainder: unlink the message from the queue.
	var prev *outMsg
	for q := p.qhead; q != nil; prev, q = q, q.next_ {
		if q.hdr.MsgID == msgID && q.hdr.Flags&wire.FlagResp == 0 {
			msg = q
			if prev == nil {
				p.qhead = q.next_
			} else {
				prev.next_ = q.next_
			}
			if p.qtail == q {
				p.qtail = prev
			}
			q.next_ = nil
			q.allSent = true
			break
		}
	}
	if p.ring != nil {
		m := p.mask()
		for psn := p.sndUna; psn != p.sndNxt; psn++ {
			rec := &p.ring[psn&m]
			if rec.msg != nil && rec.msg.hdr.MsgID == msgID && rec.msg.hdr.Flags&wire.FlagResp == 0 {
				msg = rec.msg
				if !msg.done {
					// Complete before ackRec so the message counts as failed.
					e.complete(msg, p, ErrAbandoned)
				}
				p.ackRec(rec)
			}
		}
	}
	if msg != nil && !msg.done {
		e.complete(msg, p, ErrAbandoned)
	}
	p.advanceAcked()
}

// FlushAcks makes every ACK held back (the delayed ACK of a lone
// response, see Config.ImmediateAcks) due now, so that the next Poll
// sends it: what a process does before it stops, since a peer whose
// response is never acknowledged resends it until DeadTimeout.
func (e *Engine) FlushAcks() {
	for p := range e.allPeers() {
		if p.ackPending && p.ackAt != 0 {
			p.ackAt = 0
			e.activate(p)
		}
	}
}

// Owed reports whether some peer's data was received but not yet
// acknowledged in full: data from an address not validated yet (only a
// challenge went back, and the real ACK waits for its echo), or an ACK
// pending. A process that stops while it owes an ACK leaves the sender
// resending until DeadTimeout: a closing endpoint lingers until it owes
// none (or a bound passes).
func (e *Engine) Owed() bool {
	for p := range e.allPeers() {
		if p.rcvInit && (p.ackPending || (p.limited() && p.rcvNxt != p.peerBase)) {
			return true
		}
	}
	return false
}

// allPeers yields every peer with state, strangers first.
func (e *Engine) allPeers() iter.Seq[*peer] {
	return func(yield func(*peer) bool) {
		for _, l := range [2]*peerList{&e.strangers, &e.established} {
			for p := l.head; p != nil; p = p.next {
				if !yield(p) {
					return
				}
			}
		}
	}
}

// PeerMessages returns the number of outgoing messages queued or in
// flight to the peer id (zero if it has no state).
func (e *Engine) PeerMessages(id PeerID) int {
	if p := e.lookup(id); p != nil {
		return int(p.nmsgs)
	}
	return 0
}

// Pending returns the number of outgoing messages queued or in flight.
func (e *Engine) Pending() int { return e.nmsgs }

// Peers returns the number of peers with state (at most MaxPeers +
// MaxStrangers).
func (e *Engine) Peers() int { return e.npeers }

// Strangers returns the number of stranger peers with state (at most
// MaxStrangers).
func (e *Engine) Strangers() int { return e.nstrangers }

// MaxPeerMessages is Config.MaxPeerMessages (its default applied): the
// most messages PeerMessages may reach for an established peer.
func (e *Engine) MaxPeerMessages() int { return e.cfg.MaxPeerMessages }

// ForgetGroup drops the state of every stream of group with the peer at
// addr (any member, any mode), failing their outstanding messages with
// err (nil means ErrPeerDead): what a member does when it leaves a group,
// since the forwarding node forgets its side of the same streams, and a
// stream one side forgot and the other did not would not carry anything
// again (a member that joins the same group id again would find it).
// O(streams of the group).
func (e *Engine) ForgetGroup(addr netip.AddrPort, group uint32, err error) {
	g := e.groups[group]
	if g == nil {
		return
	}
	var ids []PeerID
	for _, p := range g.peers {
		if p.id.Addr == addr {
			ids = append(ids, p.id)
		}
	}
	for _, id := range ids {
		e.ForgetPeer(id, err)
	}
}

// SealRequired reports whether the unicast stream to addr was told that
// its peer takes sealed datagrams only (wire.HandshakeSealRequired) and
// has had no ACK: the likely reason it gets no answer. The notice is not
// authenticated: use it to explain a failure, never to cause one.
func (e *Engine) SealRequired(addr netip.AddrPort) bool {
	p := e.lookup(PeerID{Addr: addr})
	return p != nil && p.sealHint && !p.synAcked
}

// ForgetPeer drops all state for a peer, failing its outstanding messages
// with err (nil means ErrPeerDead).
func (e *Engine) ForgetPeer(id PeerID, err error) {
	p := e.lookup(id)
	if p == nil {
		return
	}
	if err == nil {
		err = ErrPeerDead
	}
	p.failAll(err)
	e.removePeer(p)
}

func (e *Engine) removePeer(p *peer) {
	g := e.groups[p.id.Group]
	delete(g.peers, peerKey{p.id.Addr, p.id.Member, p.id.Mode})
	if len(g.peers) == 0 {
		delete(e.groups, p.id.Group)
	}
	e.npeers--
	if p.stranger {
		e.strangers.remove(p)
		e.nstrangers--
		e.unrefStranger(p.id.Addr)
	} else {
		e.established.remove(p)
		if e.addrRefs[p.id.Addr]--; e.addrRefs[p.id.Addr] <= 0 {
			delete(e.addrRefs, p.id.Addr)
		}
	}
	p.removed = true
	if p.ring != nil {
		e.putRing(p.ring, false)
		p.ring = nil
	}
}
