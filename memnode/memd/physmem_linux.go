package memd

import "golang.org/x/sys/unix"

// physicalMemory is the machine's total RAM in bytes, and whether it is
// known.
func physicalMemory() (int64, bool) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, false
	}
	total := uint64(si.Totalram) * uint64(si.Unit)
	if total == 0 || total > 1<<62 {
		return 0, false
	}
	return int64(total), true
}
