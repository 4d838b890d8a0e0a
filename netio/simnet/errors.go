package simnet

import (
	"errors"
	"fmt"
	"time"
)

// Reasons a run stops without its condition met; a *RunError wraps one of
// them, so callers test with errors.Is.
var (
	// ErrTimeout: virtual time reached the run's limit.
	ErrTimeout = errors.New("simnet: timeout")
	// ErrDeadlock: no events remain, so the condition can never become
	// true.
	ErrDeadlock = errors.New("simnet: deadlock, no events left")
	// ErrLivelock: more than MaxEventsPerInstant events ran without
	// virtual time advancing (typically a node whose Poll keeps asking to
	// be polled again at the current time).
	ErrLivelock = errors.New("simnet: livelock, virtual time stopped advancing")
)

// MaxEventsPerInstant is how many consecutive events may run at one virtual
// instant before RunUntil and RunFor report ErrLivelock.
const MaxEventsPerInstant = 1 << 22

// RunError is returned by RunUntil when it stops without its condition met.
// It names the virtual time and the seed, so a failing test can be replayed.
type RunError struct {
	Err     error         // ErrTimeout, ErrDeadlock or ErrLivelock
	Time    time.Time     // virtual time when the run stopped
	Elapsed time.Duration // virtual time since the start of the run
	Seed    int64         // the network's seed
	Pending int           // events still queued
}

func (e *RunError) Error() string {
	return fmt.Sprintf("%v at virtual time +%v (%v into the run, %d events pending), seed %d",
		e.Err, e.Time.Sub(Epoch()), e.Elapsed, e.Pending, e.Seed)
}

// Unwrap returns the reason, one of ErrTimeout, ErrDeadlock, ErrLivelock.
func (e *RunError) Unwrap() error { return e.Err }
