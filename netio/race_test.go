//go:build race

package netio

// raceEnabled reports whether the race detector is on; it allocates, so
// allocation counts are not meaningful under it (`make norace` runs the
// allocation tests without it).
const raceEnabled = true
