package ec

import (
	"context"
	"errors"
	"fmt"
)

// ReadAt reads len(p) bytes at volume offset off. The data shards of a
// row lie side by side in the region, so each row's part is one region
// read (its stripes read in parallel); when it fails, each piece is read
// from its data shard, and a piece whose shard cannot be read (any error
// but ctx's end) is rebuilt from k shards of its row that can. It
// returns how many pieces had to be rebuilt.
func (v *Volume) ReadAt(ctx context.Context, p []byte, off int64) (rebuilt int, err error) {
	ps, err := v.pieces(off, len(p))
	if err != nil {
		return 0, err
	}
	for len(ps) > 0 {
		n := 1 // the pieces of this row
		for n < len(ps) && ps[n].row == ps[0].row {
			n++
		}
		row := ps[:n]
		ps = ps[n:]
		first, last := row[0], row[n-1]
		buf := p[first.off : last.off+int(last.n)]
		_, err := v.r.ReadAtContext(ctx, buf, int64(v.ShardAddr(first.row, first.i, first.w)))
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return rebuilt, err
		}
		for _, pc := range row {
			buf := p[pc.off : pc.off+int(pc.n)]
			_, err := v.r.ReadAtContext(ctx, buf, int64(v.ShardAddr(pc.row, pc.i, pc.w)))
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return rebuilt, err
			}
			if err := v.reconstruct(ctx, pc, buf); err != nil {
				return rebuilt, err
			}
			rebuilt++
		}
	}
	return rebuilt, nil
}

// reconstruct rebuilds piece pc of data shard pc.i into buf from the
// same bytes of other shards of its row: it reads shards until k of
// them answered and decodes.
func (v *Volume) reconstruct(ctx context.Context, pc piece, buf []byte) error {
	shards := make([][]byte, v.k+v.m)
	got, errs, err := v.readOthers(ctx, pc.row, pc.w, pc.n, pc.i, shards)
	if err != nil {
		return err
	}
	if got < v.k {
		return fmt.Errorf("%w: row %d, %d of %d: %w", ErrUnreadable, pc.row, got, v.k, errors.Join(errs...))
	}
	if err := v.enc.ReconstructData(shards); err != nil {
		return fmt.Errorf("ec: row %d: %w", pc.row, err)
	}
	copy(buf, shards[pc.i])
	return nil
}

// readOthers reads bytes [w, w+n) of the shards of row other than skip,
// in column order, into shards (nil for those not read) until k
// answered, and returns how many did and the others' errors; it stops
// at the first error once ctx ended.
func (v *Volume) readOthers(ctx context.Context, row, w, n uint64, skip int, shards [][]byte) (int, []error, error) {
	got := 0
	var errs []error
	for s := range shards {
		shards[s] = nil
		if s == skip || got == v.k {
			continue
		}
		b := make([]byte, n)
		if _, err := v.r.ReadAtContext(ctx, b, int64(v.ShardAddr(row, s, w))); err != nil {
			if ctx.Err() != nil {
				return got, errs, err
			}
			errs = append(errs, fmt.Errorf("shard %d: %w", s, err))
			continue
		}
		shards[s] = b
		got++
	}
	return got, errs, nil
}
