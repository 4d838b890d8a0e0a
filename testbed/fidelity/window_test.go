package fidelity

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// synthetic is a recording of a 2-CPU machine without links: at each
// 100 ms sample the machine worked busy ticks (of the 20 it had) since
// the previous one, all of it the ranks'.
func synthetic(t *testing.T, busy []uint64) *Recorder {
	t.Helper()
	r := NewRecorder(nil, 0)
	var user, idle uint64
	// The ranks did all the work.
	for _, b := range busy {
		r.ProcessCPU("ranks", float64(b)/ClockTicks)
	}
	for k := range len(busy) + 1 {
		if k > 0 {
			user += busy[k-1]
			idle += 20 - busy[k-1]
		}
		stat := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\nprocs_running 1\n", user, idle)
		if err := r.Sample(time.Duration(k)*100*time.Millisecond, []byte(stat), nil); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestJudgeWindow: a job whose start-up kept the machine busy but whose
// timed calls did not is CPU-bound as a whole and faithful on its timed
// window; one busy in its timed calls is CPU-bound either way; the
// window is judged on the samples that enclose it.
func TestJudgeWindow(t *testing.T) {
	// 0.0-0.5 s start-up at 100%, 0.5-1.0 s timed calls at 30%, 1.0-1.2 s
	// teardown at 100%.
	quiet := []uint64{20, 20, 20, 20, 20, 6, 6, 6, 6, 6, 20, 20}
	r := synthetic(t, quiet)
	whole, err := r.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Faithful || whole.Window != nil {
		t.Fatalf("whole job: %s (%s), want CPU-bound without a window", whole.Class, whole.Reason)
	}
	r = synthetic(t, quiet)
	if err := r.Window(520*time.Millisecond, 980*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	v, err := r.Judge(Rule{})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Faithful || v.Window == nil {
		t.Fatalf("timed window: %s (%s), want faithful", v.Class, v.Reason)
	}
	// Enclosed by the samples at 0.5 and 1.0 s: 5 intervals at 6 ticks.
	if w := v.Window; w.SpanS != 0.5 || w.BusyS != 0.3 || w.MachineS != 1 || w.CPUShare != 0.3 {
		t.Errorf("window evidence %+v, want span 0.5 s, busy 0.3 of 1 CPU-s", *w)
	}
	if v.CPUShare != whole.CPUShare || !strings.Contains(v.Reason, "timed calls") {
		t.Errorf("the whole job's share changed (%v, was %v) or the reason does not name the window: %s", v.CPUShare, whole.CPUShare, v.Reason)
	}
	// A window that starts inside the start-up takes in its busy interval.
	r = synthetic(t, quiet)
	if err := r.Window(150*time.Millisecond, 980*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Judge(Rule{}); v.Faithful || v.Window.SpanS != 0.9 {
		t.Errorf("window from 0.15 s: %s over %v s, want CPU-bound over 0.9 s", v.Class, v.Window.SpanS)
	}
	// Busy timed calls stay CPU-bound.
	r = synthetic(t, []uint64{6, 6, 18, 18, 18, 6})
	if err := r.Window(200*time.Millisecond, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Judge(Rule{}); v.Faithful || v.Class != CPUBound {
		t.Errorf("busy timed calls: %s (%s), want CPU-bound", v.Class, v.Reason)
	}
	// Windows that are not this job's are refused.
	for _, w := range [][2]time.Duration{{-time.Millisecond, time.Second}, {time.Second, time.Second}, {0, 3 * time.Second}} {
		r = synthetic(t, quiet)
		if err := r.Window(w[0], w[1]); err == nil {
			t.Errorf("window %v accepted", w)
		}
	}
}
