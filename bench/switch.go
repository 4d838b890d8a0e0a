package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// The switch-alone benchmark: one switch process, fed over loopback by
// members in this process, and the machine's limits measured in the same
// run — a raw UDP receive+send loop (the kernel's cost of moving the same
// bytes through one process, no protocol) and memcpy. Rates are given per
// CPU-second of the measured process (its user+system time), so that what
// the feeders cost on a shared machine does not count against it.

// Switch benchmark tests, as in SwitchResult.Test.
const (
	SwitchReduce    = "reduce"    // in-network Allreduce, f32 sum: bytes are the contributions reduced
	SwitchReplicate = "replicate" // multicast from one member to the others: bytes are the replicas sent
	SwitchMemcpy    = "memcpy"    // copy between two buffers larger than the caches, in this process
)

// Processes measured, as in SwitchResult.Process.
const (
	ProcSwitch  = "switch"   // ndma switch
	ProcUDPLoop = "udp_loop" // ndma bench udp-loop: receive a batch, send each datagram to every destination
	ProcMemcpy  = "memcpy"
)

// SwitchConfig configures RunSwitch. Zero values select the defaults.
type SwitchConfig struct {
	// Binary is the ndma binary: the switch runs as its `switch`, the
	// raw loop as its `bench udp-loop`. Required.
	Binary string
	// Members is the group's size (zero: 8).
	Members int
	// Size is the bytes of one member's Allreduce contribution and of one
	// multicast message (zero: 1 MiB).
	Size int
	// Window is the operations each member keeps in flight (zero: 4).
	Window int
	// Duration is the measured time of each point (zero: 2s).
	Duration time.Duration
	// Cores lists the GOMAXPROCS the switch runs with, one point each
	// (empty: 1); it reads from as many sockets (--readers, at most 16).
	Cores []int
	// Tests selects SwitchReduce and SwitchReplicate (empty: both).
	Tests []string
	// MTU is the datagram size of the switch, its members and the raw
	// loop (zero: 9000).
	MTU int
	// Progress, if not nil, is called after each point.
	Progress func(done, total int)
}

func (c *SwitchConfig) setDefaults() {
	if c.Members == 0 {
		c.Members = 8
	}
	if c.Size == 0 {
		c.Size = 1 << 20
	}
	if c.Window == 0 {
		c.Window = 4
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Second
	}
	if len(c.Cores) == 0 {
		c.Cores = []int{1}
	}
	if len(c.Tests) == 0 {
		c.Tests = []string{SwitchReduce, SwitchReplicate}
	}
	if c.MTU == 0 {
		c.MTU = 9000
	}
}

func (c *SwitchConfig) validate() error {
	if c.Binary == "" {
		return errors.New("bench: switch: no ndma binary to run the switch")
	}
	if c.Members < 2 || c.Members > 64 {
		return fmt.Errorf("bench: switch: %d members: want 2 to 64", c.Members)
	}
	if c.Size < 4 || c.Size%4 != 0 || c.Size > 1<<30 {
		return fmt.Errorf("bench: switch: size %d: want a multiple of 4 bytes (f32 elements) up to 1 GiB", c.Size)
	}
	if c.Window < 1 || c.Window > 64 {
		return fmt.Errorf("bench: switch: window %d: want 1 to 64", c.Window)
	}
	if c.Duration <= 0 {
		return fmt.Errorf("bench: switch: duration %v: want a positive time", c.Duration)
	}
	for _, n := range c.Cores {
		if n < 1 || n > 1024 {
			return fmt.Errorf("bench: switch: %d cores: want 1 to 1024", n)
		}
	}
	for _, t := range c.Tests {
		if t != SwitchReduce && t != SwitchReplicate {
			return fmt.Errorf("bench: switch: test %q: want %s or %s", t, SwitchReduce, SwitchReplicate)
		}
	}
	if c.MTU < 1280 || c.MTU > netio.MaxDatagram {
		return fmt.Errorf("bench: switch: MTU %d: want 1280 to %d", c.MTU, netio.MaxDatagram)
	}
	return nil
}

// SwitchResult is one point of the switch benchmark.
type SwitchResult struct {
	Test    string `json:"test"`    // SwitchReduce, SwitchReplicate or SwitchMemcpy
	Process string `json:"process"` // ProcSwitch, ProcUDPLoop or ProcMemcpy
	// Cores is the process's GOMAXPROCS (memcpy: one goroutine).
	Cores   int `json:"cores"`
	Members int `json:"members,omitempty"`
	Size    int `json:"size,omitempty"` // bytes per operation (memcpy: per copy)
	// Ops is the operations completed at every member (Allreduces,
	// multicasts; datagrams for the loop; copies for memcpy).
	Ops uint64 `json:"ops"`
	// Bytes is what the process moved: the contributions it reduced, the
	// replicas it sent, the datagram payload the loop sent, the bytes
	// copied.
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"` // wall time measured
	CPU     float64 `json:"cpu_s"`   // the process's CPU time (user+system) in that time
	// Gbps is Bytes per wall second, GbpsPerCore per CPU-second of the
	// process (Gbit/s, 10^9 bits).
	Gbps        float64 `json:"gbps"`
	GbpsPerCore float64 `json:"gbps_per_core"`
	// VsLoop is GbpsPerCore over the raw loop's in the same run (switch
	// rows).
	VsLoop float64 `json:"vs_loop,omitempty"`
	// VsOneCore is Gbps over the 1-core row's of the same test (switch
	// rows with more than one core).
	VsOneCore float64 `json:"vs_one_core,omitempty"`
}

// RunSwitch measures memcpy, then for each test the raw loop and the
// switch with each of cfg.Cores, and emits one SwitchResult per point.
func RunSwitch(ctx context.Context, cfg SwitchConfig, emit func(SwitchResult) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	total := 1 + len(cfg.Tests)*(1+len(cfg.Cores))
	done := 0
	step := func(r SwitchResult) error {
		done++
		if cfg.Progress != nil {
			cfg.Progress(done, total)
		}
		return emit(r)
	}
	if err := step(memcpyRate(cfg.Duration)); err != nil {
		return err
	}
	for _, test := range cfg.Tests {
		loop, err := udpLoopPoint(ctx, &cfg, test)
		if err != nil {
			return err
		}
		if err := step(loop); err != nil {
			return err
		}
		var one float64
		for _, cores := range cfg.Cores {
			r, err := switchPoint(ctx, &cfg, test, cores)
			if err != nil {
				return err
			}
			if loop.GbpsPerCore > 0 {
				r.VsLoop = r.GbpsPerCore / loop.GbpsPerCore
			}
			if cores == 1 {
				one = r.Gbps
			} else if one > 0 {
				r.VsOneCore = r.Gbps / one
			}
			if err := step(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// memcpyRate copies between two 64 MiB buffers (larger than the caches)
// for about d, in one goroutine.
func memcpyRate(d time.Duration) SwitchResult {
	const n = 64 << 20
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	cpu0 := rusageCPU()
	start := time.Now()
	var ops uint64
	for time.Since(start) < d/2 || ops == 0 {
		copy(dst, src)
		ops++
	}
	r := SwitchResult{Test: SwitchMemcpy, Process: ProcMemcpy, Cores: 1, Size: n, Ops: ops, Bytes: ops * n,
		Seconds: time.Since(start).Seconds(), CPU: (rusageCPU() - cpu0).Seconds()}
	r.rates()
	return r
}

func (r *SwitchResult) rates() {
	if r.Seconds > 0 {
		r.Gbps = float64(r.Bytes) * 8 / r.Seconds / 1e9
	}
	if r.CPU > 0 {
		r.GbpsPerCore = float64(r.Bytes) * 8 / r.CPU / 1e9
	}
}

// child is a process of the benchmark: the switch or the raw loop.
type child struct {
	cmd *exec.Cmd
	dir string
	log string
}

// startChild starts cfg.Binary with args and GOMAXPROCS=cores, its output
// in a log file of dir.
func startChild(dir, bin, name string, cores int, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	c := exec.Command(bin, args...)
	c.Stdout, c.Stderr = log, log
	c.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(cores))
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %s: %w", name, err)
	}
	return &child{cmd: c, dir: dir, log: logPath}, nil
}

// cpu is the child's CPU time so far, in seconds.
func (c *child) cpu() (float64, error) {
	self, _, err := procCPU(strconv.Itoa(c.cmd.Process.Pid))
	return self, err
}

// stop ends the child (SIGTERM, then SIGKILL after 5s).
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// logTail is the end of the child's log, for an error message.
func (c *child) logTail() string {
	b, _ := os.ReadFile(c.log)
	return tail(string(b), 5)
}

// measure runs load until d has passed, with the child's CPU time and the
// wall time taken around it, and fills r's Seconds and CPU.
func (c *child) measure(r *SwitchResult, d time.Duration, load func(deadline time.Time) error) error {
	cpu0, err := c.cpu()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := load(start.Add(d)); err != nil {
		return err
	}
	r.Seconds = time.Since(start).Seconds()
	cpu1, err := c.cpu()
	if err != nil {
		return err
	}
	r.CPU = cpu1 - cpu0
	return nil
}

// switchPoint starts a switch with cores and measures test through it.
func switchPoint(ctx context.Context, cfg *SwitchConfig, test string, cores int) (SwitchResult, error) {
	r := SwitchResult{Test: test, Process: ProcSwitch, Cores: cores, Members: cfg.Members, Size: cfg.Size}
	dir, err := os.MkdirTemp("", "ndma-bench-switch")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := []byte(hex.EncodeToString(tok[:]))
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, append(token, '\n'), 0o600); err != nil {
		return r, err
	}
	port, err := freeUDPPort()
	if err != nil {
		return r, err
	}
	sw := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String()
	c, err := startChild(dir, cfg.Binary, "switch", cores, "switch", "--listen", sw, "--insecure", "--token-file", tokenFile,
		"--mtu", strconv.Itoa(cfg.MTU), "--readers", strconv.Itoa(min(cores, 16)))
	if err != nil {
		return r, err
	}
	defer c.stop()
	gs, closeAll, err := joinSwitchBench(ctx, cfg, sw, token)
	if err != nil {
		return r, fmt.Errorf("%w (switch log: %s)", err, c.logTail())
	}
	defer closeAll()
	var perOp uint64
	var run func(deadline time.Time, ops *uint64) error
	switch test {
	case SwitchReduce:
		run = reduceLoad(ctx, cfg, gs)
		perOp = uint64(cfg.Members) * uint64(cfg.Size)
	case SwitchReplicate:
		run = replicateLoad(ctx, cfg, gs)
		perOp = uint64(cfg.Members-1) * uint64(cfg.Size)
	}
	// A short warm-up: the streams' windows open, the switch's pool
	// fills.
	var warm uint64
	if err := run(time.Now().Add(min(cfg.Duration/4, 500*time.Millisecond)), &warm); err != nil {
		return r, fmt.Errorf("%w (switch log: %s)", err, c.logTail())
	}
	err = c.measure(&r, cfg.Duration, func(deadline time.Time) error { return run(deadline, &r.Ops) })
	if err != nil {
		return r, fmt.Errorf("%w (switch log: %s)", err, c.logTail())
	}
	r.Bytes = r.Ops * perOp
	r.rates()
	return r, nil
}

// joinSwitchBench makes cfg.Members endpoints join one job at sw.
func joinSwitchBench(ctx context.Context, cfg *SwitchConfig, sw string, token []byte) ([]*endpoint.Group, func(), error) {
	n := cfg.Members
	eps := make([]*endpoint.Endpoint, 0, n)
	closeAll := func() {
		for _, ep := range eps {
			ep.Close()
		}
	}
	for range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, endpoint.Options{})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		eps = append(eps, ep)
	}
	jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			gs[i], errs[i] = ep.JoinJob(jctx, sw, "bench-switch", n, i, endpoint.FabricOptions{Token: token})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("bench: switch: join: %w", err)
	}
	return gs, closeAll, nil
}

// reduceLoad returns a load that runs Allreduces (f32 sum) at every
// member, cfg.Window in flight, started in the same order everywhere,
// until the deadline; ops counts those complete at every member. The
// results are checked.
func reduceLoad(ctx context.Context, cfg *SwitchConfig, gs []*endpoint.Group) func(time.Time, *uint64) error {
	n, elems := len(gs), cfg.Size/4
	send := make([][]byte, n)
	for i := range send {
		send[i] = make([]byte, cfg.Size)
		for j := range elems {
			binary.LittleEndian.PutUint32(send[i][4*j:], math.Float32bits(float32(i+j%7)))
		}
	}
	recv := make([][][]byte, cfg.Window)
	for w := range recv {
		recv[w] = make([][]byte, n)
		for i := range recv[w] {
			recv[w][i] = make([]byte, cfg.Size)
		}
	}
	check := func(b []byte) error {
		for j := range min(elems, 64) {
			want := float32(0)
			for i := range n {
				want += float32(i + j%7)
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:])); got != want {
				return fmt.Errorf("bench: switch: Allreduce element %d is %v, want %v", j, got, want)
			}
		}
		return nil
	}
	return func(deadline time.Time, ops *uint64) error {
		start := func(w int) ([]*endpoint.Op, error) {
			round := make([]*endpoint.Op, n)
			for i, g := range gs {
				op, err := g.StartAllreduce(send[i], recv[w][i], wire.DtypeF32, wire.AluAdd, endpoint.ReduceOptions{})
				if err != nil {
					return nil, fmt.Errorf("bench: switch: Allreduce at member %d: %w", i, err)
				}
				round[i] = op
			}
			return round, nil
		}
		finish := func(round []*endpoint.Op, w int) error {
			if err := waitAll(ctx, round); err != nil {
				return err
			}
			return check(recv[w][0])
		}
		return windowed(cfg.Window, deadline, ops, start, finish)
	}
}

// replicateLoad returns a load that multicasts from member 0 to the
// others, cfg.Window messages in flight, until the deadline; ops counts
// the messages every member received. What they received is checked.
func replicateLoad(ctx context.Context, cfg *SwitchConfig, gs []*endpoint.Group) func(time.Time, *uint64) error {
	n := len(gs)
	data := make([]byte, cfg.Size)
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	recv := make([][][]byte, cfg.Window)
	for w := range recv {
		recv[w] = make([][]byte, n)
		for i := 1; i < n; i++ {
			recv[w][i] = make([]byte, cfg.Size)
		}
	}
	return func(deadline time.Time, ops *uint64) error {
		start := func(w int) ([]*endpoint.Op, error) {
			round := make([]*endpoint.Op, n)
			for i := 1; i < n; i++ {
				op, err := gs[i].StartRecv(0, recv[w][i])
				if err != nil {
					return nil, fmt.Errorf("bench: switch: receive at member %d: %w", i, err)
				}
				round[i] = op
			}
			op, err := gs[0].StartMulticast(data, endpoint.MulticastOptions{})
			if err != nil {
				return nil, fmt.Errorf("bench: switch: multicast: %w", err)
			}
			round[0] = op
			return round, nil
		}
		finish := func(round []*endpoint.Op, w int) error {
			if err := waitAll(ctx, round); err != nil {
				return err
			}
			if got := recv[w][n-1]; string(got[:min(len(got), 4096)]) != string(data[:min(len(data), 4096)]) {
				return errors.New("bench: switch: a member received other bytes than were multicast")
			}
			return nil
		}
		return windowed(cfg.Window, deadline, ops, start, finish)
	}
}

// windowed keeps window rounds in flight until the deadline, then lets
// those in flight finish; ops counts the rounds finished.
func windowed(window int, deadline time.Time, ops *uint64, start func(w int) ([]*endpoint.Op, error), finish func([]*endpoint.Op, int) error) error {
	inflight := make([][]*endpoint.Op, window)
	var next, oldest int
	for {
		for next-oldest < window && time.Now().Before(deadline) {
			round, err := start(next % window)
			if err != nil {
				return err
			}
			inflight[next%window] = round
			next++
		}
		if oldest == next {
			return nil
		}
		if err := finish(inflight[oldest%window], oldest%window); err != nil {
			return err
		}
		oldest++
		*ops++
	}
}

// waitAll waits for every op of ops (nil entries skipped) to complete.
func waitAll(ctx context.Context, ops []*endpoint.Op) error {
	for i, op := range ops {
		if op == nil {
			continue
		}
		select {
		case <-op.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
		if op.Err != nil {
			return fmt.Errorf("bench: switch: member %d: %w", i, op.Err)
		}
	}
	return nil
}

// SwitchTable writes SwitchResults as an aligned table at Flush.
type SwitchTable struct {
	w    io.Writer
	rows []SwitchResult
}

// NewSwitchTable returns a table writing to w.
func NewSwitchTable(w io.Writer) *SwitchTable { return &SwitchTable{w: w} }

// Write adds a row.
func (t *SwitchTable) Write(r SwitchResult) error {
	t.rows = append(t.rows, r)
	return nil
}

// Flush prints the rows.
func (t *SwitchTable) Flush() error {
	tw := tabwriter.NewWriter(t.w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "test\tprocess\tcores\tsize\tops\tGbit/s\tCPU used\tGbit/s per core\tvs UDP loop\tvs 1 core\t")
	for _, r := range t.rows {
		vsLoop, vsOne, busy := "", "", ""
		if r.VsLoop > 0 {
			vsLoop = fmt.Sprintf("%.2fx", r.VsLoop)
		}
		if r.VsOneCore > 0 {
			vsOne = fmt.Sprintf("%.2fx", r.VsOneCore)
		}
		if r.Seconds > 0 {
			busy = fmt.Sprintf("%.2f", r.CPU/r.Seconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%.2f\t%s\t%.2f\t%s\t%s\t\n", r.Test, r.Process, r.Cores, FormatSize(r.Size), r.Ops,
			r.Gbps, busy, r.GbpsPerCore, vsLoop, vsOne)
	}
	return tw.Flush()
}

// SwitchJSON writes SwitchResults as JSON Lines.
func SwitchJSON(w io.Writer) func(SwitchResult) error {
	enc := json.NewEncoder(w)
	return func(r SwitchResult) error { return enc.Encode(r) }
}
