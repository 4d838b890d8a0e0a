package fabric

import (
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// A client's requests about a column of a region with one copy, as an
// erasure-coded volume (package pool/ec) uses it: the switch keeps no
// second copy to rebuild such a column from, so the client that codes
// the region reports a column it wrote around (POOLCOLUMNLOST), has it
// granted again to its node (POOLCOLUMNGRANT: zeroed, writes forwarded,
// reads refused), rewrites it from the other columns and makes it serve
// again (POOLCOLUMNRESTORED).

// columnRequest handles POOLCOLUMNLOST, POOLCOLUMNGRANT and
// POOLCOLUMNRESTORED.
func (p *poolPlane) columnRequest(d *transport.Delivery, m *ctrl.Msg) {
	refuse := func(st wire.Status) {
		p.sw.stats.ControlRefused++
		p.sw.reply(d.Peer, &d.Header, st, 0)
	}
	r, err := p.mmu.Region(m.Region, m.Key)
	switch {
	case err != nil || !r.Ready:
		refuse(wire.StatusBadKey)
		return
	case r.Layout.Replicas != 1 || int(m.Node) >= len(r.Homes):
		// The switch rebuilds copies of replicated regions itself.
		refuse(wire.StatusBadOperand)
		return
	}
	c := int(m.Node)
	h := r.Homes[c]
	switch m.Type {
	case ctrl.PoolColumnLost:
		if !r.Lost[c] || r.Rebuilding[c] {
			r.Lost[c], r.Rebuilding[c] = true, false
			p.raiseEpoch(r)
			p.sw.logEvent(Event{Kind: EventCopyLost, Region: r.ID, Copy: c, Node: h.Node.ID, Addr: h.Node.Addr})
		}
	case ctrl.PoolColumnGrant:
		switch {
		case !r.Lost[c]:
			refuse(wire.StatusBadOperand) // nothing to rewrite
			return
		case r.Rebuilding[c]:
			// Granted: the client may write.
		case !h.Node.Alive:
			refuse(wire.StatusMemberDead)
			return
		default:
			if !p.rebuildPending(r, c) {
				msg := &ctrl.Msg{Type: ctrl.PoolGrant, Region: r.ID, Key: r.Key, Pool: r.spec(),
					Base: h.Base, Length: r.Layout.ColumnBytes(c), Node: uint16(c), Epoch: r.Epoch, Homes: r.homes(), Fences: r.fenceList()}
				if id, ok := p.sendPoolCtrl(h.Node.Addr, msg); ok {
					p.rebuilds[grantKey{h.Node.Addr, id}] = &rebuild{region: r, column: c, byClient: true}
				}
			}
			// Not yet: the client asks again.
			p.sw.reply(d.Peer, &d.Header, wire.StatusBusy, 0)
			return
		}
	case ctrl.PoolColumnRestored:
		if !r.Rebuilding[c] {
			refuse(wire.StatusBadOperand)
			return
		}
		r.Lost[c], r.Rebuilding[c] = false, false
		p.sw.stats.PoolRebuilt++
		p.raiseEpoch(r)
		p.sw.logEvent(Event{Kind: EventCopyRebuilt, Region: r.ID, Copy: c, Node: h.Node.ID, Addr: h.Node.Addr})
	}
	p.sw.respond(d, &ctrl.Msg{Type: m.Type, Resp: true})
}
