package fidelity

// Following the testbed's daemons over a job when one is killed and
// started again: each daemon is a sequence of processes, each counted
// from its first reading (or from its start, if it started after the
// monitor) to its last.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rescanEvery is how often a Monitor looks for a missing daemon's
// process again while it has found none (at most: also at the end, and
// at once when a process it followed is gone).
const rescanEvery = 500 * time.Millisecond

// procFS reads the processes of a /proc tree: the machine's, or one a
// test made.
type procFS struct {
	root string
	// netns returns the name of the network namespace ns as a process's
	// ns/net link names it ("net:[4026532281]").
	netns func(ns string) (string, error)
}

// pidStat is what the monitor takes from /proc/PID/stat.
type pidStat struct {
	state byte
	ppid  int
	cpu   float64 // user+system seconds, over the process's life
	start uint64  // start time, in clock ticks after boot
}

// parsePidStat parses the contents of /proc/PID/stat.
func parsePidStat(b []byte) (pidStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return pidStat{}, errors.New("no command name")
	}
	// After ")": state (field 3), ppid (4) ... utime (14), stime (15) ...
	// starttime (22).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return pidStat{}, fmt.Errorf("%d fields, want at least 22", len(f)+2)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return pidStat{}, fmt.Errorf("ppid: %w", err)
	}
	var v [3]uint64
	for k, n := range []int{11, 12, 19} {
		if v[k], err = strconv.ParseUint(f[n], 10, 64); err != nil {
			return pidStat{}, fmt.Errorf("field %d: %w", n+3, err)
		}
	}
	return pidStat{state: f[0][0], ppid: ppid, cpu: float64(v[0]+v[1]) / ClockTicks, start: v[2]}, nil
}

// exited reports whether the state is a zombie's (or a dead task's):
// its CPU time is final.
func (s pidStat) exited() bool { return s.state == 'Z' || s.state == 'X' || s.state == 'x' }

func (fs procFS) stat(pid int) (pidStat, error) {
	b, err := os.ReadFile(filepath.Join(fs.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return pidStat{}, err
	}
	s, err := parsePidStat(b)
	if err != nil {
		return pidStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return s, nil
}

// uptimeTicks reads the time since boot, in clock ticks: the clock of
// /proc/PID/stat's start times.
func (fs procFS) uptimeTicks() (uint64, error) {
	b, err := os.ReadFile(filepath.Join(fs.root, "uptime"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("/proc/uptime: empty")
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil || s < 0 {
		return 0, fmt.Errorf("/proc/uptime: %q", f[0])
	}
	return uint64(s * ClockTicks), nil
}

// procRun is one process of a daemon.
type procRun struct {
	pid   int
	start uint64
	// base and last are its CPU seconds at its first and latest
	// readings; base is zero for a process that started after the
	// monitor, all of whose CPU is the job's.
	base, last float64
	// child: the monitoring process's child, whose CPU the kernel adds
	// to the monitoring process's children's time once it is reaped.
	child bool
	// exited: gone (or a zombie); last is all there is of it.
	exited bool
	// late: found after the monitor started.
	late bool
}

// used is the run's CPU over the job, never negative.
func (r procRun) used() float64 { return max(r.last-r.base, 0) }

// watched is one daemon and its processes, oldest first.
type watched struct {
	d    Daemon
	runs []procRun
}

// current is the daemon's running process, nil if none.
func (w *watched) current() *procRun {
	if n := len(w.runs); n > 0 && !w.runs[n-1].exited {
		return &w.runs[n-1]
	}
	return nil
}

// name names the daemon for a reason: "the switch daemon in p-l0".
func (w *watched) name() string {
	if w.d.NS == "" {
		return "the " + w.d.Role + " daemon"
	}
	return "the " + w.d.Role + " daemon in " + w.d.NS
}

// daemonWatch follows the testbed's daemons over a job. A process that
// exits is counted to its last reading; a process found in its place —
// in the daemon's namespace, with the daemon's command line, the way
// the testbed started it — is followed from then on; a reused pid is
// told apart by its start time. It is used by one goroutine at a time.
type daemonWatch struct {
	fs       procFS
	self     int    // the monitoring process's pid
	t0       uint64 // the monitor's start, in clock ticks after boot
	ds       []watched
	nsName   map[string]string // netns name by namespace, once read
	lastScan time.Duration
}

// newDaemonWatch takes each daemon's process: the one the testbed
// recorded if it still runs, otherwise one in its place. A daemon found
// in neither way is missing, not an error: the verdict says so.
func newDaemonWatch(fs procFS, self int, ds []Daemon) (*daemonWatch, error) {
	t0, err := fs.uptimeTicks()
	if err != nil {
		return nil, fmt.Errorf("fidelity: %w", err)
	}
	w := &daemonWatch{fs: fs, self: self, t0: t0, nsName: make(map[string]string)}
	for _, d := range ds {
		w.ds = append(w.ds, watched{d: d})
	}
	for i := range w.ds {
		d := &w.ds[i].d
		if s, err := fs.stat(d.PID); err == nil && !s.exited() && (d.Start == 0 || s.start == d.Start) && (d.Start != 0 || w.matches(d, d.PID)) {
			w.follow(i, d.PID, s, false)
		}
	}
	w.scan(false)
	return w, nil
}

// follow starts counting process pid as daemon i's.
func (w *daemonWatch) follow(i, pid int, s pidStat, late bool) {
	r := procRun{pid: pid, start: s.start, base: s.cpu, last: s.cpu, child: s.ppid == w.self, late: late}
	if s.start > w.t0 {
		r.base = 0
	}
	w.ds[i].runs = append(w.ds[i].runs, r)
}

// sample reads each daemon's process's CPU, and looks for the missing
// daemons' processes: at once for a daemon whose process just went,
// otherwise every rescanEvery, and always when final.
func (w *daemonWatch) sample(at time.Duration, final bool) {
	gone := false
	for i := range w.ds {
		r := w.ds[i].current()
		if r == nil {
			continue
		}
		s, err := w.fs.stat(r.pid)
		if err != nil || s.start != r.start {
			// Gone, or its pid taken by another process: what it used
			// until the last reading is what it counts.
			r.exited, gone = true, true
			continue
		}
		r.last = max(r.last, s.cpu)
		if s.exited() {
			r.exited, gone = true, true
		}
	}
	if gone || final || at-w.lastScan >= rescanEvery {
		w.lastScan = at
		w.scan(true)
	}
}

// scan looks for a process for each daemon that has none.
func (w *daemonWatch) scan(late bool) {
	var want []int
	for i := range w.ds {
		if w.ds[i].current() == nil && len(w.ds[i].d.Args) > 0 {
			want = append(want, i)
		}
	}
	if len(want) == 0 {
		return
	}
	ents, err := os.ReadDir(w.fs.root)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		for k, i := range want {
			if !w.matches(&w.ds[i].d, pid) {
				continue
			}
			s, err := w.fs.stat(pid)
			if err != nil || s.exited() || w.seen(i, pid, s.start) {
				continue
			}
			w.follow(i, pid, s, late)
			want = slices.Delete(want, k, k+1)
			break
		}
		if len(want) == 0 {
			return
		}
	}
}

// seen reports whether daemon i already had process pid started at
// start (one that exited).
func (w *daemonWatch) seen(i, pid int, start uint64) bool {
	return slices.ContainsFunc(w.ds[i].runs, func(r procRun) bool { return r.pid == pid && r.start == start })
}

// matches reports whether process pid runs d's command line in d's
// namespace.
func (w *daemonWatch) matches(d *Daemon, pid int) bool {
	dir := filepath.Join(w.fs.root, strconv.Itoa(pid))
	if len(d.Args) > 0 {
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || string(b) != strings.Join(d.Args, "\x00")+"\x00" {
			return false
		}
	}
	if d.NS == "" {
		return true
	}
	name, ok := w.nsName[d.NS]
	if !ok {
		if w.fs.netns == nil {
			return false
		}
		var err error
		if name, err = w.fs.netns(d.NS); err != nil {
			return false
		}
		w.nsName[d.NS] = name
	}
	link, err := os.Readlink(filepath.Join(dir, "ns", "net"))
	return err == nil && link == name
}

// cpu is daemon i's CPU seconds over the job: every one of its
// processes' from its first reading to its last.
func (w *daemonWatch) cpu(i int) float64 {
	var s float64
	for _, r := range w.ds[i].runs {
		s += r.used()
	}
	return s
}

// reapedChildren is the CPU seconds, over their whole lives as last
// read, of the daemons' processes that were the monitoring process's
// children and that it has reaped since the start: the kernel added
// their CPU to its children's time, which counts as the ranks'.
func (w *daemonWatch) reapedChildren() float64 {
	var s float64
	for _, d := range w.ds {
		for _, r := range d.runs {
			if !r.child || !r.exited {
				continue
			}
			if st, err := w.fs.stat(r.pid); err == nil && st.start == r.start {
				continue // a zombie, not reaped yet
			}
			s += r.last
		}
	}
	return s
}

// missing describes each daemon that has no process at the end of the
// job.
func (w *daemonWatch) missing() []string {
	var why []string
	for i := range w.ds {
		d := &w.ds[i]
		switch {
		case d.current() != nil:
		case len(d.runs) == 0:
			why = append(why, fmt.Sprintf("%s (pid %d in the testbed's state) is not running", d.name(), d.d.PID))
		default:
			why = append(why, fmt.Sprintf("%s (pid %d) exited during the job and was not started again", d.name(), d.runs[len(d.runs)-1].pid))
		}
	}
	return why
}

// restarted describes each daemon whose process changed during the job.
func (w *daemonWatch) restarted() []string {
	var why []string
	for i := range w.ds {
		d := &w.ds[i]
		if !slices.ContainsFunc(d.runs, func(r procRun) bool { return r.late }) {
			continue
		}
		pids := make([]string, len(d.runs))
		for k, r := range d.runs {
			pids[k] = strconv.Itoa(r.pid)
		}
		why = append(why, fmt.Sprintf("%s started again during the job (pid %s)", d.name(), strings.Join(pids, ", then ")))
	}
	return why
}

// record adds to rec each daemon's CPU over the job under its role (and
// each switch process's, in the testbed's order), the daemons missing at
// the end and those started again.
func (w *daemonWatch) record(rec *Recorder) {
	for i := range w.ds {
		s := w.cpu(i)
		rec.ProcessCPU(w.ds[i].d.Role, s)
		if w.ds[i].d.Role == "switch" {
			rec.SwitchCPU(s)
		}
	}
	for _, why := range w.missing() {
		rec.DaemonMissing(why)
	}
	for _, why := range w.restarted() {
		rec.DaemonRestarted(why)
	}
}
