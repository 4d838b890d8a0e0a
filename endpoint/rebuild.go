package endpoint

import (
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// A memory node rebuilding a copy it lost in a restart (fabric's
// POOLREBUILD, POOLREBUILDGO): it reads every stripe its column holds
// through the switch (which serves reads from the other copies), fills
// the bytes no client wrote since the rebuild grant, and reports
// POOLREBUILT.

// rebuildWindow is the stripe reads a rebuild keeps in flight.
const rebuildWindow = 8

type rebuildTask struct {
	spec     ctrl.PoolSpec
	key      uint64
	column   int
	base     uint64
	started  bool
	pieces   []rebuildPiece
	next     int
	inflight int
	failed   bool
}

type rebuildPiece struct {
	off, n, local uint64 // pool offset, length, node-local address
}

// startRebuild lists the stripes column t.column holds and starts reading
// them.
func (ms *memServer) startRebuild(region uint32, t *rebuildTask) {
	t.started = true
	l, err := poolmap.NewLayout(t.spec.Size, t.spec.Stripe, t.spec.Columns, t.spec.Replicas)
	if err != nil {
		ms.endRebuild(region, t, false)
		return
	}
	for s := range l.Stripes() {
		off := s * l.Stripe
		n := min(l.Stripe, l.Size-off)
		for rep := range l.Replicas {
			es, err := l.Extents(off, n, rep, nil)
			if err == nil && len(es) == 1 && es[0].Column == t.column {
				t.pieces = append(t.pieces, rebuildPiece{off: off, n: n, local: t.base + es[0].Local})
			}
		}
	}
	ms.pumpRebuild(region, t)
}

func (ms *memServer) pumpRebuild(region uint32, t *rebuildTask) {
	p := &ms.pool
	for !t.failed && t.inflight < rebuildWindow && t.next < len(t.pieces) {
		pc := t.pieces[t.next]
		op := &Op{Kind: KindRead, Peer: p.serve.Switch, Pool: region, Key: t.key, Addr: pc.off,
			Lane: uint16(t.column), Buf: make([]byte, pc.n)}
		op.onDone = func(op *Op) {
			t.inflight--
			if p.rebuilds[region] != t {
				return // revoked meanwhile
			}
			if op.Err != nil || p.node.Fill(region, t.key, pc.local, op.Buf) != nil {
				t.failed = true
			} else {
				p.stats.RebuildBytes += pc.n
			}
			ms.pumpRebuild(region, t)
		}
		if err := ms.core.Post(p.now, op); err != nil {
			t.failed = true
			break
		}
		t.inflight++
		t.next++
	}
	if t.inflight == 0 && (t.failed || t.next == len(t.pieces)) {
		ms.endRebuild(region, t, !t.failed)
	}
}

// endRebuild stops a rebuild and reports how it ended to the switch.
func (ms *memServer) endRebuild(region uint32, t *rebuildTask, ok bool) {
	p := &ms.pool
	delete(p.rebuilds, region)
	p.node.EndRebuild(region)
	if ok {
		p.stats.Rebuilt++
	} else {
		p.stats.RebuildsFailed++
	}
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolRebuilt, Region: region, Key: t.key, Node: uint16(t.column), Failed: !ok}, p.serve.Token)
	if err != nil {
		return
	}
	op := &Op{Kind: KindControl, Peer: p.serve.Switch, Buf: buf}
	op.onDone = func(*Op) {}
	_ = ms.core.Post(p.now, op)
}
