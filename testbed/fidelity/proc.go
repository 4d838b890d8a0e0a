package fidelity

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of the CPU times in /proc/stat and
// /proc/PID/stat: 100 on every Linux architecture Go supports.
const ClockTicks = 100

// CPUTimes are the CPU times of /proc/stat's "cpu" line, all CPUs summed,
// in USER_HZ ticks.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is every field summed: the CPU time that passed on all CPUs.
// (Guest time is part of User already.)
func (c CPUTimes) Total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// Busy is the time the CPUs worked: user, nice, system, irq and softirq.
func (c CPUTimes) Busy() uint64 { return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ }

// sub returns c - o field by field, zero where a counter went back.
func (c CPUTimes) sub(o CPUTimes) CPUTimes {
	d := func(a, b uint64) uint64 { return a - min(a, b) }
	return CPUTimes{d(c.User, o.User), d(c.Nice, o.Nice), d(c.System, o.System), d(c.Idle, o.Idle),
		d(c.IOWait, o.IOWait), d(c.IRQ, o.IRQ), d(c.SoftIRQ, o.SoftIRQ), d(c.Steal, o.Steal)}
}

// Stat is what the monitor reads from /proc/stat.
type Stat struct {
	CPU CPUTimes
	// HasSteal is whether the kernel reports stolen time (the eighth
	// field of the "cpu" line).
	HasSteal bool
	// CPUs is the number of "cpuN" lines: the CPUs online.
	CPUs int
	// ProcsRunning is the number of runnable tasks at the time of the
	// reading, the reader included.
	ProcsRunning int
}

// ParseStat parses the contents of /proc/stat.
func ParseStat(b []byte) (Stat, error) {
	var st Stat
	cpuLine := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // the intr line is long
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "cpu":
			if len(f) < 8 {
				return Stat{}, fmt.Errorf("/proc/stat: cpu line with %d fields, want at least 8", len(f))
			}
			var v [8]uint64
			n := min(len(f)-1, 8)
			for i := range n {
				x, err := strconv.ParseUint(f[i+1], 10, 64)
				if err != nil {
					return Stat{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
				}
				v[i] = x
			}
			st.CPU = CPUTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
			st.HasSteal = n == 8
			cpuLine = true
		case strings.HasPrefix(f[0], "cpu"):
			st.CPUs++
		case f[0] == "procs_running" && len(f) == 2:
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return Stat{}, fmt.Errorf("/proc/stat: procs_running: %w", err)
			}
			st.ProcsRunning = n
		}
	}
	if err := sc.Err(); err != nil {
		return Stat{}, fmt.Errorf("/proc/stat: %w", err)
	}
	if !cpuLine || st.CPUs == 0 {
		return Stat{}, errors.New("/proc/stat: no cpu lines")
	}
	return st, nil
}

// ParseProcStat parses the contents of /proc/PID/stat: the process's
// user+system time and that of its waited-for children, in USER_HZ ticks.
func ParseProcStat(b []byte) (self, children uint64, err error) {
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("no command name")
	}
	// After ")": state (field 3) ... utime (14), stime, cutime, cstime (17).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("%d fields, want at least 17", len(f)+2)
	}
	var t [4]uint64
	for k := range t {
		v, err := strconv.ParseUint(f[11+k], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("field %d: %w", 14+k, err)
		}
		t[k] = v
	}
	return t[0] + t[1], t[2] + t[3], nil
}

// ProcessCPU reads /proc/<pid>/stat ("self" for this process) and returns
// the process's user+system time and that of its waited-for children, in
// seconds, to one clock tick.
func ProcessCPU(pid string) (self, children float64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, err
	}
	s, c, err := ParseProcStat(b)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return float64(s) / ClockTicks, float64(c) / ClockTicks, nil
}

// Iface is one interface's counters from /proc/net/dev.
type Iface struct {
	RxBytes, TxBytes uint64
}

// ParseNetDev parses the contents of /proc/net/dev (or /proc/PID/net/dev,
// the interfaces of PID's network namespace): each interface's byte
// counters by name.
func ParseNetDev(b []byte) (map[string]Iface, error) {
	ifs := make(map[string]Iface)
	for n, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || n < 2 { // two header lines
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			return nil, fmt.Errorf("net/dev: %s: %d counters, want 16", strings.TrimSpace(name), len(f))
		}
		rx, err1 := strconv.ParseUint(f[0], 10, 64)
		tx, err2 := strconv.ParseUint(f[8], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("net/dev: %s: %w", strings.TrimSpace(name), err)
		}
		ifs[strings.TrimSpace(name)] = Iface{RxBytes: rx, TxBytes: tx}
	}
	if len(ifs) == 0 {
		return nil, errors.New("net/dev: no interfaces")
	}
	return ifs, nil
}
