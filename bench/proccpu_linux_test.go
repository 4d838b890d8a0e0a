//go:build linux

package bench

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ndma/ndma/testbed/fidelity"
)

// spinArg, as the test binary's first argument, makes it a child that
// burns spinCPU of CPU time and exits (TestProcCPU's busy child).
const spinArg = "bench-spin"

// spinCPU is the CPU time TestProcCPU burns, in itself and in a child:
// 30 clock ticks, so that /proc's tick rounding is small beside it.
const spinCPU = 300 * time.Millisecond

func init() {
	if len(os.Args) > 1 && os.Args[1] == spinArg {
		spin(spinCPU)
		os.Exit(0)
	}
}

// spinSink keeps spin's arithmetic from being optimised away.
var spinSink int

// spin burns at least d of this process's CPU time.
func spin(d time.Duration) {
	end := rusageCPU() + d
	for rusageCPU() < end {
		for i := range 1 << 16 {
			spinSink += i ^ spinSink>>3
		}
	}
}

// TestProcCPU: procCPU's own time grows with this process's CPU time as
// getrusage measures it while it spins, and its children's time grows by
// what a busy child burned (the child's rusage from wait4) once it is
// reaped. /proc counts in clock ticks and the kernel's tick-sampled
// user/system split makes the two sources differ by a tick or so, hence
// the tolerance: 10% plus two ticks, far below the factor of 10 or more a
// wrong field or unit would show.
func TestProcCPU(t *testing.T) {
	near := func(got float64, want time.Duration) bool {
		const tick = 1.0 / fidelity.ClockTicks
		w := want.Seconds()
		return got >= 0.9*w-2*tick && got <= 1.1*w+2*tick
	}

	ru0 := rusageCPU()
	self0, ch0, err := procCPU("self")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	spin(spinCPU)
	self1, ch1, err := procCPU("self")
	if err != nil {
		t.Fatal(err)
	}
	ru1 := rusageCPU()
	if d := self1 - self0; !near(d, ru1-ru0) {
		t.Errorf("own CPU time grew %.3f s while spinning %v (getrusage: %v)", d, spinCPU, ru1-ru0)
	}
	if ch1 != ch0 {
		t.Errorf("children's CPU time moved %.3f s with no child reaped", ch1-ch0)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, spinArg)
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("busy child: %v\n%s", err, out)
	}
	_, ch2, err := procCPU("self")
	if err != nil {
		t.Fatal(err)
	}
	burned := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	if burned < spinCPU {
		t.Fatalf("busy child burned %v, want at least %v", burned, spinCPU)
	}
	if d := ch2 - ch1; !near(d, burned) {
		t.Errorf("children's CPU time grew %.3f s, the busy child burned %v", d, burned)
	}

	if _, _, err := procCPU("0"); err == nil {
		t.Error("pid 0: no error")
	}
}
