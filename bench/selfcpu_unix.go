//go:build unix

package bench

import (
	"syscall"
	"time"
)

// rusageCPU is this process's CPU time, user and system, as getrusage
// reports it (microseconds).
func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // RUSAGE_SELF with a valid pointer cannot fail
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
