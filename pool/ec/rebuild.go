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
// is rebuilt (RebuildRows), and the column serves reads again
// (pool.Region.RestoreColumn). It reads k shards and writes one per row.
//
// Nothing may write to the volume while it runs: a write between a row's
// reads and its rebuilt shard's write would be missing from that shard.
// Where the volume has writers, each rebuilds its own rows instead
// (RebuildRows). A Rebuild cut short leaves the column lost; run it
// again.
func (v *Volume) Rebuild(ctx context.Context, shard int) error {
	if shard < 0 || shard >= v.k+v.m {
		return fmt.Errorf("ec: rebuild of shard %d: want 0 to %d", shard, v.k+v.m-1)
	}
	if err := v.r.RegrantColumn(ctx, shard); err != nil {
		return fmt.Errorf("ec: rebuild of shard %d: %w", shard, err)
	}
	if _, err := v.RebuildRows(ctx, shard, 0, v.Size(), nil); err != nil {
		return err
	}
	if err := v.r.RestoreColumn(ctx, shard); err != nil {
		return fmt.Errorf("ec: rebuild of shard %d: %w", shard, err)
	}
	return nil
}

// ErrNotRebuilding is wrapped by RebuildRows's error for a shard whose
// column serves reads (it is not lost and granted again for its
// rebuild).
var ErrNotRebuilding = errors.New("ec: the shard's column is not being rebuilt")

// RebuildRows recomputes shard (a column granted again for its rebuild:
// pool.Region.RegrantColumn) of every row that holds a byte of [off,
// off+n) of the volume, from k other shards of the row, and writes it;
// it returns the rows rebuilt, and calls each (if not nil) after each.
// It is for a volume whose rows have writers: each writer rebuilds its
// own rows, the only writer of a row meanwhile (a write between a row's
// reads and its rebuilt shard's write would be missing from that
// shard). Writes before and after a row is rebuilt reach the column
// anyway: a chain through a column being rebuilt is refused, and the
// write is rewritten from the data, the column included. Once every
// row is rebuilt, pool.Region.RestoreColumn lets the column serve
// reads. A row whose parity is unsure here (repair.go) is repaired
// first where it can be; if not, what its reconstruction computes is
// written, and it stays unsure.
func (v *Volume) RebuildRows(ctx context.Context, shard int, off, n int64, each func()) (int, error) {
	switch {
	case shard < 0 || shard >= v.k+v.m:
		return 0, fmt.Errorf("ec: rebuild of shard %d: want 0 to %d", shard, v.k+v.m-1)
	case n == 0:
		return 0, nil
	case off < 0 || n < 0 || off > v.Size() || n > v.Size()-off:
		return 0, fmt.Errorf("ec: rebuild of %d bytes at %d in a volume of %d: %w", n, off, v.Size(), wire.StatusOutOfBounds)
	}
	rowBytes := int64(v.k) * int64(v.s)
	// A column that serves reads is not being rebuilt: rewriting it from
	// the others would put a row's unsure parity into its data.
	var b [1]byte
	if _, err := v.r.ReadAtContext(ctx, b[:], int64(v.ShardAddr(uint64(off/rowBytes), shard, 0))); err == nil {
		return 0, fmt.Errorf("ec: rebuild of shard %d: %w", shard, ErrNotRebuilding)
	} else if !errors.Is(err, wire.StatusLost) {
		return 0, fmt.Errorf("ec: rebuild of shard %d: %w", shard, err)
	}
	shards := make([][]byte, v.k+v.m)
	done := 0
	for row := uint64(off / rowBytes); row <= uint64((off+n-1)/rowBytes); row++ {
		v.repairRow(ctx, row, true)
		err := v.rebuildRow(ctx, shard, row, shards)
		if each != nil {
			each()
		}
		if err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}

// rebuildRow recomputes shard of row from k other shards (data shards
// first) and writes it; shards is scratch of k+m entries.
func (v *Volume) rebuildRow(ctx context.Context, shard int, row uint64, shards [][]byte) error {
	got, errs, err := v.readOthers(ctx, row, 0, v.s, shard, shards)
	if err != nil {
		return err
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
