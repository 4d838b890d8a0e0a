package ec

import (
	"context"
	"errors"
	"fmt"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// Fencing a coded volume (pool.Fence). A writer that holds a lock over
// the volume (a key space's owner holds its rank) raises its fence on
// every shard's memory node (RaiseFence) and writes through Fenced: each
// hop of every chain, and every write of the degraded path, carries the
// token, and the switch and each memory node refuse those of an earlier
// holder. A write refused for its fence is not rewritten around: it
// fails with an error wrapping pool.ErrFenced. A chain refused after
// some of its parity hops were applied (the raise landed between two
// hops) leaves that piece's parity unsure, as any chain cut short does.

// Fenced returns a view of v whose writes carry fence f (f.Token 0: no
// fence). The view shares v's state: pieces left unsure by one are
// repaired by the other's next write of their row.
func (v *Volume) Fenced(f pool.Fence) *Volume {
	w := *v
	w.r = v.r.Fenced(f)
	return &w
}

// RaiseFence raises fence f.ID to f.Token on the memory node of every
// shard. A shard whose node is dead is reported lost to the switch (as
// a write around it does), so that it is read again only after Rebuild,
// which grants it the switch's fences; the switch keeps the raise for
// dead and lost shards alike. It returns the highest token a node or the
// switch holds for the fence: f.Token when the raise holds; when one
// holds a higher token the error wraps pool.ErrFenced and the token is
// that one. With more than m shards gone the error wraps ErrUnreadable.
func (v *Volume) RaiseFence(ctx context.Context, f pool.Fence) (uint64, error) {
	high, errs := v.r.RaiseFenceColumns(ctx, f)
	var fenced, failed []error
	var lost []int
	for c, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, pool.ErrFenced):
			fenced = append(fenced, err)
		case errors.Is(err, wire.StatusLost):
			lost = append(lost, c)
		case errors.Is(err, wire.StatusMemberDead) && ctx.Err() == nil:
			if merr := v.r.MarkColumnLost(ctx, c); merr != nil {
				failed = append(failed, err, merr)
				continue
			}
			lost = append(lost, c)
		default:
			failed = append(failed, err)
		}
	}
	switch {
	case len(fenced) > 0:
		return high, fmt.Errorf("ec: %w", errors.Join(fenced...))
	case len(failed) > 0:
		return high, fmt.Errorf("ec: %w", errors.Join(failed...))
	case len(lost) > v.m:
		return high, fmt.Errorf("%w: raising fence %d: shards %v are gone", ErrUnreadable, f.ID, lost)
	}
	return high, nil
}
