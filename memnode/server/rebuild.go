package server

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
func (s *Server) startRebuild(region uint32, t *rebuildTask) {
	t.started = true
	l, err := poolmap.NewLayout(t.spec.Size, t.spec.Stripe, t.spec.Columns, t.spec.Replicas)
	if err != nil {
		s.endRebuild(region, t, false)
		return
	}
	for i := range l.Stripes() {
		off := i * l.Stripe
		n := min(l.Stripe, l.Size-off)
		for rep := range l.Replicas {
			es, err := l.Extents(off, n, rep, nil)
			if err == nil && len(es) == 1 && es[0].Column == t.column {
				t.pieces = append(t.pieces, rebuildPiece{off: off, n: n, local: t.base + es[0].Local})
			}
		}
	}
	s.pumpRebuild(region, t)
}

func (s *Server) pumpRebuild(region uint32, t *rebuildTask) {
	p := &s.pool
	for !t.failed && t.inflight < rebuildWindow && t.next < len(t.pieces) {
		pc := t.pieces[t.next]
		buf := make([]byte, pc.n)
		done := func(err error) {
			t.inflight--
			if p.rebuilds[region] != t {
				return // revoked meanwhile
			}
			if err != nil || p.node.Fill(region, t.key, pc.local, buf) != nil {
				t.failed = true
			} else {
				s.stats.Pool.RebuildBytes += pc.n
			}
			s.pumpRebuild(region, t)
		}
		if err := p.host.ReadPool(s.now, p.serve.Switch, region, t.key, pc.off, uint16(t.column), buf, done); err != nil {
			t.failed = true
			break
		}
		t.inflight++
		t.next++
	}
	if t.inflight == 0 && (t.failed || t.next == len(t.pieces)) {
		s.endRebuild(region, t, !t.failed)
	}
}

// endRebuild stops a rebuild and reports how it ended to the switch.
func (s *Server) endRebuild(region uint32, t *rebuildTask, ok bool) {
	p := &s.pool
	delete(p.rebuilds, region)
	if ok || p.serve.Durable == nil {
		// (A durable node keeps a failed rebuild's mark: its record
		// must not take the partial copy for a whole one.)
		p.node.EndRebuild(region)
	}
	if ok {
		// A durable copy is complete once its bytes are on disk and
		// its record says it is no longer being rebuilt.
		ok = s.flushGrant(region) == nil
	}
	if ok {
		s.stats.Pool.Rebuilt++
	} else {
		s.stats.Pool.RebuildsFailed++
	}
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolRebuilt, Region: region, Key: t.key, Node: uint16(t.column), Failed: !ok}, p.serve.Token)
	if err != nil {
		return
	}
	p.host.Notify(s.now, p.serve.Switch, buf)
}
