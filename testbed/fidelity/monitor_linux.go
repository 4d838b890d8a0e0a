package fidelity

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

// DefaultInterval is a Monitor's sampling interval when Start is given
// zero.
const DefaultInterval = 50 * time.Millisecond

// tcTimeout bounds one `tc -s -j qdisc show`.
const tcTimeout = 10 * time.Second

// Monitor watches one job on the testbed: Start before the job's
// processes start, Stop after they have been waited for.
type Monitor struct {
	t       Target
	rec     *Recorder
	start   time.Time
	self0   float64   // this process's children's CPU at the start
	daemon0 []float64 // each daemon's CPU at the start
	stop    chan struct{}
	done    chan struct{}
	err     error // the sampler's first error, read after done
}

// Start reads the links' tbf statistics, the processes' CPU and a first
// sample, then samples every interval (zero: DefaultInterval) until Stop.
func Start(ctx context.Context, t Target, interval time.Duration) (*Monitor, error) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	m := &Monitor{t: t, rec: NewRecorder(t.Links, 0), stop: make(chan struct{}), done: make(chan struct{})}
	// tc before the CPU readings: it is this process's child too.
	if err := m.readQdiscs(ctx, false); err != nil {
		return nil, err
	}
	var err error
	if _, m.self0, err = ProcessCPU("self"); err != nil {
		return nil, err
	}
	for _, d := range t.Daemons {
		s, _, err := ProcessCPU(strconv.Itoa(d.PID))
		if err != nil {
			return nil, fmt.Errorf("fidelity: the %s daemon (pid %d): %w", d.Role, d.PID, err)
		}
		m.daemon0 = append(m.daemon0, s)
	}
	m.start = time.Now()
	if err := m.sample(); err != nil {
		return nil, err
	}
	go m.run(interval)
	return m, nil
}

func (m *Monitor) run(interval time.Duration) {
	defer close(m.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
			if err := m.sample(); err != nil && m.err == nil {
				m.err = err
			}
		}
	}
}

// sample reads /proc/stat and the bridges' namespaces' net/dev.
func (m *Monitor) sample() error {
	at := time.Since(m.start)
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return err
	}
	// The namespaces' net/dev one after the other: ParseNetDev takes
	// every line naming an interface (the port names are unique).
	var netdev []byte
	if len(m.t.Links) > 0 {
		for _, pid := range m.t.NetDevPIDs {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/dev")
			if err != nil {
				return fmt.Errorf("fidelity: the ports' counters: %w", err)
			}
			netdev = append(netdev, b...)
		}
	}
	return m.rec.Sample(at, stat, netdev)
}

// Stop ends the sampling, takes the last sample and the processes' CPU
// (the job's processes must have been waited for) and the links' tbf
// statistics, and returns the recording for Judge.
func (m *Monitor) Stop(ctx context.Context) (*Recorder, error) {
	close(m.stop)
	<-m.done
	if m.err != nil {
		return nil, m.err
	}
	if err := m.sample(); err != nil {
		return nil, err
	}
	_, self1, err := ProcessCPU("self")
	if err != nil {
		return nil, err
	}
	m.rec.ProcessCPU("ranks", max(self1-m.self0, 0))
	for i, d := range m.t.Daemons {
		s, _, err := ProcessCPU(strconv.Itoa(d.PID))
		if err != nil {
			return nil, fmt.Errorf("fidelity: the %s daemon (pid %d) after the job: %w", d.Role, d.PID, err)
		}
		m.rec.ProcessCPU(d.Role, max(s-m.daemon0[i], 0))
		if d.Role == "switch" {
			m.rec.SwitchCPU(max(s-m.daemon0[i], 0))
		}
	}
	if err := m.readQdiscs(ctx, true); err != nil {
		return nil, err
	}
	return m.rec, nil
}

// Started is when the monitor took its first sample: the origin of
// Recorder.Window's times.
func (m *Monitor) Started() time.Time { return m.start }

// readQdiscs reads the tbf statistics of every namespace holding a
// watched link's tbf.
func (m *Monitor) readQdiscs(ctx context.Context, end bool) error {
	var nss []string
	for _, l := range m.t.Links {
		if !slices.Contains(nss, l.NS) {
			nss = append(nss, l.NS)
		}
	}
	for _, ns := range nss {
		cctx, cancel := context.WithTimeout(ctx, tcTimeout)
		out, err := exec.CommandContext(cctx, "tc", "-n", ns, "-s", "-j", "qdisc", "show").Output()
		cancel()
		if err != nil {
			return fmt.Errorf("fidelity: tc -n %s -s -j qdisc show: %w", ns, err)
		}
		if err := m.rec.Qdiscs(end, ns, out); err != nil {
			return err
		}
	}
	return nil
}
