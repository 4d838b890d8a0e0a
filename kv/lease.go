package kv

import (
	"errors"
	"time"
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
