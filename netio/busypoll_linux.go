//go:build linux

package netio

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// busyCheckEvery is how long the machine's run queue sample (see
// machineOversubscribed) is reused before it is read again.
const busyCheckEvery = 10 * time.Millisecond

// oversubscribed is machineOversubscribed; tests replace it.
var oversubscribed = machineOversubscribed

var (
	loadavgOnce sync.Once
	loadavgFD   = -1
	// busySample is the last sample: the monotonic time it was taken (ns
	// since busyEpoch) << 1 | 1 if the machine was oversubscribed then.
	busySample atomic.Int64
	busyEpoch  = time.Now()
)

// machineOversubscribed reports whether more threads are runnable on the
// machine than it has CPUs (the running field of /proc/loadavg), in which
// case spinning takes a CPU from a process that has work. The answer is
// sampled at most every busyCheckEvery by all conns of the process; if
// /proc/loadavg cannot be read, the machine counts as oversubscribed
// (no spinning).
func machineOversubscribed() bool {
	now := int64(time.Since(busyEpoch))
	s := busySample.Load()
	if s != 0 && now-s>>1 < int64(busyCheckEvery) {
		return s&1 == 1
	}
	over := runnable() > runtime.NumCPU()
	v := now << 1
	if over {
		v |= 1
	}
	busySample.Store(max(v, 2))
	return over
}

// runnable returns the number of runnable threads on the machine, or a
// number above any CPU count if it cannot tell.
func runnable() int {
	loadavgOnce.Do(func() {
		if fd, err := unix.Open("/proc/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			loadavgFD = fd
		}
	})
	const unknown = 1 << 30
	if loadavgFD < 0 {
		return unknown
	}
	var buf [128]byte
	n, err := unix.Pread(loadavgFD, buf[:], 0)
	if err != nil || n <= 0 {
		return unknown
	}
	// "0.78 2.03 2.36 1/79 27166": the fourth field is running/total.
	f := bytes.Fields(buf[:n])
	if len(f) < 4 {
		return unknown
	}
	run, _, ok := bytes.Cut(f[3], []byte("/"))
	if !ok {
		return unknown
	}
	v, err := strconv.Atoi(string(run))
	if err != nil {
		return unknown
	}
	return v
}

const busyPollSupported = true
