package endpoint

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// memServer serves this endpoint's registered memory (the Store) to
// peers: it executes their one-sided requests (Read, Write, CAS,
// FetchAdd, Vector) in memnode.Store and answers them, a Read's data
// streamed straight from region memory. On a memory node of a pool
// (Config.PoolNode) it also serves the pool requests, chain hops and
// grants the switch forwards (memserver_pool.go) and rebuilds the copies
// of pool columns the node lost (rebuild.go).
//
// It runs inside its Core, on the Core's goroutine: the Core's
// transport carries its answers, the Core's pool client its rebuild
// reads, and it counts in the Core's Stats.
type memServer struct {
	core     *Core
	store    *memnode.Store
	inStatus map[inKey]*inReq
	inSweep  time.Time // earliest next sweep of inStatus
	// idents, when set (SetIdentities), gives each peer address's
	// certified identity.
	idents func(netip.AddrPort) (secure.Cert, bool)
	pool   poolServer
}

type inReq struct {
	status wire.Status
	total  uint32 // the request's length, fixed by its first packet
	last   time.Time
}

// maxInRequests bounds the multi-packet requests being received; stale
// ones (their sender gave up) are swept when the bound is reached, and
// while it is, the first packet of a new one is held back (not
// acknowledged: its sender resends it).
const maxInRequests = 1 << 16

// serve executes a request packet against the local store, and answers
// when the request message is complete.
func (ms *memServer) serve(now time.Time, d *transport.Delivery) {
	h := &d.Header
	if h.Op == wire.OpControl && ms.servePoolControl(d) {
		return
	}
	var r *inReq
	k := inKey{d.Peer, h.MsgID}
	if !d.MsgDone || h.Offset != 0 || h.MsgLen != uint32(h.Len) {
		// Multi-packet request: remember the first refusal until the
		// last packet arrives. Admission (admitRequest) made room.
		if r = ms.inStatus[k]; r == nil {
			if len(ms.inStatus) >= maxInRequests {
				ms.core.stats.RequestsRefused++
				return
			}
			r = &inReq{total: h.MsgLen}
			ms.inStatus[k] = r
		}
		r.last = now
	}
	var res memnode.Result
	switch {
	case r != nil && h.MsgLen != r.total:
		// Not a packet of the request it names: the request fails.
		ms.core.stats.FragmentsRefused++
		res.Status = wire.StatusBadOperand
	case h.Op == wire.OpNop:
		res.Status = wire.StatusOK
	case ms.pool.node != nil && h.Key == ms.pool.node.Key():
		// The memory lent to the pool is reachable only through the
		// pool path (the switch checks each region's own key), never
		// with the lent region's key.
		ms.core.stats.LentRefused++
		res.Status = wire.StatusBadKey
	default:
		res = ms.store.Exec(h, d.Payload)
	}
	st, old := res.Status, res.Old
	if r != nil {
		if r.status == wire.StatusOK {
			r.status = st
		}
		if !d.MsgDone {
			return
		}
		st = r.status
		delete(ms.inStatus, k)
	}
	if st == wire.StatusOK {
		ms.core.stats.RequestsServed++
	} else {
		ms.core.stats.RequestsRefused++
	}
	rh := wire.Header{Op: h.Op, Flags: wire.FlagResp, MsgID: h.MsgID, Status: st, Operand1: old}
	var payload []byte
	if h.Op == wire.OpRead && st == wire.StatusOK {
		// Zero-copy: the response streams straight from region memory
		// (RDMA READ semantics: not a snapshot against concurrent writes).
		payload = res.Data
	}
	if _, err := ms.core.eng.Send(d.Peer, &rh, payload, 0); err != nil {
		ms.core.stats.ResponsesDropped++
	}
}

// admitRequest holds back the first packet of a multi-packet request
// while maxInRequests are being received (after forgetting those idle
// for the dead timeout): its sender resends it, and the requests already
// under way are not disturbed.
func (ms *memServer) admitRequest(d *transport.Delivery) bool {
	h := &d.Header
	if h.MsgLen == uint32(h.Len) || len(ms.inStatus) < maxInRequests || ms.inStatus[inKey{d.Peer, h.MsgID}] != nil {
		return true
	}
	if ms.core.sweepDue(ms.core.now, &ms.inSweep) {
		idle, n := ms.core.deadTimeout(), 0
		for k, r := range ms.inStatus {
			if n++; n > sweepBatch {
				break
			}
			if ms.core.now.Sub(r.last) > idle {
				delete(ms.inStatus, k)
			}
		}
	}
	return len(ms.inStatus) < maxInRequests
}
