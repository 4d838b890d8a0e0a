package memd

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

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

// availableMemory is the memory the kernel says is available for new
// allocations without swapping (MemAvailable in /proc/meminfo), in bytes,
// and whether it is known.
func availableMemory() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemAvailable:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil || kb <= 0 || kb > 1<<52 {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}
