package fabric

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// newKeySource returns cfg's region key source, or one seeded from the
// system's secure randomness (region keys are capabilities).
func newKeySource(f func() uint64) func() uint64 {
	if f != nil {
		return f
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		// crypto/rand does not fail on supported platforms; fall back to
		// a runtime-random seed rather than a fixed one.
		binary.LittleEndian.PutUint64(seed[:], rand.Uint64())
	}
	return rand.New(rand.NewChaCha8(seed)).Uint64
}

// poolControl handles the pool's control requests (ctrl.Pool*).
func (p *poolPlane) poolControl(now time.Time, d *transport.Delivery, m *ctrl.Msg) {
	refuse := func(st wire.Status) {
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, st, 0)
	}
	switch m.Type {
	case ctrl.PoolNode:
		if m.Capacity == 0 {
			p.poolNodeLeft(now, d)
			return
		}
		prev := p.mmu.NodeAt(d.Peer.Addr)
		first := prev == nil || prev.placeholder() // its first registration with this switch
		restarted := !first && prev.Incarnation != m.Epoch
		wasDead := !first && !prev.Alive && prev.reported
		p.mmu.SetNodeLimit(p.sw.cfg.Limits.MaxPoolNodes)
		kept := restarted && m.Kept && prev.used > 0
		n, err := p.mmu.addNode(d.Peer.Addr, m.Key, m.Capacity, m.Epoch, kept)
		if err != nil {
			refuse(wire.StatusBadOperand)
			return
		}
		n.lastSeen = p.sw.heard
		n.beats.Beat(p.sw.heard)
		if p.sw.idents != nil {
			// Its credential's name, for operators (pool stat): the
			// id is the order the nodes came in.
			if c, ok := p.sw.idents(d.Peer.Addr); ok {
				n.Name = c.Name
			}
		}
		if first {
			// Not used until it reports what it holds.
			p.nodesSeen++
			p.pendingNodes++
			n.reported = false
		}
		switch {
		case kept:
			// It kept its copies: they serve again once its report
			// shows which are current (pool_rejoin.go).
			p.rejoin(n)
		case restarted && !n.reported:
			// Its memory is new: it holds nothing to report.
			p.nodeReported(now, n)
		}
		if !n.reported {
			n.Alive = false
		}
		ev := Event{Node: n.ID, Addr: n.Addr, Capacity: n.Capacity}
		switch {
		case first:
			ev.Kind = EventPoolNodeJoined
		case restarted:
			ev.Kind = EventPoolNodeRestarted
		case wasDead:
			ev.Kind = EventPoolNodeBack
		}
		if ev.Kind != 0 {
			p.sw.logEvent(ev)
		}
		if restarted && !kept {
			p.startRebuilds(now, n)
		}
		p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolNode, Resp: true, Node: uint16(n.ID), Epoch: p.incarnation})
	case ctrl.PoolReport:
		p.poolReport(now, d, m)
	case ctrl.PoolCreate:
		if p.recovering(now) {
			p.sw.stats.ControlRefused++
			p.sw.reply(d.Peer, &d.Header, wire.StatusBusy, p.recoverLeft(now))
			return
		}
		p.createPool(d, m)
	case ctrl.PoolOpen:
		r, err := p.mmu.Region(m.Region, m.Key)
		if err != nil || !r.Ready {
			if p.recovering(now) {
				p.sw.stats.ControlRefused++
				p.sw.reply(d.Peer, &d.Header, wire.StatusBusy, p.recoverLeft(now))
				return
			}
			refuse(wire.StatusBadKey)
			return
		}
		p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolOpen, Resp: true, Pool: r.spec()})
	case ctrl.PoolFree:
		if p.recovering(now) {
			p.sw.stats.ControlRefused++
			p.sw.reply(d.Peer, &d.Header, wire.StatusBusy, p.recoverLeft(now))
			return
		}
		if err := p.freePool(m.Region, m.Key); err != nil {
			refuse(wire.StatusBadKey)
			return
		}
		p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolFree, Resp: true})
	case ctrl.PoolRebuilt:
		p.rebuilt(d.Peer.Addr, d, m)
	case ctrl.PoolColumnLost, ctrl.PoolColumnGrant, ctrl.PoolColumnRestored:
		p.columnRequest(d, m)
	case ctrl.PoolStat:
		p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolStat, Resp: true, PoolNodes: p.nodeInfos(), PoolRegions: p.regionInfos(), PoolRefused: p.sw.stats.PoolRefused})
	}
}

// spec is the region's shape as control messages carry it.
func (r *PoolRegion) spec() ctrl.PoolSpec {
	l := r.Layout
	return ctrl.PoolSpec{Region: r.ID, Size: l.Size, Stripe: l.Stripe, Columns: l.Columns, Replicas: l.Replicas, Perm: uint8(r.Perm)}
}

// checkPoolNodes marks memory nodes dead whose registrations (their
// heartbeats) stopped for the heartbeat timeout, and forgets dead nodes
// that hold no region copies after ControlLimits.PoolNodeTTL.
func (p *poolPlane) checkPoolNodes(now time.Time) {
	var forget []*PoolNode
	for _, n := range p.mmu.Nodes() {
		if n.Alive && p.sw.heard.Sub(n.lastSeen) > silenceAllowed(&n.beats, p.sw.cfg.HeartbeatTimeout) {
			p.mmu.SetAlive(n, false)
			p.sw.logEvent(Event{Kind: EventPoolNodeDied, Node: n.ID, Addr: n.Addr})
			p.nodeDied(now, n)
		}
		if !n.Alive && n.Used() == 0 && p.sw.heard.Sub(n.lastSeen) > p.sw.cfg.Limits.PoolNodeTTL {
			forget = append(forget, n)
		}
	}
	for _, n := range forget {
		pending := !n.reported && !n.placeholder()
		if p.mmu.Forget(n) {
			p.sw.stats.PoolNodesForgotten++
			if pending {
				p.pendingNodes--
			}
		}
	}
	p.retryRebuilds(now)
}

// poolNodeLeft handles a memory node's word that it stops lending (it
// shuts down): it is dead from now, without waiting for its heartbeats to
// stop, and forgotten at once if it holds no region copies (a node that
// holds some stays, dead, as their home: they are lost, or rebuilt when
// it comes back).
func (p *poolPlane) poolNodeLeft(now time.Time, d *transport.Delivery) {
	n := p.mmu.NodeAt(d.Peer.Addr)
	if n == nil || n.placeholder() {
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, wire.StatusNotMember, 0)
		return
	}
	p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolNode, Resp: true, Node: uint16(n.ID), Epoch: p.incarnation})
	ev := Event{Kind: EventPoolNodeDied, Node: n.ID, Addr: n.Addr, Left: true}
	if n.Alive {
		p.mmu.SetAlive(n, false)
		p.nodeDied(now, n)
	}
	if n.Used() == 0 {
		pending := !n.reported
		if p.mmu.Forget(n) {
			ev.Forgot = true
			p.sw.stats.PoolNodesForgotten++
			if pending {
				p.pendingNodes--
			}
		}
	}
	p.sw.logEvent(ev)
}

// nodeDied ends the rebuilds a dead node was part of: of its own copies,
// and of copies read from it (a column of a region with one copy is
// rewritten by a client, which reads around dead nodes itself).
func (p *poolPlane) nodeDied(now time.Time, n *PoolNode) {
	for _, r := range p.mmu.Regions() {
		for c := range r.Homes {
			copied := r.Layout.Replicas > 1 && !p.othersIntact(r, c)
			if r.Rebuilding[c] && (copied || r.Homes[c].Node == n) {
				p.rebuildFailed(now, r, c)
			}
		}
	}
}
