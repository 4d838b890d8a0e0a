//go:build race

package coll

// raceEnabled: the race detector slows the transport ~30x; the figure,
// scale, tuner and large-transfer tests skip under it and TestSimMatrix
// runs fewer rank counts. `make norace` runs them in full without it.
const raceEnabled = true
