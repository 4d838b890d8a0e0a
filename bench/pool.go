package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/poolmap"
)

// Op names of the pool benchmark's rows.
const (
	OpPoolRead  = "pool_read"  // latency: ReadAt of one size; bandwidth: a sequential transfer
	OpPoolWrite = "pool_write" // bandwidth: a sequential transfer
)

// PoolConfig configures RunPool. Zero values select the defaults.
type PoolConfig struct {
	// Switch is the forwarding node of an external pool ("host:port",
	// e.g. in the testbed); Token its fabric token, which must not be
	// empty unless Insecure is set (a switch that runs without one).
	// Empty Switch starts a switch and Nodes memory nodes in-process on
	// loopback, under Token or, when it is empty, a random one.
	Switch   string
	Token    []byte
	Insecure bool
	// Security, with Switch, is the benchmark's credential (of role
	// client) for a pool whose switch and memory nodes run with
	// credentials: every datagram is then sealed with SecurityOptions.
	// Nil: datagrams travel unsealed. Without Switch it must be nil.
	Security        *secure.Identity
	SecurityOptions secure.Options
	// Node and NodeKey name a memory node and its region for the direct
	// READ baseline of the latency test with an external pool (reads
	// only, at offset 0). Empty: no baseline with Switch.
	Node    string
	NodeKey uint64
	// Binary, if set (and Switch is not), is an ndma binary: the switch
	// and the memory nodes run as its `switch` and `memd` processes on
	// loopback, as deployed, instead of in this process.
	Binary string
	// Nodes is the in-process memory nodes (zero: 4), each lending
	// NodeSize bytes (zero: Transfer plus 1 MiB and two stripes).
	Nodes    int
	NodeSize int
	// Tests selects latency (pool ReadAt against a direct READ of the
	// same size) and bandwidth (a sequential transfer through a region
	// striped over every node, against the same transfer through a
	// region on one node). Zero means both.
	Tests Tests
	// Size is the latency test's read size; zero means 4 KiB.
	Size int
	// Iters is the latency samples; zero means 2000.
	Iters int
	// Transfer is the bandwidth test's bytes; zero means 64 MiB.
	Transfer int
	// Stripe of the bandwidth test's regions; zero means pool.DefaultStripe.
	Stripe int
	// MTU is the transport MTU; zero means 9000.
	MTU int
}

func (c *PoolConfig) setDefaults() {
	if c.Nodes == 0 {
		c.Nodes = 4
	}
	if c.Tests == 0 {
		c.Tests = TestAll
	}
	if c.Size == 0 {
		c.Size = 4 << 10
	}
	if c.Iters == 0 {
		c.Iters = 2000
	}
	if c.Transfer == 0 {
		c.Transfer = 64 << 20
	}
	if c.Stripe == 0 {
		c.Stripe = pool.DefaultStripe
	}
	if c.MTU == 0 {
		c.MTU = 9000
	}
	if c.Switch == "" && len(c.Token) == 0 && !c.Insecure {
		c.Token = secure.NewToken()
	}
	if c.NodeSize == 0 {
		// The one-node region holds the whole transfer (the regions of
		// the test exist one at a time).
		c.NodeSize = c.Transfer + 2*c.Stripe + 1<<20
	}
}

func (c *PoolConfig) validate() error {
	if err := secure.CheckToken(c.Token, c.Insecure); err != nil {
		return fmt.Errorf("%w: Token: %w", ErrBadValue, err)
	}
	if c.Insecure && c.Switch == "" {
		return fmt.Errorf("%w: Insecure without Switch: the pool this benchmark starts always has a token", ErrBadValue)
	}
	switch {
	case c.Nodes < 1 || c.Nodes > 64:
		return fmt.Errorf("%w: %d memory nodes (want 1 to 64)", ErrBadValue, c.Nodes)
	case c.Size < 1 || c.Size > 1<<20:
		return fmt.Errorf("%w: latency size %d (want 1 B to 1 MiB)", ErrBadValue, c.Size)
	case c.Iters < 1, c.Transfer < 1, c.NodeSize < 1:
		return fmt.Errorf("%w: iterations, transfer and node size must be positive", ErrBadValue)
	case c.Stripe%8 != 0 || c.Stripe < int(poolmap.MinStripe):
		return fmt.Errorf("%w: stripe %d (want a multiple of 8, at least %d)", ErrBadValue, c.Stripe, poolmap.MinStripe)
	}
	return nil
}

// fabric is the options of the benchmark's control calls.
func (c *PoolConfig) fabric() endpoint.FabricOptions {
	return endpoint.FabricOptions{Token: c.Token, Insecure: c.Insecure}
}

// RunPool measures the memory pool and hands each row to emit: with
// latency, a direct READ of Size bytes to one memory node (the baseline;
// in-process pools only) and a pool ReadAt of the same size through the
// switch, with the ratio of their p50s; with bandwidth, a sequential
// WRITE and READ of Transfer bytes through a region on one memory node
// (the baselines) and through a region striped over every node, with the
// ratio of their goodputs.
func RunPool(ctx context.Context, cfg PoolConfig, emit func(Result) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	sw := cfg.Switch
	var nodes []*Node
	if sw == "" && cfg.Binary != "" {
		stop, addr, node, key, err := startPoolProcs(ctx, &cfg)
		if err != nil {
			return err
		}
		defer stop()
		sw, cfg.Node, cfg.NodeKey = addr, node, key
	} else if sw == "" {
		stop, addr, ns, err := startPool(ctx, &cfg)
		if err != nil {
			return err
		}
		defer stop()
		sw, nodes = addr, ns
	}
	local := "127.0.0.1:0"
	if cfg.Switch != "" {
		local = ":0"
	}
	if cfg.Security != nil && cfg.Switch == "" {
		return errors.New("bench: a credential (Security) only with an external pool (Switch): the in-process pool runs without")
	}
	ep, err := endpoint.Listen(local, endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}},
		endpoint.Options{Security: cfg.Security, SecurityOptions: cfg.SecurityOptions})
	if err != nil {
		return fmt.Errorf("bench: endpoint: %w", err)
	}
	defer ep.Close()
	c, err := pool.New(ep, sw, pool.Options{Fabric: cfg.fabric()})
	if err != nil {
		return err
	}
	if cfg.Tests&TestLatency != 0 {
		if err := poolLatency(ctx, &cfg, ep, c, nodes, emit); err != nil {
			return err
		}
	}
	if cfg.Tests&TestBandwidth != 0 {
		if err := poolBandwidth(ctx, &cfg, c, emit); err != nil {
			return err
		}
	}
	return nil
}

// startPool starts a switch and cfg.Nodes memory nodes lending to it on
// loopback, and waits until the switch has them all.
func startPool(ctx context.Context, cfg *PoolConfig) (stop func(), sw string, nodes []*Node, err error) {
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		return nil, "", nil, err
	}
	s, err := fabric.New(fabric.Config{Token: cfg.Token, Insecure: cfg.Insecure, Transport: transport.Config{MTU: cfg.MTU}})
	if err != nil {
		conn.Close()
		return nil, "", nil, err
	}
	srv := fabric.NewServer(conn, s, nil)
	lctx, cancel := context.WithCancel(context.Background())
	stop = func() {
		cancel()
		for _, n := range nodes {
			n.Close()
		}
		srv.Close()
	}
	for range cfg.Nodes {
		n, err := startPoolNode(srv.Addr(), cfg)
		if err != nil {
			stop()
			return nil, "", nil, err
		}
		nodes = append(nodes, n)
		if _, err := n.pool.Lend(lctx, srv.Addr(), n.Key, uint64(n.Size), cfg.fabric()); err != nil {
			stop()
			return nil, "", nil, fmt.Errorf("bench: memory node joining the pool: %w", err)
		}
	}
	return stop, srv.Addr().String(), nodes, nil
}

func startPoolNode(sw netip.AddrPort, cfg *PoolConfig) (*Node, error) {
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return nil, err
	}
	key, err := st.Alloc(cfg.NodeSize, wire.PermAll, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: memory node region: %w", err)
	}
	direct, err := st.Alloc(max(cfg.Size, 64), wire.PermRead, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: memory node region: %w", err)
	}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		return nil, fmt.Errorf("bench: memory node: %w", err)
	}
	n, err := node.New(conn, node.Config{Store: st, Transport: transport.Config{MTU: cfg.MTU},
		Pool: &server.PoolServe{Switch: sw, Key: key, Token: cfg.Token, Insecure: cfg.Insecure}}, node.Options{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: memory node: %w", err)
	}
	return &Node{pool: n, Key: key, Size: cfg.NodeSize, Direct: direct}, nil
}

func poolLatency(ctx context.Context, cfg *PoolConfig, ep *endpoint.Endpoint, c *pool.Client, nodes []*Node, emit func(Result) error) error {
	buf := make([]byte, cfg.Size)
	measure := func(op string, f func() error) (Result, error) {
		for range max(10, cfg.Iters/10) {
			if err := f(); err != nil {
				return Result{}, fmt.Errorf("bench: %s warm-up: %w", op, err)
			}
		}
		samples := make([]time.Duration, cfg.Iters)
		cpu0 := rusageCPU()
		for i := range samples {
			t0 := time.Now()
			if err := f(); err != nil {
				return Result{}, fmt.Errorf("bench: %s: %w", op, err)
			}
			samples[i] = time.Since(t0)
		}
		cpu := cpuPerOp(cpu0, cfg.Iters)
		p50, p99 := percentiles(samples)
		return Result{Kind: Latency, Op: op, Size: cfg.Size, Iters: cfg.Iters, P50: p50, P99: p99, CPU: cpu}, nil
	}
	var direct Result
	var remote *endpoint.Remote
	var key, addr uint64
	switch {
	case len(nodes) > 0:
		// Direct READ to a memory node, of a region outside the pool.
		remote = ep.Remote(nodes[0].Addr())
		key, addr = nodes[0].Direct, 0
	case cfg.Node != "":
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		remote, err = ep.Dial(dctx, cfg.Node)
		cancel()
		if err != nil {
			return fmt.Errorf("bench: memory node %s: %w", cfg.Node, err)
		}
		key = cfg.NodeKey
	}
	if remote != nil {
		var err error
		direct, err = measure(OpRead, func() error { return remote.Read(ctx, key, addr, buf) })
		if err != nil {
			return err
		}
		if err := emit(direct); err != nil {
			return err
		}
	}
	r, err := c.Alloc(ctx, uint64(max(cfg.Size, 4096)), pool.AllocOptions{Stripe: uint64(max(cfg.Size+7, 4096)) &^ 7, Columns: 1})
	if err != nil {
		return fmt.Errorf("bench: pool region: %w", err)
	}
	defer func() { _ = c.Free(context.Background(), r) }()
	res, err := measure(OpPoolRead, func() error { _, err := r.ReadAtContext(ctx, buf, 0); return err })
	if err != nil {
		return err
	}
	if direct.P50 > 0 {
		res.Baseline, res.BaselineValue, res.Ratio = OpRead, us(direct.P50), float64(res.P50)/float64(direct.P50)
		if direct.P99 > 0 {
			res.P99Ratio = float64(res.P99) / float64(direct.P99)
		}
	}
	return emit(res)
}

// poolBandwidth moves Transfer bytes sequentially through a region on
// one node and through one over every node.
func poolBandwidth(ctx context.Context, cfg *PoolConfig, c *pool.Client, emit func(Result) error) error {
	data := make([]byte, cfg.Transfer)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	back := make([]byte, cfg.Transfer)
	run := func(columns int) (w, r Result, err error) {
		reg, err := c.Alloc(ctx, uint64(cfg.Transfer), pool.AllocOptions{Stripe: uint64(cfg.Stripe), Columns: columns})
		if err != nil {
			return w, r, fmt.Errorf("bench: pool region over %d nodes: %w", max(columns, 1), err)
		}
		defer func() { _ = c.Free(context.Background(), reg) }()
		t0 := time.Now()
		if _, err := reg.WriteAtContext(ctx, data, 0); err != nil {
			return w, r, fmt.Errorf("bench: pool write: %w", err)
		}
		dw := time.Since(t0)
		t0 = time.Now()
		if _, err := reg.ReadAtContext(ctx, back, 0); err != nil {
			return w, r, fmt.Errorf("bench: pool read: %w", err)
		}
		dr := time.Since(t0)
		if string(back) != string(data) {
			return w, r, errors.New("bench: pool read back other bytes than written")
		}
		cols := reg.Spec().Columns
		w = Result{Kind: Bandwidth, Op: OpPoolWrite, Size: cfg.Transfer, Iters: 1, Nodes: cols, Gbps: gbps(cfg.Transfer, dw)}
		r = Result{Kind: Bandwidth, Op: OpPoolRead, Size: cfg.Transfer, Iters: 1, Nodes: cols, Gbps: gbps(cfg.Transfer, dr)}
		return w, r, nil
	}
	w1, r1, err := run(1)
	if err != nil {
		return err
	}
	wn, rn, err := run(0)
	if err != nil {
		return err
	}
	for _, p := range [][2]*Result{{&w1, &wn}, {&r1, &rn}} {
		base, all := p[0], p[1]
		all.Baseline, all.BaselineValue, all.Ratio = base.Op+"_1node", base.Gbps, all.Gbps/base.Gbps
	}
	for _, res := range []Result{w1, r1, wn, rn} {
		if err := emit(res); err != nil {
			return err
		}
	}
	return nil
}
