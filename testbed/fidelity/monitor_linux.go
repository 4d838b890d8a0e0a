package fidelity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
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
	self0   float64      // this process's children's CPU at the start
	daemons *daemonWatch // the daemons' processes and their CPU
	netdev  []*os.File   // each of t.NetDevNS's net/dev, open
	stop    chan struct{}
	done    chan struct{}
	err     error // the sampler's first error, read after done
}

// machineProc is the machine's /proc, where a Monitor reads the
// daemons' processes.
var machineProc = procFS{root: "/proc", netns: netnsName}

// netnsName returns the name of the network namespace ns (named by `ip
// netns`) as /proc/PID/ns/net links to it.
func netnsName(ns string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/run/netns/"+ns, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("net:[%d]", st.Ino), nil
}

// Start reads the links' tbf statistics, the processes' CPU and a first
// sample, then samples every interval (zero: DefaultInterval) until Stop.
// The daemons' processes are read at every sample, so that one killed
// during the job counts until it exited, and one started again in its
// place (as the testbed started it) counts from then on; a daemon with
// no process at the end makes the verdict DaemonMissing.
func Start(ctx context.Context, t Target, interval time.Duration) (m *Monitor, err error) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	m = &Monitor{t: t, rec: NewRecorder(t.Links, 0), stop: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			m.closeNetDev()
		}
	}()
	// The ports' counters from each namespace itself, not from a
	// process in it, which may be killed during the job.
	if len(t.Links) > 0 {
		for _, ns := range t.NetDevNS {
			f, err := openNetDev(ns)
			if err != nil {
				return nil, fmt.Errorf("fidelity: the ports' counters in %s: %w", ns, err)
			}
			m.netdev = append(m.netdev, f)
		}
	}
	// tc before the CPU readings: it is this process's child too.
	if err := m.readQdiscs(ctx, false); err != nil {
		return nil, err
	}
	if _, m.self0, err = ProcessCPU("self"); err != nil {
		return nil, err
	}
	if m.daemons, err = newDaemonWatch(machineProc, os.Getpid(), t.Daemons); err != nil {
		return nil, err
	}
	m.start = time.Now()
	if err := m.sample(false); err != nil {
		return nil, err
	}
	go m.run(interval)
	return m, nil
}

// openNetDev opens the net/dev of network namespace ns (named by `ip
// netns`): the file reads that namespace's counters for as long as it
// is open, whatever runs in the namespace. It opens it from a thread
// that enters the namespace and then ends, never to run anything else.
func openNetDev(ns string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	c := make(chan opened, 1)
	go func() {
		// Never unlocked: the thread, in another namespace, ends with
		// the goroutine.
		runtime.LockOSThread()
		nsf, err := os.Open("/run/netns/" + ns)
		if err != nil {
			c <- opened{nil, err}
			return
		}
		defer nsf.Close()
		if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
			c <- opened{nil, fmt.Errorf("entering the namespace: %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/net/dev")
		c <- opened{f, err}
	}()
	o := <-c
	return o.f, o.err
}

// closeNetDev closes the net/dev files.
func (m *Monitor) closeNetDev() {
	for _, f := range m.netdev {
		f.Close()
	}
	m.netdev = nil
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
			if err := m.sample(false); err != nil && m.err == nil {
				m.err = err
			}
		}
	}
}

// sample reads /proc/stat, the bridges' namespaces' net/dev and the
// daemons' CPU (looking for a missing daemon's process if final).
func (m *Monitor) sample(final bool) error {
	at := time.Since(m.start)
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return err
	}
	// The namespaces' net/dev one after the other: ParseNetDev takes
	// every line naming an interface (the port names are unique).
	var netdev []byte
	for i, f := range m.netdev {
		b, err := readAll(f)
		if err != nil {
			return fmt.Errorf("fidelity: the ports' counters in %s: %w", m.t.NetDevNS[i], err)
		}
		netdev = append(netdev, b...)
	}
	m.daemons.sample(at, final)
	return m.rec.Sample(at, stat, netdev)
}

// readAll reads f from its start.
func readAll(f *os.File) ([]byte, error) {
	var b []byte
	buf := make([]byte, 32<<10)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		b, off = append(b, buf[:n]...), off+int64(n)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// Stop ends the sampling, takes the last sample and the processes' CPU
// (the job's processes must have been waited for) and the links' tbf
// statistics, and returns the recording for Judge.
func (m *Monitor) Stop(ctx context.Context) (*Recorder, error) {
	close(m.stop)
	<-m.done
	defer m.closeNetDev()
	if m.err != nil {
		return nil, m.err
	}
	if err := m.sample(true); err != nil {
		return nil, err
	}
	_, self1, err := ProcessCPU("self")
	if err != nil {
		return nil, err
	}
	// A daemon this process started and reaped (bench suite's) is in
	// its children's time too: counted as the daemon's, not the ranks'.
	m.rec.ProcessCPU("ranks", max(self1-m.self0-m.daemons.reapedChildren(), 0))
	m.daemons.record(m.rec)
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
