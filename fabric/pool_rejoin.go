package fabric

import (
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// A durable memory node restarting while the switch runs.
//
// A node that restarts empty loses its copies: the switch marks them
// lost at its registration and rebuilds them from the other copies (a
// region with one copy is lost). A durable node (ndma memd --dir) keeps
// its memory and grants, and says so when it registers (ctrl.Msg.Kept).
// The switch then leaves its copies as they are but does not use the node
// (not Alive) until its report is complete, and takes back a copy only if
// it is still current: the switch did not mark it lost while the node
// was away (a write the copy missed marks it lost and raises the region's
// epoch), the node reports the region's epoch, and the copy was not being
// rebuilt. Every other copy on the node is lost from then on, and rebuilt
// as today. A region with one copy whose node comes back this way is
// whole again.

// rejoin starts waiting for the report of node n, which restarted
// keeping its copies.
func (p *poolPlane) rejoin(n *PoolNode) {
	if n.reported {
		p.pendingNodes++
	}
	n.reported, n.Alive, n.rejoin = false, false, true
	n.current = make(map[poolColumn]bool)
	for _, r := range p.mmu.regions {
		for c, h := range r.Homes {
			if h.Node == n && r.Rebuilding[c] {
				// A rebuild the restart cut short: still lost.
				r.Rebuilding[c] = false
				p.mmu.touch(r.ID)
			}
		}
	}
}

// adoptRejoined takes one copy that node n, rejoining, reports of region
// r: current if r's map still holds it for current (see above).
func (p *poolPlane) adoptRejoined(n *PoolNode, r *PoolRegion, e *ctrl.GrantReport, l poolmap.Layout) {
	c := int(e.Column)
	if !r.matches(e, l) {
		p.sw.stats.PoolReportsRefused++
		return
	}
	if !r.Lost[c] && !e.Rebuilding && e.Epoch == r.Epoch {
		n.current[poolColumn{r.ID, c}] = true
	}
	p.sw.stats.PoolCopiesReported++
}

// rejoined ends node n's rejoin, its report complete: every copy on it
// not reported current is lost (and rebuilt where another copy lives).
func (p *poolPlane) rejoined(n *PoolNode) {
	for _, r := range p.mmu.regions {
		for c, h := range r.Homes {
			if h.Node != n || n.current[poolColumn{r.ID, c}] {
				continue
			}
			if !r.Lost[c] {
				r.Lost[c] = true
				p.sw.logEvent(Event{Kind: EventCopyLost, Region: r.ID, Copy: c, Node: n.ID, Addr: n.Addr})
			}
			r.Rebuilding[c] = false
			p.mmu.touch(r.ID)
		}
	}
	n.rejoin, n.current = false, nil
}
