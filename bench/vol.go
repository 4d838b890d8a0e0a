package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
)

// Volume I/O modes.
const (
	// VolMulticast: writes are one multicast to the extent's replicas,
	// reads one anycast to one of them.
	VolMulticast = "multicast"
	// VolController: every I/O goes to a gateway, which forwards it.
	VolController = "controller"
)

// Volume I/O patterns.
var volPatterns = []string{"randread", "randwrite", "randrw", "seqread", "seqwrite"}

// VolConfig configures RunVol.
type VolConfig struct {
	// Switch is a running fabric's forwarding node with storage nodes and
	// a gateway (ndma testbed up --stornodes N --gateway); empty starts a
	// switch, Nodes storage nodes and a gateway in this process on
	// loopback.
	Switch string
	Fabric endpoint.FabricOptions
	// Service is the storage service (stor.DefaultService when empty);
	// Gateway the gateway's service (its default name when empty).
	Service, Gateway string
	// Nodes is the in-process storage nodes (default 3).
	Nodes int
	// Modes, Patterns, QDs: the measurement points (every combination).
	Modes, Patterns []string
	QDs             []int
	// BS is the block size of random patterns (default 4 KiB), SeqBS of
	// sequential ones (default 1 MiB).
	BS, SeqBS int
	// Clients is the clients this process runs, each with its own
	// endpoint and volume (default 1).
	Clients int
	// Rank and Ranks name this process among several that run the same
	// points at once (ndma testbed run): its volumes are its own.
	Rank, Ranks int
	// Sync, when set, is called before and after each point with the
	// point's index; it returns when every process reached it (a barrier).
	Sync func(ctx context.Context) error
	// Duration is each point's measured time (default 3 s), after a
	// warm-up of a tenth of it.
	Duration time.Duration
	// VolSize, Extent and Replicas shape each client's volume (default
	// 256 MiB, 4 MiB, 3).
	VolSize, Extent uint64
	Replicas        int
	// MTU of the endpoints (default 9000).
	MTU int
	// EndpointOptions are the clients' (a credential, in a sealed fabric).
	EndpointOptions endpoint.Options
	// NodePIDs and GatewayPIDs, when set, are the storage nodes' and the
	// gateway's processes on this machine: each row then gives their CPU
	// time per I/O (ndma testbed run passes them).
	NodePIDs, GatewayPIDs []int
	// SwitchNS, when set, is the testbed's switch namespace: each row then
	// gives the bytes every link carried (its ports' counters).
	SwitchNS string
	// Progress, if not nil, is called after each point.
	Progress func(done, total int)
}

func (c *VolConfig) setDefaults() {
	if c.Service == "" {
		c.Service = stor.DefaultService
	}
	if c.Gateway == "" {
		c.Gateway = stor.GatewayName(c.Service)
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{VolMulticast, VolController}
	}
	if len(c.Patterns) == 0 {
		c.Patterns = volPatterns
	}
	if len(c.QDs) == 0 {
		c.QDs = []int{1, 32}
	}
	if c.BS == 0 {
		c.BS = 4 << 10
	}
	if c.SeqBS == 0 {
		c.SeqBS = 1 << 20
	}
	if c.Clients == 0 {
		c.Clients = 1
	}
	if c.Ranks == 0 {
		c.Ranks = 1
	}
	if c.Duration == 0 {
		c.Duration = 3 * time.Second
	}
	if c.VolSize == 0 {
		c.VolSize = 256 << 20
	}
	if c.Extent == 0 {
		c.Extent = stor.DefaultExtent
	}
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.MTU == 0 {
		c.MTU = 9000
	}
}

func (c *VolConfig) validate() error {
	for _, m := range c.Modes {
		if m != VolMulticast && m != VolController {
			return fmt.Errorf("bench: mode %q: want %s or %s", m, VolMulticast, VolController)
		}
	}
	for _, p := range c.Patterns {
		if !slices.Contains(volPatterns, p) {
			return fmt.Errorf("bench: pattern %q: want one of %s", p, strings.Join(volPatterns, ", "))
		}
	}
	for _, q := range c.QDs {
		if q < 1 || q > 1024 {
			return fmt.Errorf("bench: queue depth %d: want 1 to 1024", q)
		}
	}
	if c.BS < 512 || c.BS > stor.MaxIO || c.SeqBS < 512 || c.SeqBS > stor.MaxIO {
		return fmt.Errorf("bench: block sizes %d and %d: want 512 B to %d", c.BS, c.SeqBS, stor.MaxIO)
	}
	if c.Clients < 1 || c.Clients > 64 {
		return fmt.Errorf("bench: %d clients: want 1 to 64", c.Clients)
	}
	if uint64(c.SeqBS) > c.VolSize || c.VolSize%c.Extent != 0 {
		return fmt.Errorf("bench: volume of %d bytes: want a multiple of the extent (%d) holding a block", c.VolSize, c.Extent)
	}
	return nil
}

// VolResult is one measurement point, over every client of every process
// that ran it.
type VolResult struct {
	Mode    string        `json:"mode"`
	Pattern string        `json:"pattern"`
	BS      int           `json:"bs"`
	QD      int           `json:"qd"`
	Clients int           `json:"clients"`
	IOs     int           `json:"ios"`
	IOPS    float64       `json:"iops"`
	MBps    float64       `json:"mb_per_s"` // payload, 10^6 bytes per second
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Errors  int           `json:"errors"`
	// FirstError is the first failed I/O's error (empty without errors).
	FirstError string `json:"first_error,omitempty"`
	// NodeCPU and GatewayCPU are the storage nodes' and the gateway's CPU
	// time (user and system) during the point, in seconds, and
	// NodeCPUPerIO and GatewayCPUPerIO the same per I/O (where their pids
	// were given).
	// Links are the bytes each testbed link carried during the point, by
	// node (h0, s0, g0...), where SwitchNS was given; Seconds is the
	// point's measured time.
	Links           map[string]LinkBytes `json:"links,omitempty"`
	Seconds         float64              `json:"seconds"`
	NodeCPU         float64              `json:"node_cpu_s,omitempty"`
	GatewayCPU      float64              `json:"gateway_cpu_s,omitempty"`
	NodeCPUPerIO    time.Duration        `json:"node_cpu_per_io_ns,omitempty"`
	GatewayCPUPerIO time.Duration        `json:"gateway_cpu_per_io_ns,omitempty"`
	// Against the multicast mode's same point, on controller rows: P50
	// over multicast's, and multicast's IOPS over this one's.
	P50Ratio  float64 `json:"p50_ratio,omitempty"`
	IOPSRatio float64 `json:"iops_gain,omitempty"`
	// Samples are the latencies (kept to merge processes' results; not
	// printed).
	Samples []time.Duration `json:"-"`
}

// RunVol measures volume I/O at every point of cfg and emits a row per
// point (in processes other than rank 0 emit is not called).
func RunVol(ctx context.Context, cfg VolConfig, gather func(ctx context.Context, r VolResult) ([]VolResult, error), emit func(VolResult) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Switch == "" {
		stop, sw, fab, err := startVolFabric(ctx, &cfg)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Switch, cfg.Fabric = sw, fab
	}
	clients := make([]*stor.Client, cfg.Clients)
	names := make([]string, cfg.Clients)
	for i := range clients {
		ep, err := endpoint.Listen(":0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}, OpTimeout: stor.IOTimeout}, cfg.EndpointOptions)
		if err != nil {
			return err
		}
		defer ep.Close()
		clients[i] = stor.NewClient(ep, cfg.Switch, stor.ClientOptions{Fabric: cfg.Fabric, Service: cfg.Service, Window: 64})
		names[i] = fmt.Sprintf("bench-%d-%d", cfg.Rank, i)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _ = clients[i].Remove(cctx, names[i], true) // a previous run's
		_, err = clients[i].Create(cctx, stor.VolumeSpec{Name: names[i], Size: cfg.VolSize, Extent: cfg.Extent, Replicas: cfg.Replicas})
		cancel()
		if err != nil {
			return fmt.Errorf("bench: volume %s: %w", names[i], err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = clients[i].Remove(cctx, names[i], true)
			cancel()
		}()
	}
	type point struct {
		mode, pattern string
		qd            int
	}
	var plan []point
	for _, p := range cfg.Patterns {
		for _, q := range cfg.QDs {
			for _, m := range cfg.Modes {
				plan = append(plan, point{m, p, q})
			}
		}
	}
	base := map[string]VolResult{}
	for i, pt := range plan {
		r, err := volPoint(ctx, &cfg, clients, names, pt.mode, pt.pattern, pt.qd)
		if err != nil {
			return err
		}
		if gather != nil {
			rs, err := gather(ctx, r)
			if err != nil {
				return err
			}
			if rs == nil {
				continue // not rank 0
			}
			r = mergeVol(rs)
		}
		if r.IOs > 0 {
			r.NodeCPUPerIO = time.Duration(r.NodeCPU / float64(r.IOs) * 1e9)
			r.GatewayCPUPerIO = time.Duration(r.GatewayCPU / float64(r.IOs) * 1e9)
		}
		key := fmt.Sprintf("%s/%d", pt.pattern, pt.qd)
		if pt.mode == VolMulticast {
			base[key] = r
		} else if b, ok := base[key]; ok && b.P50 > 0 && r.IOPS > 0 {
			r.P50Ratio = float64(r.P50) / float64(b.P50)
			r.IOPSRatio = b.IOPS / r.IOPS
		}
		if err := emit(r); err != nil {
			return err
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(plan))
		}
	}
	return nil
}

// mergeVol adds up the clients of several processes.
func mergeVol(rs []VolResult) VolResult {
	m := rs[0]
	m.Samples = nil
	m.IOs, m.IOPS, m.MBps, m.Errors, m.Clients = 0, 0, 0, 0, 0
	var all []time.Duration
	for _, r := range rs {
		m.IOs += r.IOs
		m.IOPS += r.IOPS
		m.MBps += r.MBps
		m.Errors += r.Errors
		m.Clients += r.Clients
		m.Seconds = max(m.Seconds, r.Seconds)
		if m.Links == nil {
			m.Links = r.Links // rank 0's: only the process given the namespace measures
		}
		m.NodeCPU = max(m.NodeCPU, r.NodeCPU) // only the processes given the pids measure
		m.GatewayCPU = max(m.GatewayCPU, r.GatewayCPU)
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
		all = append(all, r.Samples...)
	}
	m.P50, m.P99 = volPercentiles(all)
	return m
}

// volPercentiles is percentiles, zero for no sample.
func volPercentiles(s []time.Duration) (p50, p99 time.Duration) {
	if len(s) == 0 {
		return 0, 0
	}
	return percentiles(s)
}

// volPoint runs one point on every client at once.
func volPoint(ctx context.Context, cfg *VolConfig, clients []*stor.Client, names []string, mode, pattern string, qd int) (VolResult, error) {
	write := pattern == "randwrite" || pattern == "seqwrite" || pattern == "randrw"
	bs := cfg.BS
	if strings.HasPrefix(pattern, "seq") {
		bs = cfg.SeqBS
	}
	vols := make([]*stor.Volume, len(clients))
	for i, c := range clients {
		o := stor.OpenOptions{Write: write}
		if mode == VolController {
			o.Controller = cfg.Gateway
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		v, err := c.Open(octx, names[i], o)
		cancel()
		if err != nil {
			return VolResult{}, fmt.Errorf("bench: open %s: %w", names[i], err)
		}
		vols[i] = v
	}
	defer func() {
		for _, v := range vols {
			v.Close()
		}
	}()
	if cfg.Sync != nil {
		if err := cfg.Sync(ctx); err != nil {
			return VolResult{}, err
		}
	}
	node0, gw0 := pidsCPU(cfg.NodePIDs), pidsCPU(cfg.GatewayPIDs)
	links0 := linkCounters(ctx, cfg.SwitchNS)
	warm := cfg.Duration / 10
	start := time.Now()
	measureFrom, end := start.Add(warm), start.Add(warm+cfg.Duration)
	var (
		mu      sync.Mutex
		samples []time.Duration
		ios     int
		errs    int
		first   error
		wg      sync.WaitGroup
	)
	blocks := int(cfg.VolSize) / bs
	for ci, v := range vols {
		for w := range qd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
				buf := make([]byte, bs)
				for i := range buf {
					buf[i] = byte(rng.Uint32())
				}
				seq := w * blocks / qd // each worker its own stretch
				var local []time.Duration
				n, nerr := 0, 0
				var ferr error
				for {
					t0 := time.Now()
					// A worker whose I/Os all started before the window
					// (one slow I/O can span it on a loaded machine)
					// measures one more, so that every point has samples.
					if !t0.Before(end) && n+nerr > 0 || ctx.Err() != nil {
						break
					}
					var off int64
					if strings.HasPrefix(pattern, "seq") {
						off = int64(seq%blocks) * int64(bs)
						seq++
					} else {
						off = int64(rng.IntN(blocks)) * int64(bs)
					}
					wr := pattern == "randwrite" || pattern == "seqwrite" || pattern == "randrw" && rng.IntN(10) < 3
					var err error
					if wr {
						_, err = v.WriteAt(buf, off)
					} else {
						_, err = v.ReadAt(buf, off)
					}
					d := time.Since(t0)
					if t0.Before(measureFrom) {
						continue
					}
					if err != nil {
						nerr++
						if ferr == nil {
							ferr = err
						}
						continue
					}
					n++
					local = append(local, d)
				}
				mu.Lock()
				samples = append(samples, local...)
				ios += n
				errs += nerr
				if first == nil {
					first = ferr
				}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	// The I/Os counted started in the window; the last ones end after
	// it.
	elapsed := time.Since(measureFrom)
	nodeCPU, gwCPU := pidsCPU(cfg.NodePIDs)-node0, pidsCPU(cfg.GatewayPIDs)-gw0
	links := linkCounters(ctx, cfg.SwitchNS)
	for name, b := range links {
		a := links0[name]
		links[name] = LinkBytes{ToNode: b.ToNode - a.ToNode, FromNode: b.FromNode - a.FromNode}
	}
	if cfg.Sync != nil {
		if err := cfg.Sync(ctx); err != nil {
			return VolResult{}, err
		}
	}
	if ios == 0 && first != nil {
		return VolResult{}, fmt.Errorf("bench: %s %s qd %d: every I/O failed: %w", mode, pattern, qd, first)
	}
	r := VolResult{Mode: mode, Pattern: pattern, BS: bs, QD: qd, Clients: len(vols), IOs: ios, Errors: errs, Samples: samples,
		NodeCPU: nodeCPU, GatewayCPU: gwCPU, Links: links, Seconds: elapsed.Seconds()}
	if first != nil {
		r.FirstError = first.Error()
	}
	r.IOPS = float64(ios) / elapsed.Seconds()
	r.MBps = r.IOPS * float64(bs) / 1e6
	r.P50, r.P99 = volPercentiles(slices.Clone(samples))
	return r, nil
}

// startVolFabric starts a switch, storage nodes and a gateway on loopback.
func startVolFabric(ctx context.Context, cfg *VolConfig) (stop func(), sw string, fab endpoint.FabricOptions, err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	token := []byte(fmt.Sprintf("bench vol %d", rand.Uint64()))
	fab = endpoint.FabricOptions{Token: token}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		return nil, "", fab, err
	}
	s, err := fabric.New(fabric.Config{Token: token, Transport: transport.Config{MTU: cfg.MTU}})
	if err != nil {
		conn.Close()
		return nil, "", fab, err
	}
	srv := fabric.NewServer(conn, s, nil)
	stops = append(stops, func() { srv.Close() })
	sw = conn.LocalAddr().String()
	dir, err := os.MkdirTemp("", "ndma-bench-vol-")
	if err != nil {
		return nil, "", fab, err
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range cfg.Nodes {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, endpoint.Options{})
		if err != nil {
			return nil, "", fab, err
		}
		stops = append(stops, func() { ep.Close() })
		n, err := stor.NewNode(ep, stor.NodeConfig{Dir: filepath.Join(dir, fmt.Sprint(i)), ID: i, Switch: sw, Fabric: fab, Service: cfg.Service})
		if err != nil {
			return nil, "", fab, err
		}
		if err := n.Start(sctx); err != nil {
			return nil, "", fab, err
		}
		stops = append(stops, n.Close)
	}
	gep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}, OpTimeout: stor.IOTimeout}, endpoint.Options{})
	if err != nil {
		return nil, "", fab, err
	}
	stops = append(stops, func() { gep.Close() })
	gw := stor.NewGateway(gep, stor.GatewayConfig{Switch: sw, Fabric: fab, Service: cfg.Service, Name: cfg.Gateway})
	if err := gw.Start(sctx); err != nil {
		return nil, "", fab, err
	}
	stops = append(stops, gw.Close)
	return stop, sw, fab, nil
}

// VolTable writes VolResults as an aligned table.
type VolTable struct {
	w    io.Writer
	rows []VolResult
}

// NewVolTable returns a table writing to w at Flush.
func NewVolTable(w io.Writer) *VolTable { return &VolTable{w: w} }

// Write adds a row.
func (t *VolTable) Write(r VolResult) error {
	t.rows = append(t.rows, r)
	return nil
}

// Flush prints the rows.
func (t *VolTable) Flush() error {
	tw := tabwriter.NewWriter(t.w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pattern\tbs\tqd\tclients\tmode\tIOPS\tMB/s\tp50\tp99\tp50 vs multicast\tmulticast IOPS gain\tnode CPU/IO\tgateway CPU/IO\tbusiest link\terrors\t")
	for _, r := range t.rows {
		ratio, gain := "", ""
		if r.P50Ratio > 0 {
			ratio, gain = fmt.Sprintf("%.2fx", r.P50Ratio), fmt.Sprintf("%.2fx", r.IOPSRatio)
		}
		ncpu, gcpu := "", ""
		if r.NodeCPUPerIO > 0 {
			ncpu = fmtDur(r.NodeCPUPerIO)
		}
		if r.GatewayCPUPerIO > 0 {
			gcpu = fmtDur(r.GatewayCPUPerIO)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.Pattern, FormatSize(r.BS), r.QD, r.Clients, r.Mode,
			r.IOPS, r.MBps, fmtDur(r.P50), fmtDur(r.P99), ratio, gain, ncpu, gcpu, busiest(r), r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range t.rows {
		if r.FirstError != "" {
			fmt.Fprintf(t.w, "%s %s qd %d %s: %d I/Os failed, the first: %s\n", r.Pattern, FormatSize(r.BS), r.QD, r.Mode, r.Errors, r.FirstError)
		}
	}
	return nil
}

func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
	return fmt.Sprintf("%.2fms", float64(d)/1e6)
}

// VolJSON writes VolResults as JSON Lines.
func VolJSON(w io.Writer) func(VolResult) error {
	enc := json.NewEncoder(w)
	return func(r VolResult) error { return enc.Encode(r) }
}

// pidsCPU is the CPU time (user and system) of the processes pids, in
// seconds; processes it cannot read count 0.
func pidsCPU(pids []int) float64 {
	var t float64
	for _, p := range pids {
		if self, _, err := procCPU(strconv.Itoa(p)); err == nil {
			t += self
		}
	}
	return t
}

// LinkBytes are the bytes one link carried: toward the node and from it.
type LinkBytes struct {
	ToNode   uint64 `json:"to_node"`
	FromNode uint64 `json:"from_node"`
}

// linkCounters reads the byte counters of the switch namespace's ports
// (named after the nodes): a port's tx is its node's downlink, its rx the
// node's uplink. Nil without a namespace or when ip fails.
func linkCounters(ctx context.Context, ns string) map[string]LinkBytes {
	if ns == "" {
		return nil
	}
	out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-s", "-j", "link", "show").Output()
	if err != nil {
		return nil
	}
	var ifs []struct {
		Name  string `json:"ifname"`
		Stats struct {
			RX struct{ Bytes uint64 } `json:"rx"`
			TX struct{ Bytes uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal(out, &ifs) != nil {
		return nil
	}
	m := map[string]LinkBytes{}
	for _, i := range ifs {
		if i.Name == "lo" || strings.HasPrefix(i.Name, "br") {
			continue
		}
		m[i.Name] = LinkBytes{ToNode: i.Stats.TX.Bytes, FromNode: i.Stats.RX.Bytes}
	}
	return m
}

// busiest names the link direction that carried the most bytes, with its
// rate ("s1 to node 12.3 MB/s"); empty without link counters.
func busiest(r VolResult) string {
	var name, dir string
	var top uint64
	for n, b := range r.Links {
		if b.ToNode > top {
			name, dir, top = n, "down", b.ToNode
		}
		if b.FromNode > top {
			name, dir, top = n, "up", b.FromNode
		}
	}
	if top == 0 || r.Seconds <= 0 {
		return ""
	}
	return fmt.Sprintf("%s %s %.1f MB/s", name, dir, float64(top)/r.Seconds/1e6)
}
