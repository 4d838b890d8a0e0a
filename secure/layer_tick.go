package secure

// The Layer's timers: HELLOs resent, handshakes given up, idle sessions
// forgotten.

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// Tick resends HELLOs that got no answer, gives up handshakes that took
// too long and forgets idle sessions; it returns when it has work next
// (zero: none), as Deadline does from then on. It looks at every peer:
// call it when Deadline is due, not for every datagram.
func (l *Layer) Tick(now time.Time) time.Time {
	l.sweep(now)
	var next time.Time
	sessions := false
	// In address order, so that what Tick sends goes out in one order
	// (a simulation replays from its seed).
	for _, addr := range slices.SortedFunc(maps.Keys(l.peers), netip.AddrPort.Compare) {
		p := l.peers[addr]
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
