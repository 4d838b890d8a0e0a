package ec

import (
	"context"
	"errors"
	"fmt"

	"github.com/ndma/ndma/wire"
)

// Writing with shards missing. A chain needs every shard it visits, so
// a piece whose chain fails (a memory node of its row dead, or its
// column lost) is rewritten from the data instead: the row's bytes of
// the piece are read from every shard, the data shards that do not
// answer are reconstructed, the piece's data shard takes the new bytes,
// the parity is encoded on this host, and the piece's data shard and
// every parity shard that answered are written whole. The shards written
// around miss the write: before writing around one, the switch is told
// its column is lost (pool.Region.MarkColumnLost), so that no reader
// reads it stale when its node answers again; Rebuild restores it.
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

// readRow reads the bytes [w, w+n) of every shard of row row into shards
// (nil for those that do not answer). It returns the shards that did not
// answer and their errors.
func (v *Volume) readRow(ctx context.Context, row, w, n uint64, shards [][]byte) ([]int, []error) {
	var missing []int
	var errs []error
	for s := range shards {
		shards[s] = nil
		b := make([]byte, n)
		if _, err := v.r.ReadAtContext(ctx, b, int64(v.ShardAddr(row, s, w))); err != nil {
			missing = append(missing, s)
			errs = append(errs, fmt.Errorf("shard %d: %w", s, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		shards[s] = b
	}
	return missing, errs
}

// rewrite writes piece pc (data) on the degraded path.
func (v *Volume) rewrite(ctx context.Context, pc piece, data []byte) error {
	shards := make([][]byte, v.k+v.m)
	missing, errs := v.readRow(ctx, pc.row, pc.w, pc.n, shards)
	if ctx.Err() != nil {
		return errors.Join(errs...)
	}
	if len(missing) > v.m {
		return fmt.Errorf("%w: row %d: %d of %d shards answer: %w", ErrUnreadable, pc.row, v.k+v.m-len(missing), v.k+v.m, errors.Join(errs...))
	}
	for i, s := range missing {
		if !errors.Is(errs[i], wire.StatusLost) {
			if err := v.r.MarkColumnLost(ctx, s); err != nil {
				return fmt.Errorf("ec: row %d: writing around shard %d: %w", pc.row, s, err)
			}
		}
	}
	writeData := shards[pc.i] != nil
	for i := range v.k {
		if i != pc.i && shards[i] == nil {
			if err := v.enc.ReconstructData(shards); err != nil {
				return fmt.Errorf("ec: row %d: %w", pc.row, err)
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
		return fmt.Errorf("ec: row %d: %w", pc.row, err)
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
		if ctx.Err() == nil && !errors.Is(err, wire.StatusLost) {
			if merr := v.r.MarkColumnLost(ctx, s); merr != nil {
				werrs = append(werrs, merr)
				lost = v.m + 1 // a stale shard the switch may still serve
			}
		}
	}
	if writeData {
		put(pc.i)
	}
	for j := range v.m {
		if present[j] {
			put(v.k + j)
		}
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(append(werrs, err)...)
	}
	if lost > v.m {
		return fmt.Errorf("%w: row %d: written to %d of %d shards: %w", ErrUnreadable, pc.row, v.k+v.m-lost, v.k+v.m, errors.Join(werrs...))
	}
	return nil
}
