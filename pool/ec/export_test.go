package ec

import (
	"context"

	"github.com/ndma/ndma/reduce/gf256"
)

// MarkUnsure records the bytes [off, off+n) of the volume as written by
// a chain cut short, for the tests of the repair.
func (v *Volume) MarkUnsure(off int64, n int) {
	ps, err := v.pieces(off, n)
	if err != nil {
		panic(err)
	}
	for _, pc := range ps {
		v.markUnsure(pc)
	}
}

// CutWrite writes p at off as a chain cut short after its first hops
// parity hops would leave it (those parity shards took the change, the
// data shard did not: DiedWrite), then as WriteAt goes on from there:
// the degraded rewrite of each piece.
func (v *Volume) CutWrite(ctx context.Context, p []byte, off int64, hops int) error {
	if err := v.DiedWrite(ctx, p, off, hops); err != nil {
		return err
	}
	ps, err := v.pieces(off, len(p))
	if err != nil {
		return err
	}
	for _, pc := range ps {
		if err := v.rewrite(ctx, pc, p[pc.off:pc.off+int(pc.n)], true); err != nil {
			return err
		}
	}
	return nil
}

// DiedWrite applies to the parity shards of the first hops the change
// writing p at off would make, and nothing else: what a writer that died
// in the middle of its chains leaves behind (the data shards unchanged,
// nothing recorded unsure in any Volume).
func (v *Volume) DiedWrite(ctx context.Context, p []byte, off int64, hops int) error {
	ps, err := v.pieces(off, len(p))
	if err != nil {
		return err
	}
	for _, pc := range ps {
		change := make([]byte, pc.n)
		if _, err := v.r.ReadAtContext(ctx, change, int64(v.ShardAddr(pc.row, pc.i, pc.w))); err != nil {
			return err
		}
		for i := range change {
			change[i] ^= p[pc.off+i]
		}
		for j := range hops {
			par := make([]byte, pc.n)
			at := int64(v.ShardAddr(pc.row, v.k+j, pc.w))
			if _, err := v.r.ReadAtContext(ctx, par, at); err != nil {
				return err
			}
			gf256.MulAdd(v.coef[j][pc.i], change, par)
			if _, err := v.r.WriteAtContext(ctx, par, at); err != nil {
				return err
			}
		}
	}
	return nil
}
