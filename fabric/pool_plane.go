package fabric

import "time"

// poolPlane is the switch's memory pool: its map (the MMU), the grants,
// rebuilds and recovery that keep the map true to the memory nodes, and
// the data path that translates pool requests (pool_ctrl.go, pool_data.go,
// pool_rebuild.go, pool_recover.go, pool_clients.go).
//
// The Switch holds one and calls into it from Receive (pool requests),
// Poll (rebuilds due), its control dispatch (ctrl.Pool* requests, the
// nodes' answers, completions) and its liveness checks. The pool in turn
// uses the switch's services through sw: the transport engine and the
// control replies, the forwarding buffers, the clocks (now, and heard, on
// which the nodes' lastSeen is kept), events, the counters in Stats, the
// peers' identities and the send tokens, whose counter it shares with the
// aggregation results.
type poolPlane struct {
	sw  *Switch
	mmu *MMU

	// Regions waiting for their grants, by grant message; scratch.
	grants      map[grantKey]*poolCreate
	rebuilds    map[grantKey]*rebuild // POOLREBUILD sent, answer awaited
	rebuildsDue []*rebuild            // granted, POOLREBUILDGO after the drain
	tgt         []Target
	tgts        []Target

	// The pool map's recovery (pool_recover.go): this switch's
	// incarnation, which memory nodes report to; until when it waits for
	// them; nodes registered, and of those the ones whose report is not
	// complete; region columns no report has settled.
	incarnation     uint64
	recoverUntil    time.Time
	recovered       bool
	nodesSeen       int
	pendingNodes    int
	unconfirmedCols int

	pclients poolClients // addresses proven to receive (pool_clients.go)
	proveTok map[uint64]proveReq
}

// init readies p for sw, with region keys (and the incarnation) from
// keys (Config.PoolKeys; nil: secure randomness).
func (p *poolPlane) init(sw *Switch, keys func() uint64) {
	p.sw = sw
	p.mmu = NewMMU(newKeySource(keys))
	p.grants = make(map[grantKey]*poolCreate)
	p.rebuilds = make(map[grantKey]*rebuild)
	for p.incarnation == 0 {
		p.incarnation = p.mmu.newKey()
	}
}
