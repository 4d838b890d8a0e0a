package fidelity

import (
	"fmt"
	"time"
)

// The timed window: a job whose processes report when their timed calls
// began and ended (a benchmark's warm-up, start-up and teardown left
// out) is judged on what the machine did then.

// Window restricts the judgement to the job's timed calls, from and to
// being times since the job started (the first sample): the CPU rule is
// judged on the samples that enclose the window, and the bottleneck link
// on the intervals between them. The CPU time per role (Verdict.ProcessS)
// stays the whole job's, since a process's CPU is read only when it has
// exited. Call it before Judge, at most once.
func (r *Recorder) Window(from, to time.Duration) error {
	if len(r.samples) < 2 {
		return errFewSamples
	}
	end := r.samples[len(r.samples)-1].at
	switch {
	case from < 0 || to <= from:
		return fmt.Errorf("fidelity: timed window %v to %v: want 0 ≤ from < to", from, to)
	case to > end+time.Second:
		// (A second of slack for the clocks the job and the monitor
		// read; more means the window is not this job's.)
		return fmt.Errorf("fidelity: timed window %v to %v ends after the job (%v)", from, to, end)
	}
	r.window = &[2]time.Duration{from, min(to, end)}
	return nil
}

// span returns the indexes of the samples Judge compares: the first and
// the last, or with a window the last at or before its start and the
// first at or after its end.
func (r *Recorder) span() (i0, i1 int) {
	i0, i1 = 0, len(r.samples)-1
	if r.window == nil {
		return i0, i1
	}
	for k, s := range r.samples {
		if s.at <= r.window[0] {
			i0 = k
		}
		if s.at >= r.window[1] {
			i1 = k
			break
		}
	}
	return i0, max(i1, i0+1)
}

// WindowVerdict is the evidence of a job's timed window.
type WindowVerdict struct {
	// FromS and ToS are the window reported, in seconds since the job
	// started; SpanS is the time between the samples that enclose it,
	// over which the rule was judged.
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
	SpanS float64 `json:"span_s"`
	// BusyS is the time the machine's CPUs worked over the span, for
	// anyone, MachineS the CPU the machine had (less stolen time), and
	// CPUShare the one over the other: an upper bound of the testbed's
	// share, since what else ran counts too.
	BusyS    float64 `json:"busy_cpu_s"`
	MachineS float64 `json:"machine_cpu_s"`
	CPUShare float64 `json:"cpu_share"`
}

// judgeWindow fills v.Window from the samples i0 and i1.
func (r *Recorder) judgeWindow(v *Verdict, i0, i1 int) {
	a, b := r.samples[i0], r.samples[i1]
	d := b.cpu.sub(a.cpu)
	w := &WindowVerdict{FromS: r.window[0].Seconds(), ToS: r.window[1].Seconds(), SpanS: (b.at - a.at).Seconds(),
		BusyS: float64(d.Busy()) / ClockTicks, MachineS: float64(d.Total()-d.Steal) / ClockTicks}
	if w.MachineS > 0 {
		w.CPUShare = w.BusyS / w.MachineS
	}
	v.Window = w
}

// JudgedShare is the CPU share the rule was judged on: the timed
// window's, or the whole job's without one.
func (v Verdict) JudgedShare() float64 {
	if v.Window != nil {
		return v.Window.CPUShare
	}
	return v.CPUShare
}
