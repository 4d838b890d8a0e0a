package endpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Columns of a region with one copy, for a client that codes the region
// itself (package pool/ec): the switch keeps no other copy of such a
// column, so the client reports the ones it wrote around and rewrites
// them.

// PoolColumnLost tells the switch that column of region (key) missed
// writes: from now on it refuses accesses to it (wire.StatusLost) until
// the column is restored.
func (ep *Endpoint) PoolColumnLost(ctx context.Context, sw string, region uint32, key uint64, column int, opts FabricOptions) error {
	return ep.poolColumn(ctx, sw, ctrl.PoolColumnLost, region, key, column, opts)
}

// PoolColumnGrant has lost column of region (key) granted again, zeroed,
// to its memory node, and returns once the switch forwards writes to it
// (reads stay refused until PoolColumnRestored). It fails with
// wire.StatusMemberDead while the column's node is dead, and with
// wire.StatusBadOperand for a column that is not lost.
func (ep *Endpoint) PoolColumnGrant(ctx context.Context, sw string, region uint32, key uint64, column int, opts FabricOptions) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := ep.poolColumn(ctx, sw, ctrl.PoolColumnGrant, region, key, column, opts)
		if !errors.Is(err, wire.StatusBusy) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}

// PoolColumnRestored makes column of region (key), granted by
// PoolColumnGrant and rewritten, serve reads again.
func (ep *Endpoint) PoolColumnRestored(ctx context.Context, sw string, region uint32, key uint64, column int, opts FabricOptions) error {
	return ep.poolColumn(ctx, sw, ctrl.PoolColumnRestored, region, key, column, opts)
}

func (ep *Endpoint) poolColumn(ctx context.Context, sw string, t ctrl.Type, region uint32, key uint64, column int, opts FabricOptions) error {
	ap, err := parseSwitch(sw)
	if err != nil {
		return err
	}
	if column < 0 || column > 0xffff {
		return fmt.Errorf("endpoint: %v: column %d: %w", t, column, ErrBadOp)
	}
	if _, err := ep.controlPool(ctx, ap, &ctrl.Msg{Type: t, Region: region, Key: key, Node: uint16(column)}, &opts); err != nil {
		return fmt.Errorf("endpoint: %v of region %d column %d: %w", t, region, column, err)
	}
	return nil
}
