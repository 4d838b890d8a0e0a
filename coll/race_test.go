//go:build race

package coll

// raceEnabled: the race detector slows the transport ~30x; the figure
// tests, which move 16 MiB per rank through the simulator, skip under it.
const raceEnabled = true
