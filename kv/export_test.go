package kv

import (
	"context"
	"testing"
)

// SimStore and SimClient give the external tests (the front ends over a
// key space on simnet) the simulated store of sim_test.go.
func SimStore(t *testing.T, seed int64, nodes int, l Layout, f func(t *testing.T, client func() *Client)) {
	simStore(t, seed, nodes, l, func(t *testing.T, s *simKV) { f(t, s.client) })
}

// SmallLayout is the small layout of the package's tests.
func SmallLayout() Layout { return testLayout() }

// setBeforeWrite sets o's test hook in its pool writes (nil: none).
func setBeforeWrite(o *Owner, f func(ctx context.Context, off uint64, n int) context.Context) {
	o.mu.Lock()
	o.beforeWrite = f
	o.mu.Unlock()
}
