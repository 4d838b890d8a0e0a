package ec

import (
	"context"
	"errors"
	"fmt"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// Rebuild recomputes shard (0 to k+m-1: its column of the region) of
// every row from k other shards of the row and writes it to the
// column's memory node, after that node lost it (it restarted, or the
// column was written around while it was unreachable): the switch
// grants the column again (pool.Region.RegrantColumn), every row's shard
// is rebuilt, and the column serves reads again
// (pool.Region.RestoreColumn). It reads k shards and writes one per row.
//
// Nothing may write to the volume while it runs: a write between a row's
// reads and its rebuilt shard's write would be missing from that shard.
// A Rebuild cut short leaves the column lost; run it again.
func (v *Volume) Rebuild(ctx context.Context, shard int) error {
	if shard < 0 || shard >= v.k+v.m {
		return fmt.Errorf("ec: rebuild of shard %d: want 0 to %d", shard, v.k+v.m-1)
	}
	if err := v.r.RegrantColumn(ctx, shard); err != nil {
		return fmt.Errorf("ec: rebuild of shard %d: %w", shard, err)
	}
	shards := make([][]byte, v.k+v.m)
	for row := range v.rows {
		got := 0
		var errs []error
		for s := range shards {
			shards[s] = nil
			if s == shard || got == v.k {
				continue
			}
			b := make([]byte, v.s)
			if _, err := v.r.ReadAtContext(ctx, b, int64(v.ShardAddr(row, s, 0))); err != nil {
				if ctx.Err() != nil {
					return err
				}
				errs = append(errs, fmt.Errorf("shard %d: %w", s, err))
				continue
			}
			shards[s] = b
			got++
		}
		if got < v.k {
			return fmt.Errorf("%w: rebuild of shard %d: row %d, %d of %d: %w", ErrUnreadable, shard, row, got, v.k, errors.Join(errs...))
		}
		if err := v.enc.Reconstruct(shards); err != nil {
			return fmt.Errorf("ec: rebuild of shard %d: row %d: %w", shard, row, err)
		}
		// (The switch reports writes to a column being rebuilt degraded.)
		if _, err := v.r.WriteAtContext(ctx, shards[shard], int64(v.ShardAddr(row, shard, 0))); err != nil && !errors.Is(err, pool.ErrDegraded) {
			return fmt.Errorf("ec: rebuild of shard %d: row %d: %w", shard, row, err)
		}
	}
	if err := v.r.RestoreColumn(ctx, shard); err != nil {
		return fmt.Errorf("ec: rebuild of shard %d: %w", shard, err)
	}
	return nil
}

// Lost returns the shards whose column the switch reports lost
// (wire.StatusLost: their node restarted, or writes went around them),
// which Rebuild restores once their node is up (it fails with
// wire.StatusMemberDead until then), and the shards that do not answer
// otherwise (their node dead or cut off, no write gone around them yet:
// the node may come back with them intact). It reads one byte of each
// shard.
func (v *Volume) Lost(ctx context.Context) (lost, unreachable []int, err error) {
	var b [1]byte
	for s := range v.k + v.m {
		_, err := v.r.ReadAtContext(ctx, b[:], int64(v.ShardAddr(0, s, 0)))
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, nil, err
		case errors.Is(err, wire.StatusLost):
			lost = append(lost, s)
		default:
			unreachable = append(unreachable, s)
		}
	}
	return lost, unreachable, nil
}
