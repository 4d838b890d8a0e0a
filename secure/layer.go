package secure

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
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

// ProcessLayer returns the layer a process of identity id seals its
// datagrams with (its randomness from crypto/rand, its events to log,
// nil discarding), or nil when id is nil: the process runs without
// security.
func ProcessLayer(id *Identity, opts Options, log *slog.Logger) (*Layer, error) {
	if id == nil {
		return nil, nil
	}
	l, err := NewLayer(id, opts, crand.Reader)
	if err != nil {
		return nil, err
	}
	if log != nil {
		l.Log = log
	}
	return l, nil
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

// Stats returns the counters (zero for a nil Layer: no security).
func (l *Layer) Stats() LayerStats {
	if l == nil {
		return LayerStats{}
	}
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
