package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
)

// Fence is a fencing token (Chubby's sequencer): a process that writes a
// region only while it holds a lock raises fence ID to a token larger
// than every earlier holder's (RaiseFence) before it writes, and then
// writes through Fenced: the memory nodes refuse the writes of an
// earlier holder from then on, however late they arrive.
type Fence = wire.Fence

// ErrFenced is the error (errors.Is) of a fenced access refused because
// the fence holds a higher token (a newer holder raised it) or was never
// raised on that memory node. It is an answer, not a loss: the access is
// not sent again. Refused by the switch or by every copy, it was not
// applied; on a region with two copies, a write the switch forwarded
// before a raise that reached one copy before it and the other after may
// have been applied by the first only: the new holder makes the copies
// agree (package kv writes back what it reads of a shard it takes).
var ErrFenced error = wire.StatusFenced

// Fenced returns a view of r whose writes, atomics, vector ops and
// chains (WriteAt, CompareAndSwap, FetchAdd, Apply, Chain: every hop of
// a chain is checked) carry fence f; reads are not fenced, and neither
// are reductions and optimizer steps (the memory nodes take no fence on
// them). f.Token 0 is no fence.
func (r *Region) Fenced(f Fence) *Region {
	v := *r
	v.fence = f
	return &v
}

// RaiseFence raises fence f.ID to f.Token on every memory node that
// holds the region (each column, both copies of a replicated region;
// a copy on a dead node is rebuilt with the switch's fences before it
// serves again). It returns the highest token the switch or a node holds
// for the fence: f.Token when all took the raise; when one holds a
// higher token the error wraps ErrFenced and the token returned is that
// one, from which the caller picks a higher token to try again.
func (r *Region) RaiseFence(ctx context.Context, f Fence) (uint64, error) {
	if f.Token == 0 {
		return 0, fmt.Errorf("pool: region %d: a fence raise with token 0", r.spec.Region)
	}
	high := f.Token
	var first error
	for _, off := range r.columnOffsets() {
		op := r.op(endpoint.KindFence, off)
		op.Fence = f
		err := r.c.ep.Do(ctx, op)
		switch {
		case errors.Is(err, ErrFenced):
			high = max(high, op.Old)
			if first == nil {
				first = err
			}
		case err != nil:
			return high, fmt.Errorf("pool: region %d: raising fence %d: %w", r.spec.Region, f.ID, err)
		}
	}
	if first != nil {
		return high, fmt.Errorf("pool: region %d: raising fence %d to %#x: %w", r.spec.Region, f.ID, f.Token, first)
	}
	return high, nil
}

// RaiseFenceColumns raises fence f.ID to f.Token on each column of the
// region (every memory node of a region with one copy) and returns what
// each column answered: errs[c] is nil where column c took the raise.
// The switch keeps the raise even where a column's node is dead or its
// memory lost (wire.StatusMemberDead, wire.StatusLost): every request
// passing it is held to the fence, and the column, granted again, starts
// with it. high is the highest token a refusal reported (f.Token if
// none): a column refusing with an error wrapping ErrFenced holds a
// higher token. For a coded volume (pool/ec), which writes around the
// columns it is told are gone.
func (r *Region) RaiseFenceColumns(ctx context.Context, f Fence) (high uint64, errs []error) {
	high = f.Token
	errs = make([]error, r.layout.Columns)
	if f.Token == 0 {
		for c := range errs {
			errs[c] = fmt.Errorf("pool: region %d: a fence raise with token 0", r.spec.Region)
		}
		return high, errs
	}
	for i := range r.layout.Columns {
		off := uint64(i) * r.layout.Stripe
		es, err := r.layout.Extents(off, 1, 0, nil)
		if off >= r.layout.Size || err != nil || len(es) != 1 {
			continue
		}
		op := r.op(endpoint.KindFence, off)
		op.Fence = f
		if err := r.c.ep.Do(ctx, op); err != nil {
			if errors.Is(err, ErrFenced) {
				high = max(high, op.Old)
			}
			errs[es[0].Column] = fmt.Errorf("pool: region %d: raising fence %d to %#x on column %d: %w", r.spec.Region, f.ID, f.Token, es[0].Column, err)
		}
	}
	return high, errs
}

// columnOffsets is one region offset in each column that holds a first
// copy of a stripe: the raises there reach every node of the region.
func (r *Region) columnOffsets() []uint64 {
	l := r.layout
	seen := make(map[int]bool, l.Columns)
	var offs []uint64
	for i := uint64(0); i < uint64(l.Columns) && i*l.Stripe < l.Size; i++ {
		es, err := l.Extents(i*l.Stripe, 1, 0, nil)
		if err != nil || len(es) != 1 || seen[es[0].Column] {
			continue
		}
		seen[es[0].Column] = true
		offs = append(offs, i*l.Stripe)
	}
	return offs
}
