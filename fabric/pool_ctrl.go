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
func (s *Switch) poolControl(now time.Time, d *transport.Delivery, m *ctrl.Msg) {
	refuse := func(st wire.Status) {
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, st, 0)
	}
	switch m.Type {
	case ctrl.PoolNode:
		if m.Capacity == 0 {
			s.poolNodeLeft(now, d)
			return
		}
		prev := s.mmu.NodeAt(d.Peer.Addr)
		first := prev == nil || prev.placeholder() // its first registration with this switch
		restarted := !first && prev.Incarnation != m.Epoch
		wasDead := !first && !prev.Alive && prev.reported
		s.mmu.SetNodeLimit(s.cfg.Limits.MaxPoolNodes)
		n, err := s.mmu.AddNode(d.Peer.Addr, m.Key, m.Capacity, m.Epoch)
		if err != nil {
			refuse(wire.StatusBadOperand)
			return
		}
		n.lastSeen = s.heard
		n.beats.beat(s.heard)
		if s.idents != nil {
			// Its credential's name, for operators (pool stat): the
			// id is the order the nodes came in.
			if c, ok := s.idents(d.Peer.Addr); ok {
				n.Name = c.Name
			}
		}
		if first {
			// Not used until it reports what it holds.
			s.nodesSeen++
			s.pendingNodes++
			n.reported = false
		}
		if restarted && !n.reported {
			// Its memory is new: it holds nothing to report.
			s.nodeReported(now, n)
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
			s.logEvent(ev)
		}
		if restarted {
			s.startRebuilds(now, n)
		}
		s.respond(d, &ctrl.Msg{Type: ctrl.PoolNode, Resp: true, Node: uint16(n.ID), Epoch: s.incarnation})
	case ctrl.PoolReport:
		s.poolReport(now, d, m)
	case ctrl.PoolCreate:
		if s.recovering(now) {
			s.stats.ControlRefused++
			s.reply(d.Peer, &d.Header, wire.StatusBusy, s.recoverLeft(now))
			return
		}
		s.createPool(d, m)
	case ctrl.PoolOpen:
		r, err := s.mmu.Region(m.Region, m.Key)
		if err != nil || !r.Ready {
			if s.recovering(now) {
				s.stats.ControlRefused++
				s.reply(d.Peer, &d.Header, wire.StatusBusy, s.recoverLeft(now))
				return
			}
			refuse(wire.StatusBadKey)
			return
		}
		s.respond(d, &ctrl.Msg{Type: ctrl.PoolOpen, Resp: true, Pool: r.spec()})
	case ctrl.PoolFree:
		if s.recovering(now) {
			s.stats.ControlRefused++
			s.reply(d.Peer, &d.Header, wire.StatusBusy, s.recoverLeft(now))
			return
		}
		if err := s.freePool(m.Region, m.Key); err != nil {
			refuse(wire.StatusBadKey)
			return
		}
		s.respond(d, &ctrl.Msg{Type: ctrl.PoolFree, Resp: true})
	case ctrl.PoolRebuilt:
		s.rebuilt(d.Peer.Addr, d, m)
	case ctrl.PoolStat:
		s.respond(d, &ctrl.Msg{Type: ctrl.PoolStat, Resp: true, PoolNodes: s.PoolNodes(), PoolRegions: s.PoolRegions(), PoolRefused: s.stats.PoolRefused})
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
func (s *Switch) checkPoolNodes(now time.Time) {
	var forget []*PoolNode
	for _, n := range s.mmu.Nodes() {
		if n.Alive && s.heard.Sub(n.lastSeen) > n.beats.allowed(s.cfg.HeartbeatTimeout) {
			s.mmu.SetAlive(n, false)
			s.logEvent(Event{Kind: EventPoolNodeDied, Node: n.ID, Addr: n.Addr})
			s.nodeDied(now, n)
		}
		if !n.Alive && n.Used() == 0 && s.heard.Sub(n.lastSeen) > s.cfg.Limits.PoolNodeTTL {
			forget = append(forget, n)
		}
	}
	for _, n := range forget {
		pending := !n.reported && !n.placeholder()
		if s.mmu.Forget(n) {
			s.stats.PoolNodesForgotten++
			if pending {
				s.pendingNodes--
			}
		}
	}
	s.retryRebuilds(now)
}

// poolNodeLeft handles a memory node's word that it stops lending (it
// shuts down): it is dead from now, without waiting for its heartbeats to
// stop, and forgotten at once if it holds no region copies (a node that
// holds some stays, dead, as their home: they are lost, or rebuilt when
// it comes back).
func (s *Switch) poolNodeLeft(now time.Time, d *transport.Delivery) {
	n := s.mmu.NodeAt(d.Peer.Addr)
	if n == nil || n.placeholder() {
		s.stats.ControlRefused++
		s.reply(d.Peer, &d.Header, wire.StatusNotMember, 0)
		return
	}
	s.respond(d, &ctrl.Msg{Type: ctrl.PoolNode, Resp: true, Node: uint16(n.ID), Epoch: s.incarnation})
	ev := Event{Kind: EventPoolNodeDied, Node: n.ID, Addr: n.Addr, Left: true}
	if n.Alive {
		s.mmu.SetAlive(n, false)
		s.nodeDied(now, n)
	}
	if n.Used() == 0 {
		pending := !n.reported
		if s.mmu.Forget(n) {
			ev.Forgot = true
			s.stats.PoolNodesForgotten++
			if pending {
				s.pendingNodes--
			}
		}
	}
	s.logEvent(ev)
}

// nodeDied ends the rebuilds a dead node was part of: of its own copies,
// and of copies read from it.
func (s *Switch) nodeDied(now time.Time, n *PoolNode) {
	for _, r := range s.mmu.Regions() {
		for c := range r.Homes {
			if r.Rebuilding[c] && !s.othersIntact(r, c) || r.Rebuilding[c] && r.Homes[c].Node == n {
				s.rebuildFailed(now, r, c)
			}
		}
	}
}
