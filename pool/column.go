package pool

import "context"

// Columns of a region with one copy whose client keeps the redundancy
// itself (package pool/ec): the switch has no other copy to rebuild
// them from.

// MarkColumnLost tells the switch that column c of r missed writes (the
// client wrote around it): the switch refuses accesses to it
// (wire.StatusLost) until it is restored.
func (r *Region) MarkColumnLost(ctx context.Context, c int) error {
	return r.c.ep.PoolColumnLost(ctx, r.c.sw, r.spec.Region, r.key, c, r.c.opts.Fabric)
}

// RegrantColumn has lost column c of r granted again, zeroed, to its
// memory node, and returns once writes to it are forwarded; reads of it
// are refused until RestoreColumn.
func (r *Region) RegrantColumn(ctx context.Context, c int) error {
	return r.c.ep.PoolColumnGrant(ctx, r.c.sw, r.spec.Region, r.key, c, r.c.opts.Fabric)
}

// RestoreColumn makes column c of r, regranted and rewritten, serve
// reads again.
func (r *Region) RestoreColumn(ctx context.Context, c int) error {
	return r.c.ep.PoolColumnRestored(ctx, r.c.sw, r.spec.Region, r.key, c, r.c.opts.Fabric)
}
