//go:build race

package secure

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are meaningless under it; `make norace` runs the
// allocation tests without it.
const raceEnabled = true
