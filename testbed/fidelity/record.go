package fidelity

import (
	"errors"
	"fmt"
	"time"
)

// Link is one direction of a testbed link, as the monitor watches it.
type Link struct {
	// Name says which way it goes: "sw→h0" (the switch port towards
	// host h0) or "h0→sw".
	Name string `json:"name"`
	// Port is the switch-side interface whose counters give the link's
	// bytes (in the switch namespace's net/dev); Up is whether the link
	// goes from the node to the switch (the port's received bytes)
	// rather than from the switch (its sent bytes).
	Port string `json:"port"`
	Up   bool   `json:"up,omitempty"`
	// RateBits is the link's rate, in bits per second.
	RateBits uint64 `json:"rate_bits"`
	// NS and Dev are where the link's tbf is: the namespace and the
	// interface it sends from.
	NS  string `json:"ns"`
	Dev string `json:"dev"`
}

// DefaultMaxSamples bounds a Recorder's samples when NewRecorder is
// given zero.
const DefaultMaxSamples = 4096

// sample is one reading of the machine and of the links.
type sample struct {
	at    time.Duration // since the job started
	cpu   CPUTimes
	bytes []uint64 // per link, in Recorder.links order
}

// Recorder accumulates what a Monitor reads over one job — or what a
// test recorded — for Judge. It holds at most its sample bound: when
// full, it drops every other sample but the first and the last (the
// counters are cumulative, so the job's totals stay exact and the
// intervals get coarser); the largest run queue is kept apart, over
// every sample. A Recorder is used by one goroutine at a time.
type Recorder struct {
	links      []Link
	max        int
	samples    []sample
	cpus       int
	hasSteal   bool
	maxRunning int
	process    map[string]float64 // role: CPU seconds over the job
	switches   []float64          // each switch process's CPU seconds, in the testbed's order
	qdisc      [2][]*Qdisc        // start, end: per link, nil where not read
	window     *[2]time.Duration  // the timed calls (Window); nil: the whole job
	missing    []string           // DaemonMissing
	restarted  []string           // DaemonRestarted
}

// NewRecorder returns a Recorder for links, keeping at most maxSamples
// samples (zero: DefaultMaxSamples; at least 3).
func NewRecorder(links []Link, maxSamples int) *Recorder {
	if maxSamples == 0 {
		maxSamples = DefaultMaxSamples
	}
	r := &Recorder{links: links, max: max(maxSamples, 3), process: make(map[string]float64), hasSteal: true}
	r.qdisc[0] = make([]*Qdisc, len(links))
	r.qdisc[1] = make([]*Qdisc, len(links))
	return r
}

// Sample adds a reading taken at, the time since the job started: stat is
// the contents of /proc/stat and netdev that of the switch namespace's
// /proc/PID/net/dev (unused, and may be nil, without links). Readings must
// come in time order.
func (r *Recorder) Sample(at time.Duration, stat, netdev []byte) error {
	st, err := ParseStat(stat)
	if err != nil {
		return err
	}
	s := sample{at: at, cpu: st.CPU}
	if n := len(r.samples); n > 0 && at < r.samples[n-1].at {
		return fmt.Errorf("fidelity: sample at %v after one at %v", at, r.samples[n-1].at)
	}
	if len(r.links) > 0 {
		ifs, err := ParseNetDev(netdev)
		if err != nil {
			return err
		}
		s.bytes = make([]uint64, len(r.links))
		for i, l := range r.links {
			c, ok := ifs[l.Port]
			if !ok {
				return fmt.Errorf("fidelity: net/dev has no interface %s (link %s)", l.Port, l.Name)
			}
			s.bytes[i] = c.TxBytes
			if l.Up {
				s.bytes[i] = c.RxBytes
			}
		}
	}
	if r.cpus == 0 {
		r.cpus = st.CPUs
	}
	r.hasSteal = r.hasSteal && st.HasSteal
	r.maxRunning = max(r.maxRunning, st.ProcsRunning)
	if len(r.samples) == r.max {
		r.thin()
	}
	r.samples = append(r.samples, s)
	return nil
}

// thin drops every other sample, keeping the first and the last.
func (r *Recorder) thin() {
	n := len(r.samples)
	kept := r.samples[:0]
	for i := 0; i < n; i += 2 {
		kept = append(kept, r.samples[i])
	}
	if (n-1)%2 != 0 {
		kept = append(kept, r.samples[n-1])
	}
	clear(r.samples[len(kept):n])
	r.samples = kept
}

// ProcessCPU adds seconds of CPU time to role ("ranks", "switch", "memd",
// …): what the role's processes used over the job.
func (r *Recorder) ProcessCPU(role string, seconds float64) {
	r.process[role] += seconds
}

// SwitchCPU records the CPU seconds of one switch process over the job,
// counted in ProcessCPU's "switch" too: a testbed with several
// (testbed.Config.Switches) reports each (Verdict.SwitchS). Call it once
// per switch process, in the testbed's order.
func (r *Recorder) SwitchCPU(seconds float64) {
	r.switches = append(r.switches, seconds)
}

// DaemonMissing records that a daemon of the testbed had no process at
// the end of the job, why naming it ("the switch daemon in p-l0 (pid
// 812) exited during the job and was not started again"): the job did
// not run on the whole testbed, and its verdict is DaemonMissing.
func (r *Recorder) DaemonMissing(why string) {
	r.missing = append(r.missing, why)
}

// DaemonRestarted records that a daemon's process changed during the
// job, why naming it and its processes: the verdict's reason says so.
// The CPU the role counts is every one of its processes'.
func (r *Recorder) DaemonRestarted(why string) {
	r.restarted = append(r.restarted, why)
}

// Qdiscs adds the output of `tc -n ns -s -j qdisc show`, read at the
// start of the job (end false) or at its end, for the links whose tbf is
// in namespace ns.
func (r *Recorder) Qdiscs(end bool, ns string, tcJSON []byte) error {
	qs, err := ParseQdiscs(tcJSON)
	if err != nil {
		return err
	}
	phase := 0
	if end {
		phase = 1
	}
	for i, l := range r.links {
		if l.NS != ns {
			continue
		}
		q, ok := rootQdisc(qs, l.Dev)
		if !ok {
			return fmt.Errorf("fidelity: %s: no qdisc on %s", ns, l.Dev)
		}
		r.qdisc[phase][i] = &q
	}
	return nil
}

// errFewSamples: Judge needs the job's first and last readings.
var errFewSamples = errors.New("fidelity: fewer than two samples")
