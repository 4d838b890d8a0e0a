package transport

import (
	"iter"
	"net/netip"
	"time"

	"github.com/ndma/ndma/wire"
)

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

// Validated reports whether addr has shown that it receives at that
// address (a peer there acknowledged data this engine sent it: proof,
// since initial sequence numbers are random), or the local side initiated
// contact with it (Send, SendFragment). It stays true while an established
// peer at addr has state. Until then the engine sends a peer at addr at
// most three times the bytes received from it.
func (e *Engine) Validated(addr netip.AddrPort) bool { return e.addrRefs[addr] > 0 }

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
