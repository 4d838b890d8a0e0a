package secure

// The Layer's handshakes: starting one with a new peer, answering a
// peer's, installing the session it yields, and the HANDSHAKE notices
// (unknown SA, seal required) that answer datagrams no session vouches
// for.

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/wire"
)

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
