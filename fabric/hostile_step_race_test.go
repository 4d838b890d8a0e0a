//go:build race

package fabric_test

import "time"

// hostileStepCPU bounds the CPU time of one Step of a hostile datagram
// under the race detector, which slows the code down about tenfold; the
// pass without it holds Steps to a millisecond.
const hostileStepCPU = 10 * time.Millisecond

// hostileRounds is the rounds of TestSimHostileFabric (6000 hostile
// datagrams each).
const hostileRounds = 6
