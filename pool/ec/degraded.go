package ec

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// Writing with shards missing. A chain needs every shard it visits, so
// a piece whose chain fails (a memory node of its row dead, or its
// column lost) is rewritten from the data instead: the row's bytes of
// the piece are read from every shard, the data shards that do not
// answer are reconstructed, the piece's data shard takes the new bytes,
// the parity is encoded on this host, and the piece's data shard and
// every parity shard that answered are written whole. Only shards the
// switch reports lost (wire.StatusLost) or on a dead node
// (wire.StatusMemberDead) are written around; a shard that does not
// answer for another reason (this host's link, the switch restarting)
// fails the write, since this host cannot tell it from a shard that
// missed nothing. The shards written around miss the write: before
// writing around one on a dead node, the switch is told its column is
// lost (pool.Region.MarkColumnLost), so that no reader reads it stale
// when its node answers again; Rebuild restores it.
//
// Rewriting from the data also repairs what the failed chain did before
// it stopped (a parity shard that took the change while the data shard
// did not), as long as every other data shard of the row answers. It
// sends (1 + m) times the piece and reads k+m times it: the price of a
// row missing a shard.
//
// The rewrite reads the other data shards of the row: a write to them
// between that read and its parity writes would be lost from the parity.
// So a row has one writer at a time, not only a byte range (a kv shard's
// rows are written by its owner alone).

// gone reports whether err says a shard is lost or on a dead node: one
// to write around.
func gone(err error) bool {
	return errors.Is(err, wire.StatusLost) || errors.Is(err, wire.StatusMemberDead)
}

// readRow reads the bytes [w, w+n) of every shard of row row into shards
// (nil for those that are gone). It returns the shards that are gone and
// their errors, or the first error that says neither.
func (v *Volume) readRow(ctx context.Context, row, w, n uint64, shards [][]byte) ([]int, []error, error) {
	var missing []int
	var errs []error
	for s := range shards {
		shards[s] = nil
		b := make([]byte, n)
		if _, err := v.r.ReadAtContext(ctx, b, int64(v.ShardAddr(row, s, w))); err != nil {
			if ctx.Err() != nil || !gone(err) {
				return nil, nil, fmt.Errorf("ec: row %d shard %d: %w", row, s, err)
			}
			missing = append(missing, s)
			errs = append(errs, fmt.Errorf("shard %d: %w", s, err))
			continue
		}
		shards[s] = b
	}
	return missing, errs, nil
}

// rewrite writes piece pc (data) on the degraded path; cut says a chain
// of it failed (and may have reached some parity shards: cut.go).
func (v *Volume) rewrite(ctx context.Context, pc piece, data []byte, cut bool) error {
	_, err := v.rewriteRow(ctx, pc, data, cut)
	return err
}

// rewriteRow is rewrite; wrote reports whether it wrote any shard
// (before it fails: the row then is as the failed chain left it).
func (v *Volume) rewriteRow(ctx context.Context, pc piece, data []byte, cut bool) (wrote bool, _ error) {
	shards := make([][]byte, v.k+v.m)
	missing, errs, err := v.readRow(ctx, pc.row, pc.w, pc.n, shards)
	if err != nil {
		return wrote, err
	}
	if len(missing) > v.m {
		return wrote, fmt.Errorf("%w: row %d: %d of %d shards answer: %w", ErrUnreadable, pc.row, v.k+v.m-len(missing), v.k+v.m, errors.Join(errs...))
	}
	for i, s := range missing {
		if !errors.Is(errs[i], wire.StatusLost) {
			if err := v.r.MarkColumnLost(ctx, s); err != nil {
				return wrote, fmt.Errorf("ec: row %d: writing around shard %d: %w", pc.row, s, err)
			}
		}
	}
	writeData := shards[pc.i] != nil
	for i := range v.k {
		if i != pc.i && shards[i] == nil {
			var err error
			if cut && writeData && !bytes.Equal(shards[pc.i], data) {
				err = v.undoPartial(pc, shards, data)
			} else {
				err = v.enc.ReconstructData(shards)
			}
			if err != nil {
				return wrote, fmt.Errorf("ec: row %d: %w", pc.row, err)
			}
			break
		}
	}
	shards[pc.i] = data
	present := make([]bool, v.m)
	for j := range v.m {
		present[j] = shards[v.k+j] != nil
		shards[v.k+j] = make([]byte, pc.n)
	}
	if err := v.enc.Encode(shards); err != nil {
		return wrote, fmt.Errorf("ec: row %d: %w", pc.row, err)
	}
	// Write the data shard and the parity shards that answered; one that
	// fails now holds stale bytes: its column is reported lost too.
	lost := len(missing)
	var werrs []error
	put := func(s int) {
		_, err := v.r.WriteAtContext(ctx, shards[s], int64(v.ShardAddr(pc.row, s, pc.w)))
		if err == nil {
			return
		}
		lost++
		werrs = append(werrs, fmt.Errorf("shard %d: %w", s, err))
		switch {
		case errors.Is(err, wire.StatusLost):
		case errors.Is(err, wire.StatusMemberDead) && ctx.Err() == nil:
			if merr := v.r.MarkColumnLost(ctx, s); merr != nil {
				werrs = append(werrs, merr)
				lost = v.m + 1 // a stale shard the switch may still serve
			}
		default:
			lost = v.m + 1 // not known to miss the write: the row is unsure
		}
	}
	wrote = true
	if writeData {
		put(pc.i)
	}
	for j := range v.m {
		if present[j] {
			put(v.k + j)
		}
	}
	// A shard the row's read found gone may be a column being rebuilt
	// (pool.Region.RegrantColumn: not read, written): it takes the
	// piece too, so that a row rebuilt before this write does not miss
	// it (RebuildRows). The switch refuses the write to a column that is
	// only lost (wire.StatusLost). A column being rebuilt that fails to
	// take it is reported lost again: its rebuild must start over.
	for _, s := range missing {
		_, err := v.r.WriteAtContext(ctx, shards[s], int64(v.ShardAddr(pc.row, s, pc.w)))
		switch {
		case err == nil || errors.Is(err, pool.ErrDegraded) || errors.Is(err, wire.StatusLost):
			// (The switch reports a write to a column being rebuilt
			// degraded.)
		case ctx.Err() != nil:
			werrs = append(werrs, fmt.Errorf("shard %d: %w", s, err))
		default:
			if merr := v.r.MarkColumnLost(ctx, s); merr != nil {
				werrs = append(werrs, fmt.Errorf("shard %d: %w", s, errors.Join(err, merr)))
				lost = v.m + 1 // a column being rebuilt may miss the write
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return wrote, errors.Join(append(werrs, err)...)
	}
	if lost > v.m {
		return wrote, fmt.Errorf("ec: row %d: the degraded write failed: %w", pc.row, errors.Join(werrs...))
	}
	return wrote, nil
}
