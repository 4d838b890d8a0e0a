package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ndma/ndma/pool"
)

// DefaultLease is OwnerConfig.Lease when zero: four of the endpoint's
// default heartbeat intervals, so three lost answers in a row do not
// stop an owner.
const DefaultLease = time.Second

// FenceMargin is what an owner that registers waits beyond the lease
// before it writes: time for the writes of a previous holder of the
// rank, cut short when its lease ended, to have left the network.
const FenceMargin = 250 * time.Millisecond

// errLeaseLapsed is a write refused or cut short because the owner's
// lease ended.
var errLeaseLapsed = errors.New("kv: the owner's lease lapsed")

// lease returns when the owner's right to write ends, and whether it
// holds it at now: it holds the rank, its fence wait is over, and the
// switch confirmed its membership less than Lease ago.
//
// Why two holders never write at once: the switch lets a process take a
// rank only after counting the previous holder dead, at least its
// heartbeat timeout after the last heartbeat it answered, or after the
// switch restarted; either way after that heartbeat's send time t0
// (Service.Confirmed). The previous holder writes until t0 + Lease at
// the latest (each write's context ends there); the new holder writes
// from the switch's answer to its registration plus Lease plus
// FenceMargin, which is later than t0 + Lease + FenceMargin.
func (o *Owner) lease(now time.Time) (time.Time, bool) {
	o.mu.Lock()
	svc, activeAt := o.svc, o.activeAt
	o.mu.Unlock()
	if svc == nil || now.Before(activeAt) {
		return time.Time{}, false
	}
	end := svc.Confirmed().Add(o.cfg.Lease)
	return end, now.Before(end)
}

// generation is the owner's current registration.
func (o *Owner) generation() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gen
}

// Fencing: the lease keeps two holders of a rank from writing at once
// as long as no process pauses between its lease check and its write
// reaching the memory nodes for longer than Lease plus FenceMargin. The
// fence closes that gap. Before a holder's first write it raises the
// rank's fence (fence id: the rank) on every memory node of the key
// space to a token higher than every earlier holder's, and every pool
// write it sends carries that token: the switch and the memory nodes
// refuse the writes of an earlier holder however late they arrive.
//
// A token is a counter in its high 32 bits and the low 32 bits of the
// owner's incarnation in its low ones, so two processes that pick the
// same counter at once still hold different tokens. An owner starts at
// counter 1; a raise refused for a higher token tells it the counter to
// go past.

// fenceRaises bounds the raises an owner tries in a row, each past the
// highest token the last refusal reported.
const fenceRaises = 4

// errFenceExhausted is a fence whose counter can go no higher.
var errFenceExhausted = errors.New("kv: the rank's fence is at its highest token")

// raiseFence raises the owner's fence for its current registration, if
// it has not yet. The caller holds shard sh's lock (the raise precedes
// the shard's reload); it checked the lease.
//
// One handler raises at a time (raiseMu), the others wait for it and
// then find the fence raised: a raise is several pool operations, one
// per memory node, and handlers raising at once, woken by one lease end
// inside it, would go on in the Go scheduler's order on a simulated
// network (their gates order them only between the owner's own
// operations).
func (o *Owner) raiseFence(sh *shard) error {
	if o.fenceRaised() {
		return nil
	}
	o.raiseMu <- struct{}{}
	defer func() { <-o.raiseMu }()
	sh.gate.Pass()
	o.mu.Lock()
	gen, done, ctr := o.gen, o.fencedWritesLocked() != nil, o.fenceCtr
	o.mu.Unlock()
	if done {
		return nil
	}
	for range fenceRaises {
		end, ok := o.lease(time.Now())
		if !ok {
			return errLeaseLapsed
		}
		if ctr >= 1<<32-1 {
			return errFenceExhausted
		}
		ctr++
		f := pool.Fence{ID: uint32(o.cfg.Rank), Token: ctr<<32 | o.inc&(1<<32-1)}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		high, err := o.mem.raiseFence(ctx, f)
		cancel()
		sh.gate.Pass()
		o.mu.Lock()
		o.fenceCtr = max(o.fenceCtr, ctr, high>>32)
		ctr = o.fenceCtr
		regen := o.gen != gen // registered again meanwhile: raise again
		if err == nil && !regen {
			o.fence, o.fenceGen, o.wreg = f, gen, o.mem.fenced(f)
		}
		o.mu.Unlock()
		if err == nil && regen {
			return errLeaseLapsed
		}
		if err == nil {
			o.log.Info("kv: owner raised its fence", "space", o.cfg.Space, "rank", o.cfg.Rank, "token", f.Token)
			return nil
		}
		if !errors.Is(err, pool.ErrFenced) {
			return err
		}
	}
	return fmt.Errorf("kv: owner %d of %q: the fence kept a higher token through %d raises", o.cfg.Rank, o.cfg.Space, fenceRaises)
}

// fenced records a write refused for its fence: the owner's token is
// no longer the fence's. Its shards are read again, after a new raise,
// before its next write (if it still holds the rank; if not, its lease
// stops it).
func (o *Owner) fenced(err error) {
	o.mu.Lock()
	o.stats.Fenced++
	o.fenceGen, o.wreg = 0, nil
	o.gen++ // what the shards were loaded under is stale
	o.mu.Unlock()
	o.log.Warn("kv: a write was refused for its fence: a newer holder raised it", "space", o.cfg.Space, "rank", o.cfg.Rank, "err", err)
}

// fenceRaised reports whether the owner's fence is raised for its
// current registration.
func (o *Owner) fenceRaised() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.fencedWritesLocked() != nil
}

// fencedWritesLocked is the key space's view whose writes carry the
// owner's token, or nil while no raise holds for its current
// registration. The caller holds mu.
func (o *Owner) fencedWritesLocked() *store {
	if o.wreg == nil || o.fenceGen != o.gen {
		return nil
	}
	return o.wreg
}
