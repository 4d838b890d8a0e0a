//go:build race

package bench

// raceEnabled: TestSuiteDDPTestbed skips under the race detector (it
// builds the C library, whose Go side the race detector would not see
// anyway); `make norace` runs it.
const raceEnabled = true
