package transport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
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
	// ErrTooLarge means the message exceeds MaxMessage bytes.
	ErrTooLarge = errors.New("transport: message too large")
	// ErrTooManyPeers means MaxPeers peers already have state.
	ErrTooManyPeers = errors.New("transport: too many peers")
	// ErrAbandoned completes a message given up with Abandon.
	ErrAbandoned = errors.New("transport: message abandoned")
	// ErrFragment means a SendFragment call was malformed (no id, larger
	// than a packet, or beyond MsgLen).
	ErrFragment = errors.New("transport: bad fragment")
	// ErrPeerDead is wrapped by *PeerError.
	ErrPeerDead = errors.New("transport: peer not responding")
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

func (p PeerID) String() string {
	if p.Mode != wire.ModeUnicast {
		return fmt.Sprintf("%v/g%d/m%d/%v", p.Addr, p.Group, p.Member, p.Mode)
	}
	return fmt.Sprintf("%v/g%d/m%d", p.Addr, p.Group, p.Member)
}

// PeerError reports that a peer stopped acknowledging for DeadTimeout.
type PeerError struct {
	Peer  PeerID
	Since time.Duration // time without progress
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("transport: peer %v not responding for %v", e.Peer, e.Since)
}

// Unwrap makes errors.Is(err, ErrPeerDead) true.
func (e *PeerError) Unwrap() error { return ErrPeerDead }

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
	MsgDone bool
}

// Stats are cumulative counters.
type Stats struct {
	PacketsSent, PacketsRetransmitted, PacketsReceived uint64
	BytesSent, BytesReceived                           uint64 // payload bytes of data packets
	AcksSent, AcksReceived, NacksSent                  uint64
	Duplicates, OutOfWindow, PartialOverflow           uint64
	Malformed, Unexpected, Refused                     uint64
	FastRetransmits, Timeouts, PeersDead               uint64
	MessagesCompleted, MessagesFailed                  uint64
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
	next_   *outMsg // queue link
}

// Engine is the sans-I/O reliable transport of one endpoint. It is not
// safe for concurrent use: one goroutine owns it, feeds received datagrams
// to Step, calls Poll for datagrams to send, completions and the next
// deadline, and never lets the engine see a socket or a clock.
type Engine struct {
	cfg    Config
	seg    int
	rng    *mrand.Rand
	msgSeq uint64
	groups map[uint32]*groupCtx
	npeers int
	active []*peer // peers with something to send
	nmsgs  int

	comps      []Completion // accumulated since the last Poll
	compsSpare []Completion // returned by the last Poll; reused by the next
	arena      [][]byte     // Poll's output buffers, reused
	ack        wire.Ack
	admitD     Delivery // passed to StepAdmit's admit function
	stats      Stats
	rings      [][]pktRec        // free send rings
	locals     map[uint32]uint16 // member id per group (SetLocal)
}

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
		cfg:    cfg,
		seg:    cfg.segSize(),
		rng:    rng,
		msgSeq: rng.Uint64() >> 1,
		groups: make(map[uint32]*groupCtx),
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

// Stats returns the counters.
func (e *Engine) Stats() Stats { return e.stats }

func (e *Engine) peer(id PeerID, create bool) (*peer, error) {
	g := e.groups[id.Group]
	if g == nil {
		if !create {
			return nil, nil
		}
		g = &groupCtx{id: id.Group, peers: make(map[peerKey]*peer)}
		e.groups[id.Group] = g
	}
	k := peerKey{id.Addr, id.Member, id.Mode}
	p := g.peers[k]
	if p == nil && create {
		if e.npeers >= e.cfg.MaxPeers {
			return nil, ErrTooManyPeers
		}
		p = newPeer(e, id)
		g.peers[k] = p
		e.npeers++
	}
	return p, nil
}

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
	return e.send(to, h, payload, token, 0, uint32(len(payload)))
}

// SendFragment queues one piece of a larger message: payload is bytes
// [h.Offset, h.Offset+len(payload)) of a message of h.MsgLen bytes with id
// h.MsgID (which must be set). The receiver reassembles fragments sent by
// separate calls into one message. payload must fit in one packet
// (SegmentSize). A forwarding node uses it to send each reduced chunk as
// soon as it is ready.
func (e *Engine) SendFragment(to PeerID, h *wire.Header, payload []byte, token uint64) (uint64, error) {
	if len(payload) > e.seg || h.MsgID == 0 || uint64(h.Offset)+uint64(len(payload)) > uint64(h.MsgLen) {
		return 0, ErrFragment
	}
	return e.send(to, h, payload, token, h.Offset, h.MsgLen)
}

func (e *Engine) send(to PeerID, h *wire.Header, payload []byte, token uint64, base, msgLen uint32) (uint64, error) {
	if e.nmsgs >= e.cfg.MaxMessages {
		return 0, ErrQueueFull
	}
	p, err := e.peer(to, true)
	if err != nil {
		return 0, err
	}
	m := &outMsg{hdr: *h, payload: payload, token: token, base: base}
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
// malformed datagrams return ok false (and are counted in Stats).
func (e *Engine) Step(now time.Time, from netip.AddrPort, pkt []byte) (d Delivery, ok bool) {
	return e.StepAdmit(now, from, pkt, nil)
}

// StepAdmit is Step with admission control: for a new data packet, admit
// (if not nil) is called before the packet counts as received; if it
// returns false the packet is dropped unacknowledged (counted in
// Stats.Refused) and the sender will resend it. A forwarding node uses it
// to hold senders back when its aggregation slots are full.
func (e *Engine) StepAdmit(now time.Time, from netip.AddrPort, pkt []byte, admit func(*Delivery) bool) (d Delivery, ok bool) {
	payload, _, err := wire.Parse(pkt, &d.Header)
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
	case wire.OpAck, wire.OpNack:
		if err := e.ack.Decode(payload); err != nil {
			e.stats.Malformed++
			return d, false
		}
		p, _ := e.peer(id, false)
		if p == nil {
			e.stats.Unexpected++
			return d, false
		}
		e.stats.AcksReceived++
		p.onAck(now, &e.ack, h.Op == wire.OpNack, h.TS, h.Src != wire.MemberAll)
		return d, false
	}
	p, err := e.peer(id, true)
	if err != nil {
		e.stats.Unexpected++
		return d, false
	}
	e.stats.PacketsReceived++
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
	d.Payload = payload
	d.Peer = id
	e.stats.BytesReceived += uint64(len(payload))
	return d, true
}

// SetWindow sets the receive window advertised to one peer, in packets
// (zero restores Config.RecvWindow; larger values are capped to it). A
// forwarding node shrinks it to the aggregation slots a sender may use.
func (e *Engine) SetWindow(id PeerID, packets uint32) {
	p, err := e.peer(id, true)
	if err != nil {
		return
	}
	p.advWindow = min(packets, uint32(e.cfg.RecvWindow))
}

// Poll appends the datagrams to send now to out and returns them, along
// with completions since the last Poll and the time Poll should next be
// called (zero: nothing pending; a time not after now: call again at
// once). The datagrams' buffers belong to the engine and are valid until
// the next Poll; so is the completion slice.
func (e *Engine) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, []Completion, time.Time) {
	budget := e.cfg.MaxBurst
	used := 0
	var next time.Time
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
		if p.hasWork() {
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
	return out, comps, next
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
	if err != nil {
		e.stats.MessagesFailed++
	} else {
		e.stats.MessagesCompleted++
	}
	e.comps = append(e.comps, Completion{Token: m.token, MsgID: m.hdr.MsgID, Peer: p.id, Err: err})
	m.done = true
	m.payload = nil
}

func (e *Engine) getRing() []pktRec {
	if n := len(e.rings); n > 0 {
		r := e.rings[n-1]
		e.rings = e.rings[:n-1]
		return r
	}
	return make([]pktRec, e.cfg.SendWindow)
}

func (e *Engine) putRing(r []pktRec) {
	if len(e.rings) < 64 {
		clear(r)
		e.rings = append(e.rings, r)
	}
}

// Delivered tells the engine that the peer holds message msgID in full —
// the layer above knows it, for instance from the peer's response — so its
// packets count as acknowledged and its payload is released at once (the
// caller may reuse the buffer, and the engine will not read it again).
// Messages carrying FlagResp are not matched.
func (e *Engine) Delivered(to PeerID, msgID uint64) {
	p, _ := e.peer(to, false)
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
	p, _ := e.peer(to, false)
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

// Pending returns the number of outgoing messages queued or in flight.
func (e *Engine) Pending() int { return e.nmsgs }

// Peers returns the number of peers with state.
func (e *Engine) Peers() int { return e.npeers }

// ForgetPeer drops all state for a peer, failing its outstanding messages
// with err (nil means ErrPeerDead).
func (e *Engine) ForgetPeer(id PeerID, err error) {
	p, _ := e.peer(id, false)
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
	p.removed = true
	if p.ring != nil {
		e.putRing(p.ring)
		p.ring = nil
	}
}
