package fidelity

import (
	"os"
	"os/exec"
	"testing"
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
	// A daemon that is not there is an error, not a zero.
	if _, err := Start(t.Context(), Target{Daemons: []Daemon{{Role: "switch", PID: 1 << 30}}}, 0); err == nil {
		t.Error("a daemon with no process: no error")
	}
}
