//go:build race

package main

// raceEnabled: TestCABI skips under the race detector (it builds the
// library and runs C programs, whose Go side is not instrumented anyway);
// `make norace` runs it.
const raceEnabled = true
