package testbed

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat is what the testbed needs from /proc/PID/stat.
type procStat struct {
	state byte   // R, S, D, Z, …
	start uint64 // start time, in clock ticks after boot
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// "pid (comm) state ppid …": comm may hold spaces and parentheses,
	// so the fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: starttime: %w", pid, err)
	}
	return procStat{state: f[0][0], start: start}, nil
}

// processStart returns the start time of pid, in clock ticks after boot,
// or 0 if it cannot be read.
func processStart(pid int) uint64 {
	ps, err := readProcStat(pid)
	if err != nil {
		return 0
	}
	return ps.start
}

// alive reports whether pid is a running process (not a zombie) and, if
// start is not zero, the one that started at that time.
func alive(pid int, start uint64) bool {
	if pid <= 1 {
		return false
	}
	ps, err := readProcStat(pid)
	if err != nil {
		return false
	}
	if ps.state == 'Z' || ps.state == 'X' || ps.state == 'x' {
		return false
	}
	return start == 0 || ps.start == start
}

// Grace periods of killProcesses.
const (
	termGrace = 3 * time.Second // after SIGTERM, before SIGKILL
	killGrace = 2 * time.Second // after SIGKILL, before giving up
)

// killProcesses ends the processes pids maps to their start times (0:
// unknown): SIGTERM, then SIGKILL to those still alive after termGrace. It
// never signals pid 1 or the calling process. It returns an error naming
// the processes still alive after killGrace more.
func killProcesses(ctx context.Context, pids map[int]uint64) error {
	self := os.Getpid()
	live := func() []int {
		var l []int
		for pid, start := range pids {
			if pid > 1 && pid != self && alive(pid, start) {
				l = append(l, pid)
			}
		}
		slices.Sort(l)
		return l
	}
	for _, sig := range []struct {
		sig   syscall.Signal
		grace time.Duration
	}{{syscall.SIGTERM, termGrace}, {syscall.SIGKILL, killGrace}} {
		pending := live()
		if len(pending) == 0 {
			return nil
		}
		for _, pid := range pending {
			// ESRCH: it exited since; anything else shows below.
			_ = syscall.Kill(pid, sig.sig)
		}
		if waitFor(ctx, sig.grace, func() bool { return len(live()) == 0 }) {
			return nil
		}
	}
	if l := live(); len(l) > 0 {
		return fmt.Errorf("processes %v still alive after SIGKILL", l)
	}
	return nil
}

// pollInterval is how often waitFor checks its condition.
const pollInterval = 10 * time.Millisecond

// waitFor polls cond until it holds (true), timeout passes or ctx ends
// (false).
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}

// udpBound reports whether a UDP socket is bound to port in pid's network
// namespace, from /proc/PID/net/udp (which shows the namespace of PID).
func udpBound(pid, port int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/udp")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	want := fmt.Sprintf(":%04X", port)
	for sc.Scan() {
		// "  sl  local_address rem_address   st …"; local is "0100000A:1D2F".
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && strings.HasSuffix(fields[1], want) {
			return true
		}
	}
	return false
}

// autogroupEnabled is the kernel's switch for autogroup scheduling.
const autogroupEnabled = "/proc/sys/kernel/sched_autogroup_enabled"

// autogroupOf returns the autogroup of pid ("/autogroup-83"), the first
// field of /proc/PID/autogroup, or "" if it cannot be read.
func autogroupOf(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/autogroup")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// SchedulingApart reports whether the kernel's autogroup scheduling keeps
// this process (and so the ranks Run starts, which stay in its session)
// apart from the testbed's live daemons, and a line naming the groups. A
// session is an autogroup: the scheduler shares the CPU between groups
// first, and a switch in a group of its own wakes for every packet
// instead of taking several at once, for a third more switch CPU and
// slower in-network collectives on a machine with fewer cores than
// processes. Up keeps the daemons in its caller's session; two separate
// sudo commands may each run in a session of their own.
func (st *State) SchedulingApart() (string, bool) {
	if b, err := os.ReadFile(autogroupEnabled); err != nil || strings.TrimSpace(string(b)) != "1" {
		return "", false
	}
	self := autogroupOf("self")
	if self == "" {
		return "", false
	}
	for _, d := range st.Daemons {
		if !alive(d.PID, d.Start) {
			continue
		}
		if g := autogroupOf(strconv.Itoa(d.PID)); g != "" && g != self {
			return fmt.Sprintf("the %s daemon (pid %d) runs in scheduling group %s and this session in %s", d.Role, d.PID, g, self), true
		}
	}
	return "", false
}
