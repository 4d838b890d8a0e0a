package durable

import (
	"errors"
	"fmt"
	"time"
)

// Sync is when the bytes clients write reach the disk.
type Sync struct {
	// Every, when not zero, flushes the whole memory in the background
	// that often: a write is answered once it is in memory on every
	// copy, and is on disk within Every. Zero (SyncAlways) flushes the
	// bytes each write touched before the node answers it: a write
	// answered is on disk on every copy.
	Every time.Duration
}

// SyncAlways is the default policy: every write on disk before its answer.
var SyncAlways = Sync{}

// MinSyncEvery bounds an interval policy from below.
const MinSyncEvery = time.Millisecond

// ErrBadSync is wrapped by ParseSync's errors.
var ErrBadSync = errors.New("bad sync policy")

// ParseSync reads a policy: "always", or an interval such as "100ms"
// (at least MinSyncEvery).
func ParseSync(s string) (Sync, error) {
	if s == "always" {
		return SyncAlways, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return Sync{}, fmt.Errorf("%w: %q: want \"always\" or an interval such as 100ms", ErrBadSync, s)
	}
	if d < MinSyncEvery {
		return Sync{}, fmt.Errorf("%w: %v: an interval must be at least %v", ErrBadSync, d, MinSyncEvery)
	}
	return Sync{Every: d}, nil
}

// String is the policy as ParseSync reads it.
func (s Sync) String() string {
	if s.Every == 0 {
		return "always"
	}
	return s.Every.String()
}
