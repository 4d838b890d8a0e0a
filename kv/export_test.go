package kv

import "testing"

// SimStore and SimClient give the external tests (the front ends over a
// key space on simnet) the simulated store of sim_test.go.
func SimStore(t *testing.T, seed int64, nodes int, l Layout, f func(t *testing.T, client func() *Client)) {
	simStore(t, seed, nodes, l, func(t *testing.T, s *simKV) { f(t, s.client) })
}

// SmallLayout is the small layout of the package's tests.
func SmallLayout() Layout { return testLayout() }
