package fabric

import (
	"cmp"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// Rebuilding the pool's map after a switch restart.
//
// The switch keeps its map of the pool (which regions exist, their shape,
// where each column lives) only in memory. The memory nodes keep, with
// every grant, the switch's record of it: the region's shape, the homes of
// all its columns, the region's epoch and whether the copy is complete;
// and the key itself, of which they report only a digest. A switch that
// starts answers each node's registration with its own incarnation; a node
// that has not reported to that incarnation sends ctrl.PoolReport, and is
// not used until its report is complete. From the reports the switch
// rebuilds every region under its old id (new ids start above them), with
// a column whose node does not report it, or reports it stale (a lower
// epoch, or incomplete), marked lost, and learns each region's key from the
// first request that carries one matching the digest.
//
// While it recovers (PoolRecoverWindow after the start, less once every
// registered node has reported and every region it knows of is complete)
// the switch refuses new regions (StatusBusy with the time left, which the
// endpoint waits out), and drops pool requests (clients resend them), so
// that nothing is allocated over, or read from, a copy not yet reported.
// Nodes that come back later report the same way.

// DefaultPoolRecoverWindow is Config.PoolRecoverWindow's default.
const DefaultPoolRecoverWindow = 2 * time.Second

// reportRank orders reported copies: a higher epoch, then a copy that
// took writes the others missed, is more current.
type reportRank struct {
	epoch    uint64
	degraded bool
}

func (a reportRank) compare(b reportRank) int {
	if c := cmp.Compare(a.epoch, b.epoch); c != 0 {
		return c
	}
	switch {
	case a.degraded == b.degraded:
		return 0
	case a.degraded:
		return 1
	}
	return -1
}

// recovering reports whether the switch is still rebuilding its pool map
// (and latches the end).
func (p *poolPlane) recovering(now time.Time) bool {
	if p.recovered {
		return false
	}
	if p.recoverUntil.IsZero() {
		p.recoverUntil = now.Add(p.sw.cfg.PoolRecoverWindow)
	}
	if !now.Before(p.recoverUntil) || p.nodesSeen > 0 && p.pendingNodes == 0 && p.unconfirmedCols == 0 {
		p.recovered = true
		p.sw.logEvent(Event{Kind: EventPoolRecovered, Node: p.nodesSeen, Count: len(p.mmu.regions)})
		return false
	}
	return true
}

// PoolRecovering reports whether the switch is, at now, still waiting for
// the memory nodes' reports (it refuses new regions and drops pool
// requests until then).
func (s *Switch) PoolRecovering(now time.Time) bool { return s.memPool.recovering(now) }

// recoverLeft is the time left of the recovery window, for BUSY answers.
func (p *poolPlane) recoverLeft(now time.Time) uint64 {
	ms := max(1, p.recoverUntil.Sub(now).Milliseconds())
	return ctrl.PoolRecovering<<56 | uint64(ms)
}

// poolReport handles a memory node's ctrl.PoolReport.
func (p *poolPlane) poolReport(now time.Time, d *transport.Delivery, m *ctrl.Msg) {
	n := p.mmu.NodeAt(d.Peer.Addr)
	if n == nil || n.placeholder() {
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, wire.StatusBadOperand, 0)
		return
	}
	for i := range m.Reports {
		p.adoptReport(n, &m.Reports[i])
	}
	if m.Final && !n.reported {
		p.nodeReported(now, n)
	}
	p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolReport, Resp: true})
}

// adoptReport takes one grant a node reports into the map: it rebuilds
// the region on the first report of it, or confirms (or, if stale, marks
// lost) the column of a region the switch has.
func (p *poolPlane) adoptReport(n *PoolNode, e *ctrl.GrantReport) {
	c := int(e.Column)
	l, err := poolmap.NewLayout(e.Pool.Size, e.Pool.Stripe, e.Pool.Columns, e.Pool.Replicas)
	if err != nil || e.Homes[c].Addr != n.Addr || e.Homes[c].Base != e.Base || e.Length != l.ColumnBytes(c) ||
		e.Base > n.Capacity || e.Length > n.Capacity-e.Base {
		p.sw.stats.PoolReportsRefused++
		return
	}
	rank := reportRank{e.Epoch, e.Degraded}
	r := p.mmu.regions[e.Region]
	if r == nil {
		if f := p.mmu.firstCreated; f != 0 && e.Region >= f {
			// Created and freed by this switch: the node missed the
			// revoke.
			p.sw.stats.PoolReportsRefused++
			p.sendPoolCtrl(n.Addr, &ctrl.Msg{Type: ctrl.PoolRevoke, Region: e.Region})
			return
		}
		if r = p.rebuildRegion(n, e, l); r == nil {
			p.sw.stats.PoolReportsRefused++
			p.sw.logEvent(Event{Kind: EventCopyLost, Region: e.Region, Copy: c, Node: n.ID, Addr: n.Addr})
			return
		}
	} else if n.rejoin {
		p.adoptRejoined(n, r, e, l)
		return
	} else if !r.matches(e, l) {
		p.sw.stats.PoolReportsRefused++
		p.sw.logEvent(Event{Kind: EventCopyLost, Region: e.Region, Copy: c, Node: n.ID, Addr: n.Addr})
		return
	}
	r.adoptFences(e.Fences)
	p.mmu.touch(r.ID) // its fences, key or columns change below
	if r.Key == 0 && e.Key != 0 && p.sw.idents != nil {
		// A node gave the key itself (over a sealed session; the
		// decoder checked it against the digest): lost copies are
		// rebuilt without waiting for a client to bring it.
		r.Key = e.Key
	}
	if r.unconfirmed == nil || !r.unconfirmed[c] {
		return // settled already (a report sent again)
	}
	p.settleColumn(r, c)
	switch {
	case e.Rebuilding:
		// An incomplete copy: rebuilt again once the key is known.
		r.Lost[c] = true
	case rank.compare(r.best) < 0:
		r.Lost[c] = true
	default:
		if rank.compare(r.best) > 0 {
			// More current than every copy settled so far: those
			// are stale.
			for k := range r.Homes {
				if k != c && !r.Lost[k] && !r.isUnconfirmed(k) {
					r.Lost[k] = true
				}
			}
			r.best, r.Epoch = rank, e.Epoch
		}
		r.Lost[c] = false
	}
	p.sw.stats.PoolCopiesReported++
}

// rebuildRegion makes region e.Region from its first report (by node n),
// reserving every column's extent on its node (a node not registered yet
// gets a placeholder). It returns nil if an extent is not free.
func (p *poolPlane) rebuildRegion(n *PoolNode, e *ctrl.GrantReport, l poolmap.Layout) *PoolRegion {
	if len(p.mmu.regions) >= MaxPoolRegions {
		return nil
	}
	k := l.Columns
	r := &PoolRegion{ID: e.Region, Perm: wire.Perm(e.Pool.Perm), Layout: l, Homes: make([]Home, k),
		Lost: make([]bool, k), Rebuilding: make([]bool, k), Ready: true,
		digest: e.Digest, unconfirmed: make([]bool, k)}
	for c, h := range e.Homes {
		node, err := p.mmu.nodeFor(h.Addr)
		if err == nil && !node.reserve(h.Base, l.ColumnBytes(c)) {
			err = ctrl.ErrNoSpace
		}
		if err != nil {
			for j := range c {
				r.Homes[j].Node.release(r.Homes[j].Base, l.ColumnBytes(j))
			}
			return nil
		}
		r.Homes[c] = Home{Node: node, Base: h.Base}
	}
	for c, h := range r.Homes {
		if h.Node.reported && h.Node != n {
			// It reported everything it holds, and not this.
			r.Lost[c] = true
			continue
		}
		r.unconfirmed[c] = true
		p.unconfirmedCols++
	}
	p.mmu.regions[r.ID] = r
	p.mmu.nextID = max(p.mmu.nextID, r.ID)
	p.sw.stats.PoolRegionsRecovered++
	return r
}

// matches reports whether report e describes r (another region of the
// same id otherwise).
func (r *PoolRegion) matches(e *ctrl.GrantReport, l poolmap.Layout) bool {
	if r.Layout != l || r.Perm != wire.Perm(e.Pool.Perm) || r.digest != e.Digest {
		return false
	}
	for c, h := range r.Homes {
		if h.Node.Addr != e.Homes[c].Addr || h.Base != e.Homes[c].Base {
			return false
		}
	}
	return true
}

func (r *PoolRegion) isUnconfirmed(c int) bool { return r.unconfirmed != nil && r.unconfirmed[c] }

// settleColumn marks column c of r reported (or given up).
func (p *poolPlane) settleColumn(r *PoolRegion, c int) {
	r.unconfirmed[c] = false
	p.unconfirmedCols--
	for _, u := range r.unconfirmed {
		if u {
			return
		}
	}
	r.unconfirmed = nil
}

// nodeReported ends node n's report: the columns homed on it that it did
// not report are lost, and it serves from now on.
func (p *poolPlane) nodeReported(now time.Time, n *PoolNode) {
	if n.rejoin {
		p.rejoined(n)
	}
	n.reported = true
	p.pendingNodes--
	n.Alive = true
	for _, r := range p.mmu.regions {
		if r.unconfirmed == nil {
			continue
		}
		for c, h := range r.Homes {
			if h.Node == n && r.unconfirmed[c] {
				p.settleColumn(r, c)
				r.Lost[c] = true
				p.mmu.touch(r.ID)
				p.sw.logEvent(Event{Kind: EventCopyLost, Region: r.ID, Copy: c, Node: n.ID, Addr: n.Addr})
			}
		}
	}
	for _, r := range p.mmu.regions {
		if r.health() == ctrl.HealthLost && !r.reportedLost {
			r.reportedLost = true
			p.sw.logEvent(Event{Kind: EventRegionLost, Region: r.ID})
		}
	}
	p.sw.logEvent(Event{Kind: EventPoolNodeReported, Node: n.ID, Addr: n.Addr, Capacity: n.Capacity})
	p.rebuildLost(now, func(Home) bool { return true })
}

// raiseEpoch gives r a new epoch and tells the nodes of its intact copies
// (live, not lost), so that a restarted switch takes them for current.
func (p *poolPlane) raiseEpoch(r *PoolRegion) {
	r.Epoch++
	r.best = reportRank{epoch: r.Epoch}
	p.mmu.touch(r.ID)
	for c, h := range r.Homes {
		if !r.Lost[c] && h.Node.Alive {
			p.sendPoolCtrl(h.Node.Addr, &ctrl.Msg{Type: ctrl.PoolEpoch, Region: r.ID, Key: r.Key, Epoch: r.Epoch})
		}
	}
}

// homes is r's homes as grants carry them.
func (r *PoolRegion) homes() []ctrl.PoolHome {
	hs := make([]ctrl.PoolHome, len(r.Homes))
	for c, h := range r.Homes {
		hs[c] = ctrl.PoolHome{Addr: h.Node.Addr, Base: h.Base}
	}
	return hs
}

// health is what r's readers can expect: lost if every copy of some
// stripe is lost, unavailable if some stripe has no copy on a live node,
// degraded if some copy is lost, rebuilding or on a dead node.
func (r *PoolRegion) health() ctrl.PoolHealth {
	k := r.Layout.Columns
	down := func(c int) bool { return r.Lost[c] || !r.Homes[c].Node.Alive }
	worst := ctrl.HealthOK
	for c := range k {
		if r.Layout.Primaries(c) == 0 {
			continue
		}
		h := ctrl.HealthOK
		if r.Layout.Replicas == 1 {
			switch {
			case r.Lost[c]:
				h = ctrl.HealthLost
			case down(c):
				h = ctrl.HealthUnavailable
			}
		} else {
			d := (c + 1) % k // the second copy of c's stripes
			switch {
			case r.Lost[c] && r.Lost[d]:
				h = ctrl.HealthLost
			case down(c) && down(d):
				h = ctrl.HealthUnavailable
			case down(c) || down(d):
				h = ctrl.HealthDegraded
			}
		}
		worst = max(worst, h)
	}
	return worst
}
