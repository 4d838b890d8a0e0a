package pool

import (
	"context"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/poolmap"
)

// ReadVec reads ps[i] at pool offset offs[i] for every i, all at once:
// the reads' ops start in order from the calling goroutine (up to the
// client's window in flight), so several reads cost one round trip and
// go out in an order that does not depend on how goroutines are
// scheduled. errs[i] is the i-th read's error; each read must lie inside
// the region.
func (r *Region) ReadVec(ctx context.Context, ps [][]byte, offs []int64) (errs []error) {
	errs = make([]error, len(ps))
	if len(offs) != len(ps) {
		for i := range errs {
			errs[i] = fmt.Errorf("pool: ReadVec of %d buffers at %d offsets", len(ps), len(offs))
		}
		return errs
	}
	type piece struct {
		i int
		e poolmap.Extent
	}
	var pieces []piece
	for i, p := range ps {
		off := offs[i]
		if off < 0 || off > r.Size() || int64(len(p)) > r.Size()-off {
			errs[i] = fmt.Errorf("pool: read of %d bytes at %d in a region of %d: %w", len(p), off, r.Size(), wire.StatusOutOfBounds)
			continue
		}
		exts, err := r.layout.Extents(uint64(off), uint64(len(p)), 0, nil)
		if err != nil {
			errs[i] = fmt.Errorf("pool: region %d: %w", r.spec.Region, err)
			continue
		}
		for _, e := range exts {
			pieces = append(pieces, piece{i, e})
		}
	}
	if len(pieces) == 0 {
		return errs
	}
	if err := r.keepProven(ctx); err != nil {
		for _, pc := range pieces {
			errs[pc.i] = err
		}
		return errs
	}
	r.runEach(ctx, len(pieces), func(op *endpoint.Op, k int) {
		pc := pieces[k]
		p, off := ps[pc.i], uint64(offs[pc.i])
		*op = endpoint.Op{Kind: endpoint.KindRead, Peer: r.c.addr, Pool: r.spec.Region, Key: r.key, Addr: pc.e.Off,
			Lane: uint16(pc.e.Column), Buf: p[pc.e.Off-off : pc.e.Off-off+pc.e.Len]}
	}, func(k int, err error) {
		if i := pieces[k].i; errs[i] == nil {
			errs[i] = fmt.Errorf("pool: region %d: %w", r.spec.Region, err)
		}
	})
	return errs
}

// runEach runs n ops, keeping up to the client's window of them in
// flight, as runOps, but starts every one whatever the others' outcome
// (until ctx ends) and reports each failed op to failed with its index.
func (r *Region) runEach(ctx context.Context, n int, fill func(op *endpoint.Op, k int), failed func(k int, err error)) {
	window := min(r.c.opts.Window, n)
	done := make(chan *endpoint.Op, window)
	ops := make([]endpoint.Op, window)
	idx := make(map[*endpoint.Op]int, window)
	free := make([]*endpoint.Op, 0, window)
	for i := range ops {
		free = append(free, &ops[i])
	}
	ctxDone := ctx.Done()
	inflight, next := 0, 0
	for next < n || inflight > 0 {
		for ctx.Err() == nil && next < n && len(free) > 0 {
			op := free[len(free)-1]
			free = free[:len(free)-1]
			fill(op, next)
			if err := r.c.ep.Start(op, done); err != nil {
				failed(next, err)
				free = append(free, op)
				next++
				continue
			}
			idx[op] = next
			inflight++
			next++
		}
		if ctx.Err() != nil {
			for ; next < n; next++ {
				failed(next, ctx.Err())
			}
		}
		if inflight == 0 {
			break
		}
		select {
		case op := <-done:
			inflight--
			if op.Err != nil {
				failed(idx[op], op.Err)
			}
			delete(idx, op)
			free = append(free, op)
		case <-ctxDone:
			ctxDone = nil
			for i := range ops {
				r.c.ep.Cancel(&ops[i])
			}
		}
	}
}
