package fidelity

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Rule is what a faithful job must show. Each zero field takes its
// default.
type Rule struct {
	// MaxCPUShare is the largest share of the machine's CPU the testbed
	// may use (0 to 1); zero means 0.6.
	MaxCPUShare float64
	// MinBusy is the smallest share of its transfer a bulk job's
	// bottleneck link must be busy; zero means 0.9.
	MinBusy float64
	// ActiveShare is how much of its rate a link must carry in a sampling
	// interval for the interval to be part of its transfer; zero means
	// 0.05.
	ActiveShare float64
	// MinTransfer is how long the bottleneck's bytes must take at its
	// rate for the link to be judged (a bulk job); zero means 500 ms.
	MinTransfer time.Duration
}

// DefaultMaxCPUShare is Rule.MaxCPUShare's default.
const DefaultMaxCPUShare = 0.6

func (r Rule) withDefaults() Rule {
	if r.MaxCPUShare == 0 {
		r.MaxCPUShare = DefaultMaxCPUShare
	}
	if r.MinBusy == 0 {
		r.MinBusy = 0.9
	}
	if r.ActiveShare == 0 {
		r.ActiveShare = 0.05
	}
	if r.MinTransfer == 0 {
		r.MinTransfer = 500 * time.Millisecond
	}
	return r
}

// Validate reports a share outside (0, 1] or a negative MinTransfer.
func (r Rule) Validate() error {
	for _, s := range []struct {
		name string
		v    float64
	}{{"MaxCPUShare", r.MaxCPUShare}, {"MinBusy", r.MinBusy}, {"ActiveShare", r.ActiveShare}} {
		if s.v < 0 || s.v > 1 {
			return fmt.Errorf("fidelity: %s %v: want a share from 0 to 1 (0: the default)", s.name, s.v)
		}
	}
	if r.MinTransfer < 0 {
		return fmt.Errorf("fidelity: MinTransfer %v: must not be negative", r.MinTransfer)
	}
	return nil
}

// Class is a verdict in one word.
type Class string

// The classes of Verdict.
const (
	Faithful Class = "faithful"
	// CPUBound: the testbed used more than Rule.MaxCPUShare of the
	// machine.
	CPUBound Class = "cpu-bound"
	// LinkIdle: within its CPU share, but the bulk job's bottleneck link
	// was idle for more than 1 - Rule.MinBusy of its transfer.
	LinkIdle Class = "link-idle"
	// DaemonMissing: a daemon of the testbed (a switch, a leaf switch, a
	// memory or storage node) had no process at the end of the job: the
	// job did not run on the testbed it was meant for, whatever its CPU
	// and links show.
	DaemonMissing Class = "daemon-missing"
)

// Verdict says whether a job was faithful, why, and the evidence.
type Verdict struct {
	Class    Class  `json:"class"`
	Faithful bool   `json:"faithful"`
	Reason   string `json:"reason"`
	// WallS is the job's wall time, from the first sample to the last.
	WallS float64 `json:"wall_s"`
	// MachineS is the CPU the machine had over the job: every CPU for
	// WallS, less the time stolen from it.
	MachineS float64 `json:"machine_cpu_s"`
	// BusyS is the time the machine's CPUs worked, for anyone: the
	// testbed and whatever else runs on the machine.
	BusyS float64 `json:"busy_cpu_s"`
	// ProcessS is the user+system time of the testbed's processes by
	// role: "ranks" (every process the job started, peers' included),
	// "switch", "memd", "stord", "storgw".
	ProcessS map[string]float64 `json:"process_cpu_s"`
	// SwitchS is each switch process's user+system time, in the
	// testbed's order, when it runs more than one (their sum is
	// ProcessS["switch"]); nil with one.
	SwitchS []float64 `json:"switch_cpu_s,omitempty"`
	// SoftirqS is the machine's softirq time: mostly the links' packet
	// work. The kernel may also charge some of it to the process it
	// interrupted, so TestbedS can count it twice: the rule errs towards
	// CPU-bound.
	SoftirqS float64 `json:"softirq_s"`
	// StealS is the time the hypervisor gave other tenants; nil where the
	// kernel does not report it.
	StealS *float64 `json:"steal_s,omitempty"`
	// TestbedS is the sum of ProcessS and SoftirqS; CPUShare is TestbedS
	// over MachineS, judged against MaxCPUShare.
	TestbedS    float64 `json:"testbed_cpu_s"`
	CPUShare    float64 `json:"cpu_share"`
	MaxCPUShare float64 `json:"max_cpu_share"`
	// MaxRunQueue is the most runnable tasks per CPU seen at a sample,
	// the sampler itself not counted.
	MaxRunQueue float64 `json:"max_run_queue"`
	// Link is the bottleneck link's evidence (over the timed window,
	// with one); nil without links.
	Link *LinkVerdict `json:"link,omitempty"`
	// Window is the evidence over the job's timed calls, when the job
	// reported them (Recorder.Window): the CPU rule is then judged on
	// Window.CPUShare instead of CPUShare.
	Window *WindowVerdict `json:"window,omitempty"`
	// MissingDaemons names each daemon that had no process at the end
	// of the job (the verdict is then DaemonMissing), and
	// RestartedDaemons each whose process changed during it, with its
	// processes; both are in Reason too.
	MissingDaemons   []string `json:"missing_daemons,omitempty"`
	RestartedDaemons []string `json:"restarted_daemons,omitempty"`
}

// LinkVerdict is the bottleneck link's evidence.
type LinkVerdict struct {
	Name     string `json:"name"`
	RateBits uint64 `json:"rate_bits"`
	Bytes    uint64 `json:"bytes"` // carried over the job
	// LineS is how long Bytes take at the rate; TransferS the length of
	// the sampling intervals in which the link carried at least
	// Rule.ActiveShare of its rate, and Busy the bytes of those intervals
	// over what the rate allowed in them.
	LineS     float64 `json:"line_s"`
	TransferS float64 `json:"transfer_s"`
	Busy      float64 `json:"busy"`
	// Judged is whether the job was long enough on this link (LineS at
	// least Rule.MinTransfer) for Busy to count; MinBusy is the rule's.
	Judged  bool    `json:"judged"`
	MinBusy float64 `json:"min_busy"`
	// TBF is the link's tbf over the job, where tc was read at both ends.
	TBF *TBFEvidence `json:"tbf,omitempty"`
	// DropsAll is the packets every watched link's tbf dropped.
	DropsAll uint64 `json:"drops_all"`
}

// TBFEvidence is a link's tbf statistics over a job.
type TBFEvidence struct {
	SentBytes  uint64 `json:"sent_bytes"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"` // times the rate held a packet back
	Backlog    uint64 `json:"backlog"`    // bytes queued at the end
}

// Judge returns the verdict on the job recorded, under rule.
func (r *Recorder) Judge(rule Rule) (Verdict, error) {
	if err := rule.Validate(); err != nil {
		return Verdict{}, err
	}
	rule = rule.withDefaults()
	if len(r.samples) < 2 {
		return Verdict{}, errFewSamples
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	d := last.cpu.sub(first.cpu)
	secs := func(t uint64) float64 { return float64(t) / ClockTicks }
	v := Verdict{
		WallS:       (last.at - first.at).Seconds(),
		MachineS:    secs(d.Total() - d.Steal),
		BusyS:       secs(d.Busy()),
		ProcessS:    maps.Clone(r.process),
		SoftirqS:    secs(d.SoftIRQ),
		MaxCPUShare: rule.MaxCPUShare,
	}
	if r.hasSteal {
		s := secs(d.Steal)
		v.StealS = &s
	}
	if len(r.switches) > 1 {
		v.SwitchS = slices.Clone(r.switches)
	}
	for _, s := range r.process {
		v.TestbedS += s
	}
	v.TestbedS += v.SoftirqS
	if v.MachineS > 0 {
		v.CPUShare = v.TestbedS / v.MachineS
	}
	if r.cpus > 0 {
		v.MaxRunQueue = float64(max(r.maxRunning-1, 0)) / float64(r.cpus)
	}
	i0, i1 := r.span()
	v.Link = r.bottleneck(rule, i0, i1)
	var why []string
	cpuOK := v.CPUShare <= rule.MaxCPUShare
	why = append(why, fmt.Sprintf("testbed %.0f%% of the machine's CPU (limit %.0f%%)", 100*v.CPUShare, 100*rule.MaxCPUShare))
	if v.MachineS == 0 {
		why[0] = "too short to measure the CPU (under a clock tick)"
	}
	if r.window != nil {
		r.judgeWindow(&v, i0, i1)
		cpuOK = v.Window.CPUShare <= rule.MaxCPUShare
		why[0] = fmt.Sprintf("timed calls: machine %.0f%% busy over %.2f s (limit %.0f%%); whole job: testbed %.0f%%",
			100*v.Window.CPUShare, v.Window.SpanS, 100*rule.MaxCPUShare, 100*v.CPUShare)
		if v.Window.MachineS == 0 {
			why[0] = "timed calls too short to measure the CPU (under a clock tick)"
		}
	}
	linkOK := true
	if l := v.Link; l != nil {
		switch {
		case l.Judged:
			linkOK = l.Busy >= rule.MinBusy
			why = append(why, fmt.Sprintf("link %s busy %.0f%% of its %.2f s transfer (want ≥ %.0f%%)", l.Name, 100*l.Busy, l.TransferS, 100*rule.MinBusy))
		case l.Bytes > 0:
			why = append(why, fmt.Sprintf("link %s not judged (%.3f s at its rate, under %v)", l.Name, l.LineS, rule.MinTransfer))
		}
	}
	v.MissingDaemons, v.RestartedDaemons = slices.Clone(r.missing), slices.Clone(r.restarted)
	why = append(why, r.restarted...)
	switch {
	case len(r.missing) > 0:
		v.Class = DaemonMissing
		why = append(slices.Clone(r.missing), why...)
	case !cpuOK:
		v.Class = CPUBound
	case !linkOK:
		v.Class = LinkIdle
	default:
		v.Class, v.Faithful = Faithful, true
	}
	v.Reason = strings.Join(why, "; ")
	return v, nil
}

// bottleneck returns the evidence of the link whose bytes between
// samples i0 and i1 take longest at its rate; nil without links.
func (r *Recorder) bottleneck(rule Rule, i0, i1 int) *LinkVerdict {
	if len(r.links) == 0 {
		return nil
	}
	first, last := r.samples[i0], r.samples[i1]
	lineS := func(i int) float64 {
		if r.links[i].RateBits == 0 {
			return 0
		}
		return float64(delta(last.bytes[i], first.bytes[i])) * 8 / float64(r.links[i].RateBits)
	}
	idx := make([]int, len(r.links))
	for i := range idx {
		idx[i] = i
	}
	b := slices.MaxFunc(idx, func(x, y int) int { return cmp.Or(cmp.Compare(lineS(x), lineS(y)), cmp.Compare(y, x)) })
	l := r.links[b]
	lv := &LinkVerdict{Name: l.Name, RateBits: l.RateBits, Bytes: delta(last.bytes[b], first.bytes[b]), LineS: lineS(b), MinBusy: rule.MinBusy}
	lv.Judged = lv.LineS >= rule.MinTransfer.Seconds()
	var sent, allowed float64
	for k := i0 + 1; k <= i1; k++ {
		dt := (r.samples[k].at - r.samples[k-1].at).Seconds()
		allow := float64(l.RateBits) / 8 * dt
		got := float64(delta(r.samples[k].bytes[b], r.samples[k-1].bytes[b]))
		if allow > 0 && got >= rule.ActiveShare*allow {
			lv.TransferS += dt
			sent += got
			allowed += allow
		}
	}
	if allowed > 0 {
		lv.Busy = sent / allowed
	}
	if q0, q1 := r.qdisc[0][b], r.qdisc[1][b]; q0 != nil && q1 != nil {
		lv.TBF = &TBFEvidence{SentBytes: delta(q1.Bytes, q0.Bytes), Drops: delta(q1.Drops, q0.Drops),
			Overlimits: delta(q1.Overlimits, q0.Overlimits), Backlog: q1.Backlog}
	}
	for i := range r.links {
		if q0, q1 := r.qdisc[0][i], r.qdisc[1][i]; q0 != nil && q1 != nil {
			lv.DropsAll += delta(q1.Drops, q0.Drops)
		}
	}
	return lv
}

// delta is b - a, or zero if the counter went back (an interface
// recreated).
func delta(b, a uint64) uint64 { return b - min(a, b) }

// Details describes the evidence in a line: the CPU by role against what
// the machine had, the largest run queue, and the bottleneck link.
func (v Verdict) Details() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CPU over %.2f s:", v.WallS)
	for _, role := range slices.Sorted(maps.Keys(v.ProcessS)) {
		fmt.Fprintf(&b, " %s %.2f s,", role, v.ProcessS[role])
	}
	fmt.Fprintf(&b, " softirq %.2f s", v.SoftirqS)
	if v.StealS != nil {
		fmt.Fprintf(&b, ", stolen %.2f s", *v.StealS)
	}
	fmt.Fprintf(&b, " of the %.2f s the machine had (busy, for anyone: %.2f s); largest run queue %.1f per CPU", v.MachineS, v.BusyS, v.MaxRunQueue)
	if w := v.Window; w != nil {
		fmt.Fprintf(&b, "; timed calls %.2f-%.2f s: the machine busy %.2f s of %.2f s", w.FromS, w.ToS, w.BusyS, w.MachineS)
	}
	if l := v.Link; l != nil {
		fmt.Fprintf(&b, "; bottleneck link %s: %d bytes, %.3f s at its rate", l.Name, l.Bytes, l.LineS)
		if l.TBF != nil {
			fmt.Fprintf(&b, ", tbf dropped %d, held back %d times, %d bytes queued at the end", l.TBF.Drops, l.TBF.Overlimits, l.TBF.Backlog)
		}
		fmt.Fprintf(&b, "; all links' tbf dropped %d", l.DropsAll)
	}
	return b.String()
}
