package fidelity

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMonitor watches a job of one busy child process, with this
// process standing in for a daemon: the child's CPU is counted as the
// job's, once it has been waited for.
func TestMonitor(t *testing.T) {
	m, err := Start(t.Context(), Target{Daemons: []Daemon{{Role: "self", PID: os.Getpid()}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// About 0.2 s of CPU: twenty clock ticks.
	busy := exec.Command("sh", "-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
	if err := busy.Run(); err != nil {
		t.Fatal(err)
	}
	rec, err := m.Stop(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	v, err := rec.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	if v.ProcessS["ranks"] <= 0 || v.WallS <= 0 || v.MachineS <= 0 || v.Link != nil {
		t.Errorf("verdict %+v: want the child's CPU counted, some wall time, no link", v)
	}
	if _, ok := v.ProcessS["self"]; !ok {
		t.Errorf("no CPU of the daemon role: %v", v.ProcessS)
	}
	// A daemon that is not there is a verdict saying so, not a zero.
	m, err = Start(t.Context(), Target{Daemons: []Daemon{{Role: "switch", PID: 1 << 30}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = m.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v, err := rec.Judge(Rule{}); err != nil || v.Class != DaemonMissing || !strings.Contains(v.Reason, "the switch daemon (pid 1073741824 in the testbed's state) is not running") {
		t.Errorf("a daemon with no process: %s: %q, %v", v.Class, v.Reason, err)
	}
}

// fakeDaemon is a process standing in for a daemon: it waits for a line
// on its standard input, works (about 20 clock ticks of CPU), says
// "done" and waits for another line.
type fakeDaemon struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// fakeDaemonArgs is the command line of every fakeDaemon: one started
// again is told by it.
func fakeDaemonArgs() []string {
	return []string{"sh", "-c", "read x; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo done; read y", "ndma-fidelity-test-" + strconv.Itoa(os.Getpid())}
}

func startFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	a := fakeDaemonArgs()
	cmd := exec.Command(a[0], a[1:]...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{cmd, in, bufio.NewReader(out)}
	t.Cleanup(d.kill)
	return d
}

// work has d work and returns its CPU seconds once done: its last.
func (d *fakeDaemon) work(t *testing.T) float64 {
	t.Helper()
	if _, err := io.WriteString(d.in, "go\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := d.out.ReadString('\n'); err != nil || line != "done\n" {
		t.Fatalf("fake daemon: %q, %v", line, err)
	}
	return d.cpu(t)
}

func (d *fakeDaemon) cpu(t *testing.T) float64 {
	t.Helper()
	s, _, err := ProcessCPU(strconv.Itoa(d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kill kills d and reaps it.
func (d *fakeDaemon) kill() {
	if d.cmd.ProcessState == nil {
		d.cmd.Process.Kill()
		d.cmd.Wait()
	}
}

// TestMonitorDaemonRestarted: a daemon killed during the job and started
// again with its command line counts the CPU of both processes, and the
// verdict names the restart; one killed and not started again makes the
// verdict daemon-missing. The daemons are this process's children, as
// in bench suite: a reaped one's CPU, which the kernel adds to this
// process's children's time, is not counted as the ranks' too.
func TestMonitorDaemonRestarted(t *testing.T) {
	a := startFakeDaemon(t)
	a0 := a.cpu(t) // blocked in its first read until it works
	daemon := Daemon{Role: "switch", PID: a.cmd.Process.Pid, Args: fakeDaemonArgs()}
	m, err := Start(t.Context(), Target{Daemons: []Daemon{daemon}}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a1 := a.work(t)
	a.kill()
	// The new process starts a clock tick after the monitor at least:
	// all its CPU is the job's.
	up0, err := machineProc.uptimeTicks()
	if err != nil {
		t.Fatal(err)
	}
	for up, _ := machineProc.uptimeTicks(); up <= up0; up, _ = machineProc.uptimeTicks() {
		time.Sleep(5 * time.Millisecond)
	}
	b := startFakeDaemon(t)
	b1 := b.work(t)
	rec, err := m.Stop(t.Context())
	if err != nil {
		t.Fatalf("daemon restarted during the job: no verdict: %v", err)
	}
	v, err := rec.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	// The switch role counts b's CPU and a's up to a reading no later
	// than its end; the rest of a's is in the ranks', reaped, not all of
	// it again. (The kernel truncates a process's user and system time
	// to clock ticks apart, and its children's time once: a few ticks
	// apart.)
	const ticks = 3.0 / ClockTicks
	sw, ranks := v.ProcessS["switch"], v.ProcessS["ranks"]
	if sw < b1 || sw > b1+a1-a0+1e-9 || math.Abs(sw+ranks-(b1+a1-a0)) > ticks {
		t.Errorf("switch %v s, ranks %v s: want switch from %v to %v s, both %v s", sw, ranks, b1, b1+a1-a0, b1+a1-a0)
	}
	want := fmt.Sprintf("the switch daemon started again during the job (pid %d, then %d)", a.cmd.Process.Pid, b.cmd.Process.Pid)
	if v.Class == DaemonMissing || len(v.RestartedDaemons) != 1 || v.RestartedDaemons[0] != want {
		t.Errorf("verdict %s: %q; want one naming the restart %q", v.Class, v.Reason, want)
	}

	// b killed during the next job, and not started again.
	daemon.PID = b.cmd.Process.Pid
	if m, err = Start(t.Context(), Target{Daemons: []Daemon{daemon}}, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	b.kill()
	if rec, err = m.Stop(t.Context()); err != nil {
		t.Fatalf("daemon killed during the job: no verdict: %v", err)
	}
	if v, err = rec.Judge(Rule{}); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("the switch daemon (pid %d) exited during the job and was not started again", b.cmd.Process.Pid)
	if v.Class != DaemonMissing || v.Faithful || !strings.HasPrefix(v.Reason, want) {
		t.Errorf("verdict %s: %q; want daemon-missing, naming %q", v.Class, v.Reason, want)
	}
	if v.ProcessS["switch"] != 0 || v.ProcessS["ranks"] > ticks {
		t.Errorf("an idle daemon killed: switch %v s, ranks %v s; want none", v.ProcessS["switch"], v.ProcessS["ranks"])
	}
}
