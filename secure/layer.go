package secure

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Layer protects every datagram one process sends and receives: it sits
// between the process's protocol core (a transport engine, an endpoint
// Core, a switch) and its socket. Outbound, it seals each datagram in the
// session with its destination, opening one with a handshake (HANDSHAKE
// packets) and holding the datagrams meanwhile; inbound, it opens sealed
// datagrams and hands their plain form to the core, answers handshakes,
// and drops everything else, counted. A datagram is thus accepted only
// from the address whose session sealed it, never twice, and each
// address's peer identity (its certificate) is known. Like the cores it
// is sans-I/O: no clock, no sockets; not safe for concurrent use.
type Layer struct {
	id   *Identity
	opts Options
	rand io.Reader
	res  *Responder

	peers    map[netip.AddrPort]*layerPeer
	bySAID   map[uint32]*layerPeer // by the SAID this side receives on
	nextSAID uint32                // only if rand fails
	out      []Datagram
	stats    LayerStats
	bufs     netio.Pool // the buffers the layer seals into; Recycle gives them back
	deadline time.Time  // when Tick has work next (zero: none)

	answers answerLimit // answers to datagrams no session vouches for
	// refusedAt is when a refused handshake was last logged,
	// refusedMore how many were refused since.
	refusedAt   time.Time
	refusedMore int
	bound       sessionBound

	// Policy, if set, is asked about every peer's certificate when its
	// session is established and again at every sweep (at most a minute
	// apart): a session whose peer's credential has expired or been
	// revoked since is closed, and no new one is established with it.
	// Without it, certificates are checked for their validity window in
	// the handshake only. NewLayer sets it to the identity's Policy.
	Policy *Policy
	// Log receives the layer's events worth an operator's attention (a
	// session lost, a peer evicted) at WARN, and routine ones at DEBUG;
	// nil discards them.
	Log *slog.Logger

	// MaxPeers bounds the addresses with a session or a handshake;
	// MaxQueued the datagrams held per address while its handshake
	// runs. HandshakeRetry is how long an initiator waits before it
	// sends its HELLO again, HandshakeGiveUp when it stops (the held
	// datagrams are dropped); SessionIdle how long an unused session is
	// kept.
	MaxPeers        int
	MaxQueued       int
	HandshakeRetry  time.Duration
	HandshakeGiveUp time.Duration
	SessionIdle     time.Duration
	// MaxSessionsPerName bounds the sessions one credential (role and
	// name) holds at once, MaxSessionsPerAddr those from one IP address:
	// a new one beyond either bound evicts the least recently active
	// session of that credential or address, so that one credential or
	// host cannot take the table from everyone else.
	MaxSessionsPerName int
	MaxSessionsPerAddr int
	// A session is replaced by a new one (a new handshake, while the old
	// session goes on carrying traffic) once it has sealed RekeyPackets
	// datagrams or is RekeyAge old; the old one still opens what arrives
	// for Drain after the new one is established.
	RekeyPackets uint64
	RekeyAge     time.Duration
	Drain        time.Duration
}

// Datagram is a datagram to send: its destination and bytes.
type Datagram = netio.Datagram

// The buffers the layer seals into, a netio.Pool: the smallest,
// bufMin, holds any datagram of a 1500-byte MTU, whatever its size; of
// each class, bufKeep buffers and bufKeepBytes are kept for reuse once
// Recycle gives them back: 1024 datagrams of up to 2 KiB, 256 jumbo
// frames, 64 of any UDP datagram's size.
const (
	bufMin       = 2 << 10
	bufKeep      = 1024
	bufKeepBytes = 4 << 20
)

// Recycle gives the layer back the buffers of datagrams that Take
// returned, once they are written, so that later datagrams are sealed
// into them rather than into new ones: with it, a steady flow of
// datagrams allocates nothing. The caller must not touch the buffers
// afterwards, nor recycle one twice. Calling it is optional.
func (l *Layer) Recycle(ds []Datagram) {
	for _, d := range ds {
		l.bufs.Put(d.Buf)
	}
}

// LayerStats counts what a Layer did.
type LayerStats struct {
	Sealed, Opened           uint64
	Handshakes               uint64 // sessions established
	HandshakesFailed         uint64 // refused or given up
	HandshakeDuplicates      uint64 // answers to a handshake already completed (a resent HELLO's), ignored
	DroppedPlain             uint64 // unsealed datagrams (not HANDSHAKE) received
	SealRequiredSent         uint64 // of those, carrying a payload: answered "seal required" (rate permitting)
	DroppedNoSA, DroppedAuth uint64 // sealed for no SA of ours (or from another address); failing authentication
	DroppedReplay            uint64 // replayed or too old
	DroppedQueue             uint64 // outbound datagrams dropped: queue full, handshake failed, table full
	SessionsReset            uint64 // sessions the peer said it no longer knew (it restarted): a new handshake started
	SessionsLost             uint64 // sessions dropped because the peer did not answer a new handshake
	SessionsEvicted          uint64 // sessions dropped for MaxSessionsPerName or MaxSessionsPerAddr
	SessionsRevoked          uint64 // sessions closed because the peer's credential expired or was revoked (Policy)
	Rekeys                   uint64 // sessions replaced for their age or packets sealed
	HandshakeRestarts        uint64 // handshakes started again by Tick for datagrams held with none under way
	Peers                    int
}

// Defaults of Layer.
const (
	DefaultLayerPeers      = 65536
	DefaultLayerQueued     = 256
	DefaultHandshakeRetry  = 250 * time.Millisecond
	DefaultHandshakeGiveUp = 10 * time.Second
	DefaultSessionIdle     = 10 * time.Minute
	DefaultSessionsPerName = 1024
	DefaultSessionsPerAddr = 4096
	// MaxHandshakeRetry is the longest an initiator waits between two
	// HELLOs: the wait starts at HandshakeRetry and doubles.
	MaxHandshakeRetry = 2 * time.Second
	DefaultRekeyAge   = time.Hour
	DefaultDrain      = 30 * time.Second
)

type layerPeer struct {
	addr     netip.AddrPort
	saids    []uint32 // the SAIDs bySAID maps to this peer (at most 2)
	sess     *Session
	since    time.Time // when sess was established
	old      *Session  // the session sess replaced, opening what still arrives for it
	oldUntil time.Time
	ini      *Initiator
	hello    []byte // the HELLO to send again
	retryAt  time.Time
	backoff  time.Duration // the wait before the next HELLO
	giveUpAt time.Time
	queue    [][]byte
	last     time.Time
	// hold: the peer said it does not know sess (an unknown-SA notice,
	// which anyone can forge): sess is kept, but datagrams wait for the
	// handshake under way, which only the real peer can complete.
	hold     bool
	noticeAt time.Time // when a notice last started a handshake
	// restartAt: this side gave way to the peer's handshake (both
	// opened at once); if no session exists by then, Tick starts one.
	restartAt time.Time
	bound     []string // the sessionBound keys this peer's session counts under
}

// NewLayer returns the layer of identity id; rand is crypto/rand.Reader
// in production.
func NewLayer(id *Identity, opts Options, rand io.Reader) (*Layer, error) {
	l := &Layer{id: id, opts: opts, rand: rand, peers: make(map[netip.AddrPort]*layerPeer), bySAID: make(map[uint32]*layerPeer),
		bufs:     netio.Pool{Min: bufMin, Keep: bufKeep, KeepBytes: bufKeepBytes},
		MaxPeers: DefaultLayerPeers, MaxQueued: DefaultLayerQueued, HandshakeRetry: DefaultHandshakeRetry,
		HandshakeGiveUp: DefaultHandshakeGiveUp, SessionIdle: DefaultSessionIdle,
		RekeyPackets: RekeyAfter, RekeyAge: DefaultRekeyAge, Drain: DefaultDrain,
		MaxSessionsPerName: DefaultSessionsPerName, MaxSessionsPerAddr: DefaultSessionsPerAddr, Policy: id.Policy}
	if opts.RekeyAge > 0 {
		l.RekeyAge = opts.RekeyAge
	}
	if opts.RekeyPackets > 0 {
		l.RekeyPackets = min(opts.RekeyPackets, RekeyAfter)
	}
	res, err := NewResponder(id, opts, rand, l.newSAID)
	if err != nil {
		return nil, err
	}
	l.res = res
	return l, nil
}

// newSAID draws a receive SAID no session of this layer uses, at random:
// one SAID seen tells nothing of the next (a counter would let whoever
// saw one name the others in forged notices).
func (l *Layer) newSAID() uint32 {
	var b [4]byte
	for {
		if _, err := io.ReadFull(l.rand, b[:]); err != nil {
			// crypto/rand does not fail; a test's reader that ran
			// dry falls back to a counter.
			l.nextSAID++
			binary.BigEndian.PutUint32(b[:], l.nextSAID)
		}
		if id := binary.BigEndian.Uint32(b[:]); id != 0 && l.bySAID[id] == nil && !l.res.pendingSAID(id) {
			return id
		}
	}
}

// Stats returns the counters.
func (l *Layer) Stats() LayerStats {
	s := l.stats
	s.Peers = len(l.peers)
	return s
}

// Peer returns the certificate of the process at addr, once a session
// with it is established.
func (l *Layer) Peer(addr netip.AddrPort) (Cert, bool) {
	if p := l.peers[addr]; p != nil && p.sess != nil {
		return p.sess.Peer, true
	}
	return Cert{}, false
}

// ErrLayerFull: no room for another address's session.
var ErrLayerFull = errors.New("secure: too many peers")

// Send takes a plain datagram pkt (an encoded wire packet) for to at now:
// sealed at once if a session exists, else held (at most MaxQueued) while
// a handshake opens one. Its output is in the next Take. pkt is copied
// (into a buffer with room for the tag, which Recycle gives back).
func (l *Layer) Send(now time.Time, to netip.AddrPort, pkt []byte) error {
	return l.send(now, to, pkt, false)
}

// send is Send, with the sealed datagram marked Control if control (and
// sealed at once: one held for a handshake goes out unmarked).
func (l *Layer) send(now time.Time, to netip.AddrPort, pkt []byte, control bool) error {
	p := l.peers[to]
	if p == nil {
		var err error
		if p, err = l.initiate(now, to); err != nil {
			l.stats.DroppedQueue++
			return err
		}
	}
	p.last = now
	if p.sess == nil || p.hold {
		if len(p.queue) >= l.MaxQueued {
			l.stats.DroppedQueue++
			return fmt.Errorf("secure: %d datagrams held for %v's handshake", len(p.queue), to)
		}
		p.queue = append(p.queue, append(l.bufs.Get(len(pkt) + wire.TagLen)[:0], pkt...))
		return nil
	}
	err := l.seal(p, append(l.bufs.Get(len(pkt) + wire.TagLen)[:0], pkt...), control)
	if p.ini == nil && (p.sess.Send.Seq() >= l.RekeyPackets || now.Sub(p.since) >= l.RekeyAge) {
		// Time for new keys: a new handshake, while this session goes
		// on sealing until it completes.
		if _, ierr := l.initiate(now, to); ierr == nil {
			l.stats.Rekeys++
		}
	}
	return err
}

func (l *Layer) seal(p *layerPeer, pkt []byte, control bool) error {
	sealed, err := p.sess.Send.Seal(pkt)
	if err != nil {
		l.bufs.Put(pkt)
		return err
	}
	l.stats.Sealed++
	l.out = append(l.out, Datagram{Addr: p.addr, Buf: sealed, Control: control})
	return nil
}

// initiate starts a handshake with to.
func (l *Layer) initiate(now time.Time, to netip.AddrPort) (*layerPeer, error) {
	if len(l.peers) >= l.MaxPeers {
		l.sweep(now)
		if len(l.peers) >= l.MaxPeers {
			return nil, ErrLayerFull
		}
	}
	said := l.newSAID()
	ini, err := NewInitiator(l.id, said, l.opts, l.rand)
	if err != nil {
		return nil, err
	}
	p := l.peers[to]
	if p == nil {
		p = &layerPeer{addr: to}
		l.peers[to] = p
	}
	if p.ini != nil {
		l.unmapSAIDs(p, p.sessionSAIDs()...)
	}
	p.ini, p.giveUpAt, p.last, p.backoff, p.restartAt = ini, now.Add(l.HandshakeGiveUp), now, l.HandshakeRetry, time.Time{}
	l.wake(p.giveUpAt)
	l.mapSAID(p, said)
	l.sendHandshake(now, p, ini.Hello())
	return p, nil
}

// pendingSAID is the SAID of p's handshake under way (0: none).
func (p *layerPeer) pendingSAID() uint32 {
	if p.ini == nil {
		return 0
	}
	return p.ini.said
}

// sessionSAIDs are the SAIDs p's sessions receive on (not a handshake's).
func (p *layerPeer) sessionSAIDs() []uint32 {
	var keep []uint32
	if p.sess != nil {
		keep = append(keep, p.sess.Recv.ID())
	}
	if p.old != nil {
		keep = append(keep, p.old.Recv.ID())
	}
	return keep
}

// mapSAID makes id name p.
func (l *Layer) mapSAID(p *layerPeer, id uint32) {
	l.bySAID[id] = p
	p.saids = append(p.saids, id)
}

// unmapSAIDs forgets p's SAIDs but those in keep.
func (l *Layer) unmapSAIDs(p *layerPeer, keep ...uint32) {
	kept := p.saids[:0]
	for _, id := range p.saids {
		if slices.Contains(keep, id) && id != 0 {
			kept = append(kept, id)
		} else if l.bySAID[id] == p {
			delete(l.bySAID, id)
		}
	}
	p.saids = kept
}

// sendHandshake sends msg to p in a HANDSHAKE packet; a HELLO is sent
// again every HandshakeRetry until answered.
func (l *Layer) sendHandshake(now time.Time, p *layerPeer, msg []byte) {
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: uint32(len(msg))}
	b, err := wire.AppendPacket(l.bufs.Get(wire.HeaderLen + len(msg))[:0], &h, msg)
	if err != nil {
		l.bufs.Put(b)
		return
	}
	if len(msg) > 0 && msg[0] == hsHello {
		// A copy of its own: the datagram's buffer goes back to the
		// pool once written.
		p.hello, p.retryAt = append(p.hello[:0], b...), now.Add(max(p.backoff, l.HandshakeRetry))
		l.wake(p.retryAt)
	}
	l.out = append(l.out, Datagram{Addr: p.addr, Buf: b})
}

// Receive takes a datagram from from at now. It returns the plain packet
// to hand to the core (a sub-slice of pkt, or nil when there is none: a
// handshake message, or a datagram dropped and counted). The plain packet
// carries no valid CRC32C: parse it with wire.ParseVerified (a core with
// transport.Config.Verified set does).
func (l *Layer) Receive(now time.Time, from netip.AddrPort, pkt []byte) []byte {
	var h wire.Header
	payload, _, err := wire.Parse(pkt, &h)
	if err != nil {
		return nil // malformed: the core would drop it too
	}
	if h.Op == wire.OpHandshake {
		l.handshake(now, from, payload)
		return nil
	}
	if h.Flags&wire.FlagAuth == 0 {
		l.stats.DroppedPlain++
		l.sealRequired(now, from)
		return nil
	}
	p := l.bySAID[h.SAID]
	if p == nil || p.sess == nil || p.addr != from {
		l.stats.DroppedNoSA++
		l.unknownSA(now, from, h.SAID)
		return nil
	}
	rs := p.sess.Recv
	if rs.ID() != h.SAID {
		if p.old == nil || p.old.Recv.ID() != h.SAID {
			l.stats.DroppedNoSA++ // the SAID of a handshake under way
			return nil
		}
		rs = p.old.Recv // sealed before a rekey
	}
	plain, err := rs.Open(&h, pkt)
	switch {
	case errors.Is(err, ErrReplay):
		l.stats.DroppedReplay++
		return nil
	case err != nil:
		l.stats.DroppedAuth++
		return nil
	}
	l.stats.Opened++
	p.last = now
	// The plain packet: the header without the protection fields, the
	// payload decrypted in place, no tag. Its CRC32C is left as it was
	// (the header's only): the tag authenticated every byte, and the core
	// parses it with wire.ParseVerified.
	n := wire.HeaderLen + len(plain)
	out := pkt[:n]
	out[3] &^= byte(wire.FlagAuth)
	binary.BigEndian.PutUint32(out[12:], 0)
	binary.BigEndian.PutUint32(out[88:], 0)
	return out
}

// handshake handles a HANDSHAKE message from from.
func (l *Layer) handshake(now time.Time, from netip.AddrPort, msg []byte) {
	if len(msg) == 0 {
		return
	}
	if msg[0] == hsUnknown {
		l.onUnknown(now, from, msg)
		return
	}
	if msg[0] == hsHello {
		if p := l.peers[from]; p != nil && p.ini != nil && l.res.proven(now, from, msg) {
			// Both sides opened at once (the HELLO's cookie shows it
			// comes from the peer's address, not from a forger who
			// cannot receive there): the HELLO with the lower
			// ephemeral key goes on, the other side answers it. A key
			// that is no valid X25519 share never wins.
			theirs := msg[1 : 1+ephLen]
			if string(p.ini.eph.PublicKey().Bytes()) < string(theirs) || !validShare(p.ini, theirs) {
				return
			}
			l.unmapSAIDs(p, p.sessionSAIDs()...)
			p.ini, p.hello = nil, nil
			// Should the peer's handshake not complete, this side
			// starts its own again (Tick).
			p.restartAt = now.Add(l.HandshakeGiveUp / 4)
			l.wake(p.restartAt)
		}
	}
	if msg[0] == hsHello || msg[0] == hsFinish {
		if msg[0] == hsHello && l.peers[from] == nil && len(l.peers) >= l.MaxPeers {
			l.sweep(now)
			if len(l.peers) >= l.MaxPeers {
				l.stats.HandshakesFailed++
				return
			}
		}
		out, s, err := l.res.Handle(now, from, msg)
		if err != nil {
			l.stats.HandshakesFailed++
			l.refused(now, from, err)
			return
		}
		if out != nil {
			l.sendHandshake(now, &layerPeer{addr: from}, out)
		}
		if s != nil {
			l.established(now, from, s)
		}
		return
	}
	p := l.peers[from]
	if p != nil && p.ini == nil && p.sess != nil {
		// The late twin of an answer this side already took (its HELLO
		// was resent while the first answer was on its way): the session
		// stands, and the message is nothing to refuse.
		l.stats.HandshakeDuplicates++
		return
	}
	if p == nil || p.ini == nil {
		l.stats.HandshakesFailed++
		return
	}
	out, s, err := p.ini.Handle(now, msg)
	if err != nil {
		l.stats.HandshakesFailed++
		l.refused(now, from, err)
		return
	}
	if out != nil {
		l.sendHandshake(now, p, out)
	}
	if s != nil {
		p.ini, p.hello = nil, nil
		l.established(now, from, s)
	}
}

// established installs session s with the process at addr (replacing an
// older one, whose held datagrams it sends).
func (l *Layer) established(now time.Time, addr netip.AddrPort, s *Session) {
	if l.Policy != nil {
		if err := l.Policy.Check(now, &s.Peer); err != nil {
			l.stats.HandshakesFailed++
			l.logger().Warn("secure: handshake refused", "peer", addr, "err", err)
			return
		}
	}
	l.stats.Handshakes++
	p := l.peers[addr]
	if p == nil {
		p = &layerPeer{addr: addr}
		l.peers[addr] = p
	}
	if p.sess != nil {
		// A rekey: the old session opens what it sealed that is still
		// on its way, for Drain.
		p.old, p.oldUntil = p.sess, now.Add(l.Drain)
		l.unmapSAIDs(p, s.Recv.ID(), p.old.Recv.ID())
	} else {
		l.unmapSAIDs(p, s.Recv.ID())
	}
	if l.bySAID[s.Recv.ID()] != p {
		l.mapSAID(p, s.Recv.ID())
	}
	p.sess, p.since, p.ini, p.hello, p.last = s, now, nil, nil, now
	p.hold, p.restartAt = false, time.Time{}
	l.bindSession(now, p)
	for _, pkt := range p.queue {
		if err := l.seal(p, pkt, false); err != nil {
			l.stats.DroppedQueue++
		}
	}
	p.queue = nil
	l.wake(now.Add(l.sweepEvery()))
}

// hsUnknown is the HANDSHAKE message that tells a sender its SA is not
// known here (this side restarted, or forgot an idle session): type 5,
// the SAID (4). It is smaller than the datagram it answers and makes the
// sender open a new session. unknownRate bounds these answers and the
// seal-required ones (wire.HandshakeSealRequired) together, a second.
const (
	hsUnknown   = 5
	unknownRate = 100
)

// unknownSA tells from that SAID id names no session here.
func (l *Layer) unknownSA(now time.Time, from netip.AddrPort, id uint32) {
	var msg [5]byte
	msg[0] = hsUnknown
	binary.BigEndian.PutUint32(msg[1:], id)
	l.answer(now, from, msg[:])
}

// sealRequired tells from, which sent an unsealed datagram, that this
// side takes sealed ones only (wire.HandshakeSealRequired).
func (l *Layer) sealRequired(now time.Time, from netip.AddrPort) {
	if l.answer(now, from, []byte{wire.HandshakeSealRequired}) {
		l.stats.SealRequiredSent++
	}
}

// answer sends a HANDSHAKE message msg to from that answers a datagram
// no session vouches for, as the answer limit allows; it reports whether
// it did.
func (l *Layer) answer(now time.Time, from netip.AddrPort, msg []byte) bool {
	if !l.answers.allow(now, from.Addr(), msg[0]) {
		return false
	}
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: uint32(len(msg))}
	b, err := wire.AppendPacket(l.bufs.Get(wire.HeaderLen + len(msg))[:0], &h, msg)
	if err != nil {
		return false
	}
	l.out = append(l.out, Datagram{Addr: from, Buf: b})
	return true
}

// noticeEvery is how often at most an unknown-SA notice starts a new
// handshake with one peer.
const noticeEvery = time.Second

// onUnknown handles a peer's word that the SA this side sends to it is
// unknown there. Anyone who saw the SAID can forge the notice, so it
// ends nothing: the session stays, datagrams to the peer wait, and a new
// handshake starts, which only the real peer can complete (it then
// replaces the session; a forged notice costs one handshake a second at
// most).
func (l *Layer) onUnknown(now time.Time, from netip.AddrPort, msg []byte) {
	p := l.peers[from]
	if len(msg) != 5 || p == nil || p.sess == nil || p.sess.Send.ID() != binary.BigEndian.Uint32(msg[1:]) ||
		now.Sub(p.since) < l.HandshakeRetry {
		// (A session just established: the peer may have seen its
		// first datagrams before the handshake's last message.)
		return
	}
	if p.ini != nil || (!p.noticeAt.IsZero() && now.Sub(p.noticeAt) < noticeEvery) {
		return // a handshake under way answers it
	}
	l.stats.SessionsReset++
	p.noticeAt, p.hold = now, true
	l.logger().Debug("secure: the peer does not know the session: a new handshake", "peer", from)
	if _, err := l.initiate(now, from); err != nil {
		p.hold = false
	}
}

// refused logs a handshake refused (a peer of another fabric, an expired
// or forged credential, a malformed message) at WARN, at most once a
// second, with how many were refused since the last line; a busy
// responder's refusals only at DEBUG.
func (l *Layer) refused(now time.Time, from netip.AddrPort, err error) {
	if errors.Is(err, ErrBusy) {
		l.logger().Debug("secure: handshake not answered: busy", "peer", from)
		return
	}
	if !l.refusedAt.IsZero() && now.Sub(l.refusedAt) < time.Second {
		l.refusedMore++
		return
	}
	l.logger().Warn("secure: handshake refused", "peer", from, "err", err, "more_since_last", l.refusedMore)
	l.refusedAt, l.refusedMore = now, 0
}

// logger is Log, or a logger that discards.
func (l *Layer) logger() *slog.Logger {
	if l.Log == nil {
		return discard
	}
	return l.Log
}

var discard = slog.New(slog.DiscardHandler)

// Flush passes a core's outbound datagrams out through the layer, as a
// driver does after each Step or Poll: it takes each one (a datagram the
// layer refuses is counted and lost, as on the wire: the transport
// resends it or its op times out), runs the timers when due, hands what
// there is to send to write, and recycles it. It returns scratch, for the
// next call, and the layer's deadline (zero: none).
func (l *Layer) Flush(now time.Time, out, scratch []Datagram, write func([]Datagram)) ([]Datagram, time.Time) {
	for len(out) > 0 {
		// In chunks: the first datagrams are on the wire, and the
		// receiver opening them, while the next ones are sealed.
		n := min(len(out), FlushChunk)
		for _, d := range out[:n] {
			_ = l.send(now, d.Addr, d.Buf, d.Control)
		}
		out = out[n:]
		scratch = l.flushOut(scratch, write)
	}
	if dl := l.Deadline(); !dl.IsZero() && !now.Before(dl) {
		l.Tick(now)
	}
	scratch = l.flushOut(scratch, write)
	return scratch, l.Deadline()
}

// FlushChunk is how many datagrams Flush seals before it writes them.
const FlushChunk = 16

// flushOut writes what the layer has to send and recycles it.
func (l *Layer) flushOut(scratch []Datagram, write func([]Datagram)) []Datagram {
	scratch = l.Take(scratch[:0])
	if len(scratch) > 0 {
		write(scratch)
		l.Recycle(scratch)
		clear(scratch)
	}
	return scratch
}

// Take appends the datagrams to send to dst and returns it; the layer
// does not keep them (until Recycle gives their buffers back).
func (l *Layer) Take(dst []Datagram) []Datagram {
	dst = append(dst, l.out...)
	clear(l.out)
	l.out = l.out[:0]
	return dst
}

// Tick resends HELLOs that got no answer, gives up handshakes that took
// too long and forgets idle sessions; it returns when it has work next
// (zero: none), as Deadline does from then on. It looks at every peer:
// call it when Deadline is due, not for every datagram.
func (l *Layer) Tick(now time.Time) time.Time {
	l.sweep(now)
	var next time.Time
	sessions := false
	for _, p := range l.peers {
		if p.ini == nil && (p.sess == nil || p.hold) && !p.restartAt.IsZero() && !now.Before(p.restartAt) {
			// This side gave way to the peer's handshake, which did not
			// complete: its own starts again.
			if _, err := l.initiate(now, p.addr); err == nil {
				l.stats.HandshakeRestarts++
			}
		}
		if p.ini == nil {
			sessions = sessions || p.sess != nil
			if !p.restartAt.IsZero() && (next.IsZero() || p.restartAt.Before(next)) {
				next = p.restartAt
			}
			continue
		}
		if !now.Before(p.retryAt) && p.hello != nil {
			l.out = append(l.out, Datagram{Addr: p.addr, Buf: append(l.bufs.Get(len(p.hello))[:0], p.hello...)})
			p.backoff = min(2*max(p.backoff, l.HandshakeRetry), max(MaxHandshakeRetry, l.HandshakeRetry))
			p.retryAt = now.Add(p.backoff)
		}
		for _, t := range []time.Time{p.retryAt, p.giveUpAt} {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
	}
	if sessions {
		if t := now.Add(l.sweepEvery()); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	l.deadline = next
	return next
}

// Deadline is when Tick has work next (zero: none): a HELLO to send
// again, a handshake to give up, idle sessions to look for. Send and
// Receive may move it earlier; it costs nothing to ask.
func (l *Layer) Deadline() time.Time { return l.deadline }

// wake makes Tick due at t at the latest.
func (l *Layer) wake(t time.Time) {
	if l.deadline.IsZero() || t.Before(l.deadline) {
		l.deadline = t
	}
}

// sweepEvery is how often Tick looks for idle sessions.
func (l *Layer) sweepEvery() time.Duration {
	return max(min(l.SessionIdle/4, time.Minute), time.Millisecond)
}

// sweep drops handshakes past their give-up time (and their held
// datagrams) and sessions idle for SessionIdle.
func (l *Layer) sweep(now time.Time) {
	for addr, p := range l.peers {
		if p.old != nil && now.After(p.oldUntil) {
			var cur uint32
			if p.sess != nil {
				cur = p.sess.Recv.ID()
			}
			l.unmapSAIDs(p, cur, p.pendingSAID())
			p.old = nil
		}
		switch {
		case p.ini != nil && !now.Before(p.giveUpAt) && p.sess != nil && !p.hold:
			// A rekey nobody answered: the session goes on, and the
			// next datagram sealed tries again.
			l.stats.HandshakesFailed++
			l.unmapSAIDs(p, p.sessionSAIDs()...)
			p.ini, p.hello = nil, nil
			continue
		case p.ini != nil && !now.Before(p.giveUpAt):
			l.stats.HandshakesFailed++
			l.stats.DroppedQueue += uint64(len(p.queue))
			for _, b := range p.queue {
				l.bufs.Put(b)
			}
			if p.sess != nil {
				l.stats.SessionsLost++
				l.logger().Warn("secure: session lost: the peer said it no longer knows it and did not answer a new handshake",
					"peer", addr, "role", RoleName(p.sess.Peer.Role), "name", p.sess.Peer.Name, "waited", l.HandshakeGiveUp, "dropped", len(p.queue))
			} else if len(p.queue) > 0 {
				l.logger().Warn("secure: no session: the peer did not answer the handshake", "peer", addr, "waited", l.HandshakeGiveUp, "dropped", len(p.queue))
			}
		case p.ini == nil && p.sess == nil && p.restartAt.IsZero():
			// (Nothing under way and nothing to restart.)
		case p.sess != nil && l.Policy != nil && l.Policy.Check(now, &p.sess.Peer) != nil:
			l.stats.SessionsRevoked++
			l.logger().Warn("secure: session closed", "peer", addr, "err", l.Policy.Check(now, &p.sess.Peer))
		case p.sess != nil && now.Sub(p.last) > l.SessionIdle:
			l.logger().Debug("secure: idle session closed", "peer", addr, "name", p.sess.Peer.Name)
		default:
			continue
		}
		l.forget(p)
	}
}

// forget drops p: its SAIDs, its session's place in the bounds, its
// entry.
func (l *Layer) forget(p *layerPeer) {
	l.unmapSAIDs(p)
	l.bound.remove(p)
	delete(l.peers, p.addr)
}
