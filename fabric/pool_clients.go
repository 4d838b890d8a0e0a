package fabric

import (
	"container/list"
	"net/netip"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Anti-amplification of the pool's data path.
//
// The switch forwards a pool request to a memory node with the sender's
// address as the reply-to, and the node answers that address directly:
// a READ of a few bytes asks for up to a whole datagram back. A sender
// whose address was forged would make the node send that to a victim
// that never asked. So the switch remembers the addresses proven to
// receive — those that acknowledged a control response the switch sent
// them (every client opens or creates a region, and every memory node
// registers, before its pool traffic) — and forwards a request from any
// other address only if the node's answer is at most three times the
// request (QUIC's anti-amplification rule). The others are dropped
// without an answer (counted in Stats.PoolUnproven): a client resends an
// unanswered request, by when the acknowledgement that proves it has
// arrived. A client that stayed silent for PoolClientTTL (no pool request,
// no control exchange) must open its region again before reading, which
// package pool's client does on its own after pool.ReproveAfter.

// poolClients is the set of proven addresses, least recently used last;
// bounded by ControlLimits.MaxPoolClients (the least recently used is
// forgotten) and ControlLimits.PoolClientTTL after its last use. The zero
// value is empty and ready to use.
type poolClients struct {
	m   map[netip.AddrPort]*list.Element
	lru list.List // of *poolClient, most recently used first
}

type poolClient struct {
	addr netip.AddrPort
	last time.Time
}

func (p *poolClients) len() int { return len(p.m) }

func (p *poolClients) has(addr netip.AddrPort) bool { _, ok := p.m[addr]; return ok }

// touch records a use of addr; it reports whether addr is proven.
func (p *poolClients) touch(now time.Time, addr netip.AddrPort) bool {
	e, ok := p.m[addr]
	if ok {
		e.Value.(*poolClient).last = now
		p.lru.MoveToFront(e)
	}
	return ok
}

// add proves addr, forgetting the least recently used beyond max.
func (p *poolClients) add(now time.Time, addr netip.AddrPort, max int) {
	if p.touch(now, addr) {
		return
	}
	if p.m == nil {
		p.m = make(map[netip.AddrPort]*list.Element)
	}
	for len(p.m) >= max && p.lru.Len() > 0 {
		p.remove(p.lru.Back())
	}
	p.m[addr] = p.lru.PushFront(&poolClient{addr: addr, last: now})
}

func (p *poolClients) remove(e *list.Element) {
	delete(p.m, e.Value.(*poolClient).addr)
	p.lru.Remove(e)
}

// sweepTTL forgets the addresses unused for longer than ttl.
func (p *poolClients) sweepTTL(now time.Time, ttl time.Duration) {
	for e := p.lru.Back(); e != nil && now.Sub(e.Value.(*poolClient).last) > ttl; e = p.lru.Back() {
		p.remove(e)
	}
}

// proveReq is a control response whose acknowledgement proves its
// address.
type proveReq struct{ addr netip.AddrPort }

// proveToken returns the send token of a control response to addr: its
// completion proves addr (onProved).
func (p *poolPlane) proveToken(addr netip.AddrPort) uint64 {
	if p.proveTok == nil {
		p.proveTok = make(map[uint64]proveReq)
	}
	p.sw.nextTok++
	p.proveTok[p.sw.nextTok] = proveReq{addr}
	return p.sw.nextTok
}

// onProved handles the completion of a control response sent with a
// proveToken; it reports whether c was one.
func (p *poolPlane) onProved(c *transport.Completion) bool {
	pr, ok := p.proveTok[c.Token]
	if !ok || c.Token == 0 {
		return false
	}
	delete(p.proveTok, c.Token)
	if c.Err == nil {
		p.pclients.add(p.sw.now, pr.addr, p.sw.cfg.Limits.MaxPoolClients)
	}
	return true
}

// poolAmplifies reports whether the answer to pool request h (with
// payload) from an unproven from may be larger than three times the
// request; such a request is dropped. A proven address's use is recorded.
func (p *poolPlane) poolAmplifies(from netip.AddrPort, h *wire.Header, payload []byte) bool {
	if p.pclients.touch(p.sw.now, from) {
		return false
	}
	resp := uint64(wire.HeaderLen) * 2 // at most two copies answer
	if h.Op == wire.OpRead || h.Op == wire.OpChain {
		resp = uint64(wire.HeaderLen) + min(h.Operand1, uint64(wire.MaxPayload))
	}
	if resp <= 3*uint64(wire.HeaderLen+len(payload)) {
		return false
	}
	p.sw.stats.PoolUnproven++
	return true
}
