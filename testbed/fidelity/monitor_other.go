//go:build !linux

package fidelity

import (
	"context"
	"errors"
	"time"
)

// DefaultInterval is a Monitor's sampling interval when Start is given
// zero.
const DefaultInterval = 50 * time.Millisecond

// Monitor watches one job on the testbed; outside Linux there is none.
type Monitor struct{}

// Start reports that the monitor needs Linux's /proc.
func Start(ctx context.Context, t Target, interval time.Duration) (*Monitor, error) {
	return nil, errors.New("fidelity: the monitor needs Linux (/proc)")
}

// Stop is never reached outside Linux.
func (m *Monitor) Stop(ctx context.Context) (*Recorder, error) {
	return nil, errors.New("fidelity: the monitor needs Linux (/proc)")
}

// Started is never reached outside Linux.
func (m *Monitor) Started() time.Time { return time.Time{} }
