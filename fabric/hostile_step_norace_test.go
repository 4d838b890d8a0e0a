//go:build !race

package fabric_test

import "time"

// hostileStepCPU bounds the CPU time of one Receive of a hostile datagram.
const hostileStepCPU = time.Millisecond

// hostileSeeds is the attacks TestSimHostileFabric runs (seeds 77 on),
// hostileRounds the rounds of each (6000 hostile datagrams a round).
const (
	hostileSeeds  = 8
	hostileRounds = 12
)
