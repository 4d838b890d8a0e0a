package fidelity

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeProc is a /proc tree made by a test: /proc/uptime and, per
// process, stat, cmdline and the ns/net link.
type fakeProc struct {
	t    *testing.T
	root string
}

// The namespaces of the fake tree.
var fakeNetns = map[string]string{"p-sw": "net:[4026531001]", "p-l0": "net:[4026531002]"}

func newFakeProc(t *testing.T, uptimeTicks uint64) (fakeProc, procFS) {
	p := fakeProc{t, t.TempDir()}
	p.write("uptime", fmt.Sprintf("%d.%02d 1234.56\n", uptimeTicks/ClockTicks, uptimeTicks%ClockTicks))
	return p, procFS{root: p.root, netns: func(ns string) (string, error) {
		if n, ok := fakeNetns[ns]; ok {
			return n, nil
		}
		return "", errors.New("no namespace " + ns)
	}}
}

func (p fakeProc) write(name, s string) {
	p.t.Helper()
	if err := os.WriteFile(filepath.Join(p.root, name), []byte(s), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// proc makes (or rewrites) process pid: its parent, start time and CPU
// in clock ticks, state ('S', 'Z'), namespace and command line.
func (p fakeProc) proc(pid, ppid int, start, cpu uint64, state byte, ns string, args ...string) {
	p.t.Helper()
	dir := filepath.Join(p.root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		p.t.Fatal(err)
	}
	// utime and stime (fields 14, 15) hold the CPU between them; cutime
	// and cstime (16, 17) are the children's, not the process's.
	p.write(filepath.Join(strconv.Itoa(pid), "stat"), fmt.Sprintf("%d (ndma sw) %c %d %d %d 0 -1 4194560 100 0 0 0 %d %d 777 888 20 0 5 0 %d 1000000 200 18446744073709551615\n",
		pid, state, ppid, pid, pid, cpu-cpu/3, cpu/3, start))
	cmdline := ""
	if state != 'Z' { // a zombie's command line is empty
		cmdline = strings.Join(args, "\x00") + "\x00"
	}
	p.write(filepath.Join(strconv.Itoa(pid), "cmdline"), cmdline)
	link := filepath.Join(dir, "ns", "net")
	os.Remove(link)
	if err := os.Symlink(fakeNetns[ns], link); err != nil {
		p.t.Fatal(err)
	}
}

// exit removes process pid: exited and reaped.
func (p fakeProc) exit(pid int) {
	p.t.Helper()
	if err := os.RemoveAll(filepath.Join(p.root, strconv.Itoa(pid))); err != nil {
		p.t.Fatal(err)
	}
}

// The monitor starts 1000 s after boot; the testbed's daemons started
// at 500 s.
const (
	fakeT0    = 1000 * ClockTicks
	fakeStart = 500 * ClockTicks
	fakeSelf  = 4242 // the monitoring process
)

var (
	leafArgs  = []string{"/usr/bin/ndma", "switch", "--listen", "10.0.0.9:7471", "--parent", "10.0.0.1:7471"}
	spineArgs = []string{"/usr/bin/ndma", "switch", "--listen", "10.0.0.1:7471"}
)

// fakeTestbed is a spine switch (pid 90, 200 ticks of CPU at the start)
// and a leaf switch (pid 100, 300 ticks), with decoys: a process with the
// leaf's command line in another namespace, and one in the leaf's
// namespace with another.
func fakeTestbed(t *testing.T) (fakeProc, *daemonWatch) {
	p, fs := newFakeProc(t, fakeT0)
	p.proc(90, 1, fakeStart, 200, 'S', "p-sw", spineArgs...)
	p.proc(100, 1, fakeStart, 300, 'S', "p-l0", leafArgs...)
	p.proc(150, 1, fakeT0+5, 0, 'S', "p-sw", leafArgs...)
	p.proc(160, 1, fakeT0+5, 0, 'S', "p-l0", "sleep", "1000")
	w, err := newDaemonWatch(fs, fakeSelf, []Daemon{
		{Role: "switch", PID: 90, Start: fakeStart, NS: "p-sw", Args: spineArgs},
		{Role: "switch", PID: 100, Start: fakeStart, NS: "p-l0", Args: leafArgs},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, w
}

// judgeDaemons records w's daemons (the monitor's last sample taken, as
// Stop takes it) on a machine of 2 CPUs idle for 10 s, and judges it.
func judgeDaemons(t *testing.T, w *daemonWatch, at time.Duration) Verdict {
	t.Helper()
	w.sample(at, true)
	r := NewRecorder(nil, 0)
	for k, idle := range []int{0, 2000} {
		stat := fmt.Sprintf("cpu  0 0 0 %d 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\nprocs_running 1\n", idle)
		if err := r.Sample(time.Duration(k)*10*time.Second, []byte(stat), nil); err != nil {
			t.Fatal(err)
		}
	}
	w.record(r)
	v, err := r.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestDaemonRestarted: a leaf switch killed during the job and started
// again in its namespace with its own command line (a new pid) counts
// both processes' CPU: the first's from the start to its last reading,
// the second's from its own start, after the monitor's; the verdict
// stands, and its reason names the restart.
func TestDaemonRestarted(t *testing.T) {
	p, w := fakeTestbed(t)
	p.proc(100, 1, fakeStart, 350, 'S', "p-l0", leafArgs...) // +0.5 s
	w.sample(50*time.Millisecond, false)
	p.exit(100)
	p.proc(200, 1, fakeT0+500, 40, 'S', "p-l0", leafArgs...)
	w.sample(100*time.Millisecond, false) // the leaf gone: looked for at once
	p.proc(200, 1, fakeT0+500, 60, 'S', "p-l0", leafArgs...)
	p.proc(90, 1, fakeStart, 230, 'S', "p-sw", spineArgs...) // +0.3 s
	v := judgeDaemons(t, w, 150*time.Millisecond)
	if !near(v.SwitchS[1], 0.5+0.6) || !near(v.SwitchS[0], 0.3) || !near(v.ProcessS["switch"], 1.4) {
		t.Errorf("switch CPU %v (each %v), want 0.3 s for the spine and 0.5 + 0.6 s for the leaf's two processes", v.ProcessS["switch"], v.SwitchS)
	}
	want := "the switch daemon in p-l0 started again during the job (pid 100, then 200)"
	if v.Class != Faithful || len(v.MissingDaemons) != 0 || len(v.RestartedDaemons) != 1 || v.RestartedDaemons[0] != want || !strings.Contains(v.Reason, want) {
		t.Errorf("verdict %s: %q, restarted %q, missing %q; want faithful, naming the restart %q", v.Class, v.Reason, v.RestartedDaemons, v.MissingDaemons, want)
	}
	b, err := json.Marshal(v)
	if err != nil || !strings.Contains(string(b), `"restarted_daemons":["`+want) {
		t.Errorf("JSON %s (%v) lacks restarted_daemons", b, err)
	}
}

// TestDaemonMissing: a leaf switch killed during the job and not started
// again counts until its last reading, and makes the verdict
// daemon-missing, naming it; so does one the testbed's state names that
// was not running at the start.
func TestDaemonMissing(t *testing.T) {
	p, w := fakeTestbed(t)
	p.proc(100, 1, fakeStart, 320, 'S', "p-l0", leafArgs...)
	w.sample(50*time.Millisecond, false)
	p.exit(100)
	w.sample(100*time.Millisecond, false)
	v := judgeDaemons(t, w, 10*time.Second)
	want := "the switch daemon in p-l0 (pid 100) exited during the job and was not started again"
	if v.Class != DaemonMissing || v.Faithful || len(v.MissingDaemons) != 1 || v.MissingDaemons[0] != want || !strings.HasPrefix(v.Reason, want+"; testbed ") {
		t.Errorf("verdict %s (faithful %v): %q, missing %q; want daemon-missing, first naming %q", v.Class, v.Faithful, v.Reason, v.MissingDaemons, want)
	}
	if !near(v.ProcessS["switch"], 0.2) || !near(v.SwitchS[1], 0.2) {
		t.Errorf("switch CPU %v (each %v), want the leaf's 0.2 s until it went", v.ProcessS["switch"], v.SwitchS)
	}
	b, err := json.Marshal(v)
	if err != nil || !strings.Contains(string(b), `"class":"daemon-missing"`) || !strings.Contains(string(b), `"missing_daemons":["`+want) {
		t.Errorf("JSON %s (%v) lacks the class or missing_daemons", b, err)
	}

	// Not running at the start: the state's pid is another process's.
	p, fs := newFakeProc(t, fakeT0)
	p.proc(100, 1, fakeT0-7, 9000, 'S', "p-l0", "bash")
	w, err = newDaemonWatch(fs, fakeSelf, []Daemon{{Role: "memd", PID: 100, Start: fakeStart, NS: "p-l0", Args: leafArgs}})
	if err != nil {
		t.Fatal(err)
	}
	v = judgeDaemons(t, w, time.Second)
	want = "the memd daemon in p-l0 (pid 100 in the testbed's state) is not running"
	if v.Class != DaemonMissing || len(v.MissingDaemons) != 1 || v.MissingDaemons[0] != want || v.ProcessS["memd"] != 0 {
		t.Errorf("verdict %s: %q, memd CPU %v; want daemon-missing naming %q, no CPU", v.Class, v.Reason, v.ProcessS["memd"], want)
	}
}

// TestDaemonPIDReused: a daemon's pid taken by another process (told
// by its start time) counts neither that process's CPU, large or small,
// nor less than the daemon's own; taken by the daemon started again, it
// counts as a new process from its start; a zombie's CPU is its last.
func TestDaemonPIDReused(t *testing.T) {
	for _, c := range []struct {
		name     string
		cpu      uint64 // the new process's, in ticks
		args     []string
		want     float64 // the leaf's CPU over the job
		missing  bool
		restarts int
	}{
		{"other, large", 99999, []string{"make", "-j8"}, 0.5, true, 0},
		{"other, small", 1, []string{"make", "-j8"}, 0.5, true, 0},
		{"the leaf again", 5, leafArgs, 0.55, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, w := fakeTestbed(t)
			p.proc(100, 1, fakeStart, 350, 'S', "p-l0", leafArgs...)
			w.sample(50*time.Millisecond, false)
			// Between two samples the leaf exits and its pid is reused.
			p.proc(100, 1, fakeT0+300, c.cpu, 'S', "p-l0", c.args...)
			v := judgeDaemons(t, w, 100*time.Millisecond)
			if !near(v.SwitchS[1], c.want) || v.SwitchS[1] < 0 {
				t.Errorf("leaf CPU %v s, want %v s", v.SwitchS[1], c.want)
			}
			if (v.Class == DaemonMissing) != c.missing || len(v.RestartedDaemons) != c.restarts {
				t.Errorf("verdict %s: %q: want missing %v, %d restarts", v.Class, v.Reason, c.missing, c.restarts)
			}
		})
	}
	// A zombie: its CPU is final, and it is gone.
	p, w := fakeTestbed(t)
	p.proc(100, 1, fakeStart, 380, 'Z', "p-l0")
	v := judgeDaemons(t, w, 50*time.Millisecond)
	if !near(v.SwitchS[1], 0.8) || v.Class != DaemonMissing {
		t.Errorf("zombie leaf: CPU %v s, %s; want 0.8 s, daemon-missing", v.SwitchS[1], v.Class)
	}
}

// TestDaemonReapedChild: a daemon that was the monitoring process's
// child (bench suite starts the testbed itself) is in that process's
// children's time once reaped, with all its CPU: reapedChildren says how
// much, so that it is not counted as the ranks' too; not while a
// zombie.
func TestDaemonReapedChild(t *testing.T) {
	p, fs := newFakeProc(t, fakeT0)
	p.proc(100, fakeSelf, fakeStart, 300, 'S', "p-l0", leafArgs...)
	w, err := newDaemonWatch(fs, fakeSelf, []Daemon{{Role: "switch", PID: 100, Start: fakeStart, NS: "p-l0", Args: leafArgs}})
	if err != nil {
		t.Fatal(err)
	}
	p.proc(100, fakeSelf, fakeStart, 340, 'Z', "p-l0")
	w.sample(50*time.Millisecond, false)
	if r := w.reapedChildren(); r != 0 {
		t.Errorf("a zombie child: %v s reaped, want 0", r)
	}
	p.exit(100)
	w.sample(100*time.Millisecond, true)
	if r := w.reapedChildren(); !near(r, 3.4) || !near(w.cpu(0), 0.4) {
		t.Errorf("reaped: %v s, daemon %v s; want its whole 3.4 s reaped, 0.4 s over the job", r, w.cpu(0))
	}
}
