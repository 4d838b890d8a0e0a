package fabric

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Rebuilding a copy lost when its memory node restarted (regions with two
// copies). Three steps, so that no client write is missed:
//
//  1. POOLREBUILD grants the restarted node its extent again; the node
//     zeroes it and from then on remembers which bytes clients write.
//  2. Once it accepted, the switch sends writes to the copy too (reads
//     still go to the other one), waits rebuildDrain for writes it
//     forwarded before to land, and sends POOLREBUILDGO.
//  3. The node reads its stripes through the switch (from the other
//     copies), fills the bytes no client wrote since step 1, and reports
//     POOLREBUILT; the copy serves reads again.
//
// A rebuild that fails (the node refuses it or cannot read a stripe, or
// the transport gives up on the node) leaves the copy lost and is tried
// again rebuildRetry later, while the node and the other copies live.

// rebuildDrain is how long the switch mirrors writes to a rebuilding copy
// before the node starts copying: longer than a forwarded write takes to
// reach the other copy.
const rebuildDrain = 100 * time.Millisecond

// rebuildRetry is how long after a failed rebuild the switch tries again.
const rebuildRetry = time.Second

type rebuild struct {
	region *PoolRegion
	column int
	goAt   time.Time // when to send POOLREBUILDGO (zero: not yet granted)
	// byClient: a column of a region with one copy granted again for
	// a client to rewrite (POOLCOLUMNGRANT): no POOLREBUILDGO follows.
	byClient bool
}

// startRebuilds begins rebuilding every lost copy on node n (just
// restarted) whose other copies are intact.
func (p *poolPlane) startRebuilds(now time.Time, n *PoolNode) {
	p.rebuildLost(now, func(h Home) bool { return h.Node == n })
}

// rebuildLost starts rebuilding every lost copy whose home which accepts
// and whose node is alive, unless it is already under way or waiting out
// a retry, or its region's other copies are not intact; in region and
// column order. It allocates nothing when no copy is lost, so the
// liveness checks can call it every time.
func (p *poolPlane) rebuildLost(now time.Time, which func(Home) bool) {
	type cand struct {
		r *PoolRegion
		c int
	}
	var todo []cand
	for _, r := range p.mmu.regions {
		if r.Layout.Replicas < 2 || !r.Ready || r.Key == 0 {
			// (A region rebuilt from reports has no key until a
			// client uses it.)
			continue
		}
		for c, h := range r.Homes {
			if r.Lost[c] && !r.Rebuilding[c] && h.Node.Alive && which(h) {
				todo = append(todo, cand{r, c})
			}
		}
	}
	slices.SortFunc(todo, func(a, b cand) int { return cmp.Or(cmp.Compare(a.r.ID, b.r.ID), cmp.Compare(a.c, b.c)) })
	for _, t := range todo {
		r, c, h := t.r, t.c, t.r.Homes[t.c]
		if p.rebuildPending(r, c) || now.Before(r.retryAt(c)) || !p.othersIntact(r, c) {
			continue
		}
		msg := &ctrl.Msg{Type: ctrl.PoolRebuild, Region: r.ID, Key: r.Key, Pool: r.spec(),
			Base: h.Base, Length: r.Layout.ColumnBytes(c), Node: uint16(c), Epoch: r.Epoch, Homes: r.homes(), Fences: r.fenceList()}
		id, ok := p.sendPoolCtrl(h.Node.Addr, msg)
		if !ok {
			continue
		}
		p.rebuilds[grantKey{h.Node.Addr, id}] = &rebuild{region: r, column: c}
	}
}

// rebuildPending reports whether a POOLREBUILD for column c of r awaits
// its answer.
func (p *poolPlane) rebuildPending(r *PoolRegion, c int) bool {
	for _, rb := range p.rebuilds {
		if rb.region == r && rb.column == c {
			return true
		}
	}
	return false
}

// retryAt is when a failed rebuild of column c may be tried again.
func (r *PoolRegion) retryAt(c int) time.Time {
	if r.rebuildRetry == nil {
		return time.Time{}
	}
	return r.rebuildRetry[c]
}

// rebuildFailed stops mirroring writes to column c of r and schedules
// another try.
func (p *poolPlane) rebuildFailed(now time.Time, r *PoolRegion, c int) {
	r.Rebuilding[c] = false
	p.mmu.touch(r.ID)
	if r.rebuildRetry == nil {
		r.rebuildRetry = make([]time.Time, len(r.Homes))
	}
	r.rebuildRetry[c] = now.Add(rebuildRetry)
	p.sw.stats.PoolRebuildsFailed++
}

// retryRebuilds restarts failed rebuilds whose wait is over (called with
// the liveness checks).
func (p *poolPlane) retryRebuilds(now time.Time) {
	p.rebuildLost(now, func(Home) bool { return true })
}

// othersIntact reports whether every column of r but c holds its copy.
func (p *poolPlane) othersIntact(r *PoolRegion, c int) bool {
	for k, h := range r.Homes {
		if k != c && (r.Lost[k] || !h.Node.Alive) {
			return false
		}
	}
	return true
}

// rebuildGranted handles the node's answer to POOLREBUILD.
func (p *poolPlane) rebuildGranted(now time.Time, k grantKey, ok bool) bool {
	rb := p.rebuilds[k]
	if rb == nil {
		return false
	}
	delete(p.rebuilds, k)
	r := rb.region
	if p.mmu.regions[r.ID] != r || !r.Lost[rb.column] {
		return true
	}
	if !ok {
		p.rebuildFailed(now, r, rb.column)
		return true
	}
	r.Rebuilding[rb.column] = true
	p.mmu.touch(r.ID)
	if rb.byClient {
		// The other columns move on to a new epoch: a switch that
		// restarts before the client restores this one takes it for
		// stale.
		p.raiseEpoch(r)
		return true
	}
	rb.goAt = now.Add(rebuildDrain)
	p.rebuildsDue = append(p.rebuildsDue, rb)
	return true
}

// sendRebuildGos sends POOLREBUILDGO for the rebuilds whose drain is over.
func (p *poolPlane) sendRebuildGos(now time.Time) {
	keep := p.rebuildsDue[:0]
	for _, rb := range p.rebuildsDue {
		r := rb.region
		if p.mmu.regions[r.ID] != r || !r.Rebuilding[rb.column] {
			continue // freed, or the node restarted again
		}
		if now.Before(rb.goAt) {
			keep = append(keep, rb)
			continue
		}
		p.sendPoolCtrl(r.Homes[rb.column].Node.Addr, &ctrl.Msg{Type: ctrl.PoolRebuildGo, Region: r.ID, Key: r.Key, Node: uint16(rb.column)})
	}
	clear(p.rebuildsDue[len(keep):])
	p.rebuildsDue = keep
}

// nextRebuildGo is when sendRebuildGos has work next (zero: none).
func (p *poolPlane) nextRebuildGo() time.Time {
	var next time.Time
	for _, rb := range p.rebuildsDue {
		if next.IsZero() || rb.goAt.Before(next) {
			next = rb.goAt
		}
	}
	return next
}

// rebuilt handles POOLREBUILT from a memory node: its copy serves again.
func (p *poolPlane) rebuilt(from netip.AddrPort, d *transport.Delivery, m *ctrl.Msg) {
	r, err := p.mmu.Region(m.Region, m.Key)
	c := int(m.Node)
	if err != nil || c >= len(r.Homes) || r.Homes[c].Node.Addr != from || !r.Rebuilding[c] {
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, wire.StatusBadOperand, 0)
		return
	}
	if m.Failed {
		p.rebuildFailed(p.sw.now, r, c)
	} else {
		r.Lost[c], r.Rebuilding[c] = false, false
		p.sw.stats.PoolRebuilt++
		// Every copy is current again, the rebuilt one too.
		p.raiseEpoch(r)
		p.sw.logEvent(Event{Kind: EventCopyRebuilt, Region: r.ID, Copy: c, Node: r.Homes[c].Node.ID, Addr: from})
	}
	p.sw.respond(d, &ctrl.Msg{Type: ctrl.PoolRebuilt, Resp: true})
}
