package secure

import (
	"crypto/ecdh"
	"net/netip"
	"time"
)

// answerLimit bounds the answers a layer sends to datagrams no session
// vouches for (unknown-SA notices, seal-required answers), which anyone
// can provoke from any source address: at most answerRate of each kind a
// second in all, and at most answerPerSource of them a second to one IP
// address, so that a flood from one source (or one spoofed victim)
// leaves the others their answers. The per-source table holds at most
// answerSources addresses and is cleared every second; a source that
// finds it full gets no answer that second.
type answerLimit struct {
	sec     int64
	kinds   map[byte]int
	sources map[netip.Addr]int
}

const (
	answerRate      = 100
	answerPerSource = 4
	answerSources   = 4096
)

// allow reports whether an answer of kind to src may go out at now, and
// counts it if so.
func (a *answerLimit) allow(now time.Time, src netip.Addr, kind byte) bool {
	if sec := now.Unix(); sec != a.sec || a.kinds == nil {
		a.sec = sec
		a.kinds = make(map[byte]int, 2)
		clear(a.sources)
		if a.sources == nil {
			a.sources = make(map[netip.Addr]int)
		}
	}
	n, ok := a.sources[src]
	if a.kinds[kind] >= answerRate || n >= answerPerSource || !ok && len(a.sources) >= answerSources {
		return false
	}
	a.kinds[kind]++
	a.sources[src] = n + 1
	return true
}

// sessionBound counts established sessions per credential and per IP
// address (MaxSessionsPerName, MaxSessionsPerAddr), each key naming the
// set of peers whose session counts under it. Entries go with the
// session (Layer.forget) or when the peer's session moves to another
// credential.
type sessionBound struct {
	sets map[string]map[*layerPeer]struct{}
}

// keys are the bound keys of a session with peer cert c at addr.
func boundKeys(c *Cert, addr netip.AddrPort) []string {
	return []string{"n" + string(rune(c.Role)) + c.Name, "a" + addr.Addr().String()}
}

// remove takes p out of every set it counts in.
func (b *sessionBound) remove(p *layerPeer) {
	for _, k := range p.bound {
		if set := b.sets[k]; set != nil {
			delete(set, p)
			if len(set) == 0 {
				delete(b.sets, k)
			}
		}
	}
	p.bound = nil
}

// bindSession counts p's new session under its credential and address;
// where that passes a bound, the least recently active other session
// under the same key is evicted (never a peer of another credential or
// address: a host or a credential that opens too many sessions only
// loses its own).
func (l *Layer) bindSession(now time.Time, p *layerPeer) {
	if l.bound.sets == nil {
		l.bound.sets = make(map[string]map[*layerPeer]struct{})
	}
	l.bound.remove(p)
	p.bound = boundKeys(&p.sess.Peer, p.addr)
	for i, k := range p.bound {
		set := l.bound.sets[k]
		if set == nil {
			set = make(map[*layerPeer]struct{})
			l.bound.sets[k] = set
		}
		set[p] = struct{}{}
		limit := l.MaxSessionsPerName
		if i == 1 {
			limit = l.MaxSessionsPerAddr
		}
		for limit > 0 && len(set) > limit {
			var victim *layerPeer
			for q := range set {
				if q != p && (victim == nil || q.last.Before(victim.last)) {
					victim = q
				}
			}
			if victim == nil {
				break
			}
			l.stats.SessionsEvicted++
			l.logger().Warn("secure: session evicted: too many sessions for one credential or address",
				"peer", victim.addr, "role", RoleName(victim.sess.Peer.Role), "name", victim.sess.Peer.Name,
				"per_name", l.MaxSessionsPerName, "per_addr", l.MaxSessionsPerAddr)
			l.forget(victim)
		}
	}
}

// validShare reports whether eph is an X25519 share that gives ini a
// shared secret (not a low-order point, all-zero included).
func validShare(ini *Initiator, eph []byte) bool {
	pub, err := ecdh.X25519().NewPublicKey(eph)
	if err != nil {
		return false
	}
	_, err = ini.eph.ECDH(pub)
	return err == nil
}
