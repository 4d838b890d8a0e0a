package ec

import (
	"context"
	"errors"
	"fmt"

	"github.com/ndma/ndma/wire"
)

// Pieces left unsure. A chain cut short (this host's link, the switch
// restarting, the write's context ending) may have added its change to
// some parity shards and not to the data shard; when the degraded
// rewrite cannot put the row right either, the piece's parity no longer
// matches its data, which a later chain write of the same bytes would
// carry on (it adds changes, it does not recompute). The Volume keeps
// such pieces, and the next write to their row first recomputes their
// parity from the data (the writer of a row is its only writer, so this
// races nothing). Until then only a reconstruction through those bytes
// is affected: it fails its reader's checks, or returns what the code
// computes, but never touches the data shards.

// maxUnsure bounds the unsure pieces kept; beyond it the oldest is
// dropped (its parity stays unsure until its bytes are written again).
const maxUnsure = 1024

// markUnsure records piece pc as unsure.
func (v *Volume) markUnsure(pc piece) {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	if len(v.st.unsure) == maxUnsure {
		v.st.unsure = v.st.unsure[1:]
	}
	v.st.unsure = append(v.st.unsure, pc)
}

// takeUnsure removes and returns the unsure pieces of row.
func (v *Volume) takeUnsure(row uint64) []piece {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	var out []piece
	keep := v.st.unsure[:0]
	for _, pc := range v.st.unsure {
		if pc.row == row {
			out = append(out, pc)
		} else {
			keep = append(keep, pc)
		}
	}
	clear(v.st.unsure[len(keep):])
	v.st.unsure = keep
	return out
}

// Scrub recomputes from the data the parity of every row that holds a
// byte of [off, off+n) of the volume, one row at a time, and returns the
// rows it repaired. It is for a writer that takes over rows from
// another process, which may have died in the middle of a chain and
// whose list of unsure pieces died with it: until the parity matches
// the data again, a reconstruction of the row (one of its data shards
// lost) would return wrong bytes for what was written there before. A
// row that cannot be repaired now (a data shard unreachable) is recorded
// unsure, repaired before this Volume writes it (see maxUnsure), and the
// error says so. The caller must be the rows' only writer meanwhile.
func (v *Volume) Scrub(ctx context.Context, off, n int64, each func()) (int, error) {
	if n == 0 {
		return 0, nil
	}
	if off < 0 || n < 0 || off > v.Size() || n > v.Size()-off {
		return 0, fmt.Errorf("ec: scrub of %d bytes at %d in a volume of %d: %w", n, off, v.Size(), wire.StatusOutOfBounds)
	}
	rowBytes := int64(v.k) * int64(v.s)
	var errs []error
	done := 0
	for row := off / rowBytes; row <= (off+n-1)/rowBytes; row++ {
		pc := piece{row: uint64(row), w: 0, n: v.s}
		err := v.repair(ctx, pc)
		if each != nil {
			each()
		}
		if err != nil {
			v.markUnsure(pc)
			errs = append(errs, err)
			continue
		}
		done++
	}
	if len(errs) > 0 {
		return done, fmt.Errorf("ec: scrub: %d rows left unsure: %w", len(errs), errors.Join(errs...))
	}
	return done, nil
}

// Unsure returns how many pieces' parity this Volume knows may not match
// their data.
func (v *Volume) Unsure() int {
	v.st.mu.Lock()
	defer v.st.mu.Unlock()
	return len(v.st.unsure)
}

// repairRow recomputes the parity of the unsure pieces of row from the
// data; a piece that cannot be repaired now is kept.
func (v *Volume) repairRow(ctx context.Context, row uint64) {
	for _, pc := range v.takeUnsure(row) {
		if err := v.repair(ctx, pc); err != nil {
			v.markUnsure(pc)
		}
	}
}

// repair recomputes the parity of the bytes of piece pc from the data
// shards of its row, which must all answer.
func (v *Volume) repair(ctx context.Context, pc piece) error {
	shards := make([][]byte, v.k+v.m)
	for i := range v.k {
		shards[i] = make([]byte, pc.n)
		if _, err := v.r.ReadAtContext(ctx, shards[i], int64(v.ShardAddr(pc.row, i, pc.w))); err != nil {
			return fmt.Errorf("ec: row %d shard %d: %w", pc.row, i, err)
		}
	}
	for j := range v.m {
		shards[v.k+j] = make([]byte, pc.n)
	}
	if err := v.enc.Encode(shards); err != nil {
		return fmt.Errorf("ec: row %d: %w", pc.row, err)
	}
	var errs []error
	for j := range v.m {
		s := v.k + j
		if _, err := v.r.WriteAtContext(ctx, shards[s], int64(v.ShardAddr(pc.row, s, pc.w))); err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("ec: row %d shard %d: %w", pc.row, s, err))
		}
	}
	return errors.Join(errs...)
}
