package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// CollConfig configures a collectives benchmark run (ndma bench coll).
type CollConfig struct {
	Op    coll.Operation
	Algos []coll.Algo // algorithms to measure, one table each
	Ranks int         // ranks, all in this process on loopback
	Sizes []int       // message sizes per rank, in bytes
	// Iters and Warmup per size; zero picks by size (OSU-like: 1000 for
	// small messages, fewer for large).
	Iters, Warmup int
	// Switch: start an in-process forwarding node (needed by innet).
	Switch bool
	// Switches, above 1, shards the in-network collectives over that
	// many in-process forwarding nodes (coll.Config.Switches): each row
	// then reports every switch's share of the datagrams (RunColl,
	// RunCollSim).
	Switches int
	MTU      int // zero: 9000
	// Sync is the algorithm of the barrier in front of every call (not
	// timed), where OSU's programs call MPI_Barrier. Empty means
	// recursive doubling (DefaultSync), the same host barrier for every
	// algorithm, with or without a switch; coll.AlgoAuto is the
	// communicator's own choice (in-network with a switch).
	Sync coll.Algo
}

// DefaultSync is the barrier in front of every call unless
// CollConfig.Sync says otherwise.
const DefaultSync = coll.AlgoRecursiveDoubling

// syncAlgo is the barrier algorithm in front of every call.
func (c *CollConfig) syncAlgo() coll.Algo {
	if c.Sync == "" {
		return DefaultSync
	}
	return c.Sync
}

// CollResult is one row: OSU's columns, averaged over ranks as OSU does.
type CollResult struct {
	Op    string  `json:"op"`
	Algo  string  `json:"algo"`
	Ranks int     `json:"ranks"`
	Size  int     `json:"size"`
	AvgUS float64 `json:"avg_us"`
	MinUS float64 `json:"min_us"`
	MaxUS float64 `json:"max_us"`
	Iters int     `json:"iters"`
	// Chosen is the algorithm the tuner picked for an auto row.
	Chosen string `json:"chosen,omitempty"`
	// Sync is the algorithm of the barrier in front of every call
	// (CollConfig.Sync, auto resolved).
	Sync string `json:"sync,omitempty"`
	// Hosts is the number of hosts when the ranks' collectives ran in
	// two levels (Config.Hierarchy: the ranks of a host through shared
	// memory, one leader per host on the network); zero when every rank
	// used the network.
	Hosts int `json:"hosts,omitempty"`
	// SwitchPackets is, with more than one in-process switch
	// (CollConfig.Switches), the datagrams each switch received over the
	// row's calls (warm-up and barriers included), from its own
	// counters: how the load was shared.
	SwitchPackets []uint64 `json:"switch_packets,omitempty"`
	// TimedFromNS and TimedToNS are when rank 0's timed calls began (the
	// barrier before the first call after the warm-up) and ended, in
	// Unix nanoseconds of its clock, over every row of the job: the
	// testbed's fidelity monitor judges that window (RunCollLaunched
	// only).
	TimedFromNS int64 `json:"timed_from_ns,omitempty"`
	TimedToNS   int64 `json:"timed_to_ns,omitempty"`
}

func (c *CollConfig) iters(size int) (iters, warmup int) {
	iters, warmup = c.Iters, c.Warmup
	if iters <= 0 {
		switch {
		case size <= 64<<10:
			iters = 200
		case size <= 1<<20:
			iters = 50
		default:
			iters = 10
		}
	}
	if warmup <= 0 {
		warmup = max(2, iters/10)
	}
	return iters, warmup
}

// CollWorld is a set of in-process ranks on loopback (and switches).
type CollWorld struct {
	Comms []*coll.Communicator
	eps   []*endpoint.Endpoint
	srvs  []*fabric.Server
}

// NewCollWorld starts n endpoints on loopback, switches in-process
// switches (0: none; above 1, each rank has an endpoint per switch and
// its in-network collectives stripe over them), and the world
// communicator.
func NewCollWorld(ctx context.Context, n, switches, mtu int) (*CollWorld, error) {
	if n < 1 {
		return nil, fmt.Errorf("bench: %d ranks", n)
	}
	if switches < 0 || switches > coll.MaxSwitches {
		return nil, fmt.Errorf("bench: %d switches, want 0 to %d", switches, coll.MaxSwitches)
	}
	var swConns []netio.Conn
	for range switches {
		conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			for _, c := range swConns {
				c.Close()
			}
			return nil, err
		}
		swConns = append(swConns, conn)
	}
	return newCollWorld(ctx, n, mtu, swConns, 0, 0, func(int, int) (netio.Conn, error) {
		return netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	})
}

// newCollWorld builds the world over the given connections: swConns for
// the switches (none: no switch), listen(i, s) for rank i's endpoint of
// switch s (s is 0 without a switch). A non-zero seed seeds the
// transports (simulations); zero leaves them random.
func newCollWorld(ctx context.Context, n, mtu int, swConns []netio.Conn, seed uint64, leaves int, listen func(i, s int) (netio.Conn, error)) (*CollWorld, error) {
	if mtu == 0 {
		mtu = 9000
	}
	w := &CollWorld{}
	var switches []string
	// The in-process switches and ranks share a fabric token of their own.
	token := secure.NewToken()
	for k, conn := range swConns {
		fcfg := fabric.Config{Token: token, Transport: transport.Config{MTU: mtu, Seed: seed + uint64(k)*7919}}
		if leaves > 0 {
			// A tree: swConns[0] the root, the rest its leaves.
			if k == 0 {
				for _, c := range swConns[1:] {
					fcfg.Children = append(fcfg.Children, c.LocalAddr())
				}
			} else {
				fcfg.Parent = swConns[0].LocalAddr()
			}
		}
		s, err := fabric.New(fcfg)
		if err != nil {
			for _, c := range swConns[k:] {
				c.Close()
			}
			w.Close()
			return nil, err
		}
		w.srvs = append(w.srvs, fabric.NewServer(conn, s, nil))
		switches = append(switches, w.srvs[k].Addr().String())
	}
	k := max(1, len(swConns))
	if leaves > 0 {
		k = 1 // each rank joins at its leaf
	}
	peers := make([]netip.AddrPort, n)
	eps := make([][]*endpoint.Endpoint, n) // per rank, one per switch
	for i := range n {
		for s := range k {
			conn, err := listen(i, s)
			if err != nil {
				w.Close()
				return nil, err
			}
			tseed := uint64(0)
			if seed != 0 {
				tseed = seed*1000 + uint64(i*k+s) + 1
			}
			ep, err := endpoint.New(conn, endpoint.Config{Transport: transport.Config{MTU: mtu, Seed: tseed}}, endpoint.Options{})
			if err != nil {
				conn.Close()
				w.Close()
				return nil, err
			}
			w.eps = append(w.eps, ep)
			eps[i] = append(eps[i], ep)
		}
		peers[i] = eps[i][0].LocalAddr()
	}
	w.Comms = make([]*coll.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := coll.Config{Endpoint: eps[i][0], Rank: i, Size: n, Job: "bench", Token: token}
			switch {
			case len(switches) == 0:
				cfg.Peers = peers
			case leaves > 0:
				cfg.Switch = switches[1+i*leaves/n] // the ranks in blocks, a block per leaf
			case len(switches) == 1:
				cfg.Switch = switches[0]
			default:
				cfg.Switches, cfg.StripeEndpoints = switches, eps[i][1:]
			}
			w.Comms[i], errs[i] = coll.New(ctx, cfg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// Close stops everything.
func (w *CollWorld) Close() {
	for _, ep := range w.eps {
		ep.Close()
	}
	for _, s := range w.srvs {
		s.Close()
	}
}

// collBufs holds one rank's buffers, sized for the largest message.
type collBufs struct{ send, recv []byte }

// tunerBytes is the message size the tuner sees for a RunCollOp of size
// bytes: reductions run on whole float32s.
func tunerBytes(op coll.Operation, size int) int {
	switch op {
	case coll.OpReduce, coll.OpAllreduce, coll.OpReduceScatter:
		return size &^ 3
	}
	return size
}

// RunCollOp runs one collective of op with algorithm a and size bytes per
// rank on c.
func RunCollOp(ctx context.Context, c *coll.Communicator, op coll.Operation, a coll.Algo, size int, b *collBufs) error {
	n := c.Size()
	w := coll.WithAlgo(a)
	f32 := size &^ 3
	switch op {
	case coll.OpBarrier:
		return c.Barrier(ctx, w)
	case coll.OpBcast:
		return c.Bcast(ctx, b.send[:size], 0, w)
	case coll.OpReduce:
		return c.ReduceBytes(ctx, b.send[:f32], b.recv[:f32], wire.DtypeF32, coll.Sum, 0, w)
	case coll.OpAllreduce:
		return c.AllreduceBytes(ctx, b.send[:f32], b.recv[:f32], wire.DtypeF32, coll.Sum, w)
	case coll.OpAllgather:
		return c.Allgather(ctx, b.send[:size], b.recv[:size*n], w)
	case coll.OpReduceScatter:
		return c.ReduceScatterBytes(ctx, b.send[:f32*n], b.recv[:f32], wire.DtypeF32, coll.Sum, w)
	case coll.OpGather:
		return c.Gather(ctx, b.send[:size], b.recv[:size*n], 0, w)
	case coll.OpScatter:
		return c.Scatter(ctx, b.send[:size*n], b.recv[:size], 0, w)
	case coll.OpAlltoall:
		return c.Alltoall(ctx, b.send[:size*n], b.recv[:size*n], w)
	}
	return fmt.Errorf("bench: unknown operation %q", op)
}

// RunCollRank runs this rank's part of cfg on c and returns its average
// time per call, per algorithm and size (in cfg order). Every rank of c
// must call it with the same cfg.
func RunCollRank(ctx context.Context, c *coll.Communicator, cfg CollConfig) ([][]time.Duration, error) {
	return runCollRank(ctx, c, cfg, nil)
}

// timedWindow is when a rank's timed calls began and ended.
type timedWindow struct{ from, to time.Time }

// runCollRank is RunCollRank, noting in w (if not nil) when the timed
// calls began and ended.
func runCollRank(ctx context.Context, c *coll.Communicator, cfg CollConfig, w *timedWindow) ([][]time.Duration, error) {
	n := c.Size()
	maxSize := 0
	for _, s := range cfg.Sizes {
		maxSize = max(maxSize, s)
	}
	sendN, recvN := 1, 1 // buffer sizes in messages: n where MPI's are n counts
	switch cfg.Op {
	case coll.OpReduceScatter, coll.OpScatter:
		sendN = n
	case coll.OpAllgather, coll.OpGather:
		recvN = n
	case coll.OpAlltoall:
		sendN, recvN = n, n
	}
	b := &collBufs{send: make([]byte, maxSize*sendN+8), recv: make([]byte, maxSize*recvN+8)}
	out := make([][]time.Duration, len(cfg.Algos))
	for ai, a := range cfg.Algos {
		for _, size := range cfg.sizes() {
			iters, warmup := cfg.iters(size)
			var total time.Duration
			for i := 0; i < warmup+iters; i++ {
				if w != nil && i == warmup && w.from.IsZero() {
					w.from = time.Now()
				}
				if err := c.Barrier(ctx, coll.WithAlgo(cfg.syncAlgo())); err != nil {
					return nil, err
				}
				t0 := time.Now()
				if err := RunCollOp(ctx, c, cfg.Op, a, size, b); err != nil {
					return nil, fmt.Errorf("%s/%s size %d: %w", cfg.Op, a, size, err)
				}
				if i >= warmup {
					total += time.Since(t0)
				}
			}
			if w != nil {
				w.to = time.Now()
			}
			out[ai] = append(out[ai], total/time.Duration(iters))
		}
	}
	return out, nil
}

func (c *CollConfig) sizes() []int {
	if c.Op == coll.OpBarrier {
		return []int{0}
	}
	return c.Sizes
}

// Summarize turns every rank's averages (per[rank][algo][size]) into OSU
// rows: the average, minimum and maximum over ranks.
// c, if not nil, is any rank's communicator: it names the algorithm auto
// rows ran (CollResult.Chosen).
func Summarize(cfg CollConfig, ranks int, per [][][]time.Duration, c *coll.Communicator, emit func(CollResult)) {
	for ai, a := range cfg.Algos {
		for si, size := range cfg.sizes() {
			iters, _ := cfg.iters(size)
			res := CollResult{Op: string(cfg.Op), Algo: string(a), Ranks: ranks, Size: size, Iters: iters, MinUS: -1}
			if a == coll.AlgoAuto && c != nil {
				if chosen, err := c.Algorithm(cfg.Op, tunerBytes(cfg.Op, size)); err == nil {
					res.Chosen = string(chosen)
				}
			}
			if c != nil {
				if sync, err := c.Algorithm(coll.OpBarrier, 0, coll.WithAlgo(cfg.syncAlgo())); err == nil {
					res.Sync = string(sync)
				}
				res.Hosts = c.Hosts()
			}
			var sum float64
			for r := range per {
				avg := float64(per[r][ai][si]) / float64(time.Microsecond)
				sum += avg
				if res.MinUS < 0 || avg < res.MinUS {
					res.MinUS = avg
				}
				res.MaxUS = max(res.MaxUS, avg)
			}
			res.AvgUS = sum / float64(len(per))
			emit(res)
		}
	}
}

// RunColl measures cfg with every rank of w in this process and calls
// emit for each (algorithm, size) row. With more than one switch, each
// row is measured on its own and carries every switch's datagrams
// (CollResult.SwitchPackets).
func RunColl(ctx context.Context, w *CollWorld, cfg CollConfig, emit func(CollResult)) error {
	if len(w.srvs) < 2 {
		return runColl(ctx, w, cfg, emit)
	}
	for _, a := range cfg.Algos {
		for _, size := range cfg.sizes() {
			one := cfg
			one.Algos, one.Sizes = []coll.Algo{a}, []int{size}
			before := w.switchPackets()
			err := runColl(ctx, w, one, func(r CollResult) {
				r.SwitchPackets = w.switchPackets()
				for i := range r.SwitchPackets {
					r.SwitchPackets[i] -= before[i]
				}
				emit(r)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// switchPackets is every switch's count of datagrams received.
func (w *CollWorld) switchPackets() []uint64 {
	out := make([]uint64, len(w.srvs))
	for i, s := range w.srvs {
		out[i] = s.Stats().Received
	}
	return out
}

// runColl is RunColl of every row at once.
func runColl(ctx context.Context, w *CollWorld, cfg CollConfig, emit func(CollResult)) error {
	n := len(w.Comms)
	per := make([][][]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range w.Comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per[r], errs[r] = RunCollRank(ctx, c, cfg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	Summarize(cfg, n, per, w.Comms[0], emit)
	return nil
}

// RunCollLaunched runs cfg as one rank of a job started by a launcher:
// every rank measures its part, rank 0 gathers the timings and calls emit.
func RunCollLaunched(ctx context.Context, c *coll.Communicator, cfg CollConfig, emit func(CollResult)) error {
	var w timedWindow
	mine, err := runCollRank(ctx, c, cfg, &w)
	if err != nil {
		return err
	}
	var flat []int64
	for _, row := range mine {
		for _, d := range row {
			flat = append(flat, int64(d))
		}
	}
	send := make([]byte, 8*len(flat))
	for i, v := range flat {
		binary.LittleEndian.PutUint64(send[8*i:], uint64(v))
	}
	var recv []byte
	if c.Rank() == 0 {
		recv = make([]byte, len(send)*c.Size())
	}
	if err := c.Gather(ctx, send, recv, 0); err != nil {
		return err
	}
	if c.Rank() != 0 {
		return nil
	}
	per := make([][][]time.Duration, c.Size())
	for r := range per {
		k := 0
		per[r] = make([][]time.Duration, len(mine))
		for ai, row := range mine {
			per[r][ai] = make([]time.Duration, len(row))
			for si := range row {
				per[r][ai][si] = time.Duration(binary.LittleEndian.Uint64(recv[r*len(send)+8*k:]))
				k++
			}
		}
	}
	Summarize(cfg, c.Size(), per, c, func(r CollResult) {
		r.TimedFromNS, r.TimedToNS = w.from.UnixNano(), w.to.UnixNano()
		emit(r)
	})
	return nil
}
