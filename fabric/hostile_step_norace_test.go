//go:build !race

package fabric_test

import "time"

// hostileStepCPU bounds the CPU time of one Step of a hostile datagram.
const hostileStepCPU = time.Millisecond

// hostileRounds is the rounds of TestSimHostileFabric (6000 hostile
// datagrams each).
const hostileRounds = 20
