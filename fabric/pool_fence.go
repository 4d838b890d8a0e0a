package fabric

import "github.com/ndma/ndma/wire"

// Fences at the switch (wire.Fence). The memory nodes check every
// fenced request, since a request the switch forwarded before a raise
// may reach a node after it; the switch keeps each region's fences too:
// it refuses what the nodes would refuse before it fans out to the
// copies (a write that reached one copy and not the other would leave
// them different), gives them to a copy it rebuilds (POOLREBUILD), and,
// restarted, learns them back from the nodes' reports (the highest token
// of each). A region's table is bounded by wire.MaxFences; only clients
// holding the region's key (and, sealed, a credential) add to it, and
// it lives as long as the region.

// fenceCheck checks fence f of a request h to region r and, for a raise,
// records it. It returns the status to refuse the request with (OK: go
// on) and the fence's token.
func (p *poolPlane) fenceCheck(r *PoolRegion, h *wire.Header, f wire.Fence) (wire.Status, uint64) {
	cur, ok := r.fences[f.ID]
	if h.Op != wire.OpFence {
		if !ok || f.Token < cur {
			p.sw.stats.PoolFenced++
			return wire.StatusFenced, cur
		}
		return wire.StatusOK, cur
	}
	switch {
	case ok && f.Token < cur:
		p.sw.stats.PoolFenced++
		return wire.StatusFenced, cur
	case f.Token-cur > wire.MaxFenceStep:
		// A step no holder takes: not a way to the top of the token
		// space, where no holder could follow.
		return wire.StatusBadOperand, cur
	case !ok && len(r.fences) >= wire.MaxFences:
		return wire.StatusBusy, 0
	}
	return wire.StatusOK, cur
}

// raiseFence records fence f of region r (a raise fenceCheck let
// through, which the switch forwards).
func (r *PoolRegion) raiseFence(f wire.Fence) {
	if r.fences == nil {
		r.fences = make(map[uint32]uint64)
	}
	r.fences[f.ID] = max(r.fences[f.ID], f.Token)
}

// adoptFences takes the fences a node reports for r: the highest token
// of each, within the bound.
func (r *PoolRegion) adoptFences(fs []wire.Fence) {
	for _, f := range fs {
		if _, ok := r.fences[f.ID]; ok || len(r.fences) < wire.MaxFences {
			r.raiseFence(f)
		}
	}
}

// fenceList is r's fences in increasing id order, as grants carry them.
func (r *PoolRegion) fenceList() []wire.Fence { return wire.FenceList(r.fences) }
