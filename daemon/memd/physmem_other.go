//go:build !linux

package memd

// physicalMemory reports the machine's RAM as unknown: Start skips the
// check of the regions' size against it on systems other than Linux.
func physicalMemory() (int64, bool) { return 0, false }

// availableMemory reports the available memory as unknown on systems
// other than Linux.
func availableMemory() (int64, bool) { return 0, false }
