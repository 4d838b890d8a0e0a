//go:build race

package fabric_test

import "time"

// hostileStepCPU bounds the CPU time of one Receive of a hostile datagram
// under the race detector, which slows the code down about tenfold; the
// pass without it holds Steps to a millisecond.
const hostileStepCPU = 10 * time.Millisecond

// hostileSeeds is the attacks TestSimHostileFabric runs (seeds 77 on),
// hostileRounds the rounds of each (6000 hostile datagrams a round): under
// the race detector, the first half of the attacks, and a round with each
// member multicasting; `make norace` runs all of them in full.
const (
	hostileSeeds  = 4
	hostileRounds = 3
)
