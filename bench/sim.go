package bench

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/simhost"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// SimConfig configures RunSim. Zero values select the documented
// defaults.
type SimConfig struct {
	// Sizes are the WRITE sizes in bytes. Nil means
	// DefaultBandwidthSizes.
	Sizes []int
	// Iters is the number of WRITEs per size. Zero means 256 MiB worth
	// (16 to 20000 operations).
	Iters int
	// Window is the number of WRITEs in flight. Zero means 16; at most
	// MaxWindow.
	Window int
	// MTU is the transport MTU in bytes, header included. Zero means
	// 9000.
	MTU int
	// Rate is each access link's rate in bits per second. Zero means
	// 10 Gbit/s.
	Rate float64
	// Latency is each access link's one-way propagation delay (a packet
	// crosses two links). Zero means 5µs.
	Latency time.Duration
	// Loss is the probability that a datagram is lost, applied on each
	// host's up link, so that every datagram — data, ACK or response —
	// is lost with probability Loss on its way. With Loss > 0 every size
	// is run twice, without and with loss, and the lossy row carries its
	// ratio to the lossless one.
	Loss float64
	// Seed seeds the network's randomness and the transport; the same
	// Seed and Config give the same results. Zero means 1.
	Seed int64
	// Progress, if not nil, is called after each measurement with the
	// number done and the total.
	Progress func(done, total int)
}

// simRegion bounds the simulated node's region; WRITEs walk it in
// size-byte slots.
const simRegion = 64 << 20

// simBudget is the payload a default simulated measurement moves.
const simBudget = 256 << 20

func (c *SimConfig) setDefaults() {
	if c.Sizes == nil {
		c.Sizes = DefaultBandwidthSizes
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MTU == 0 {
		c.MTU = DefaultSimMTU
	}
	if c.Rate == 0 {
		c.Rate = DefaultSimRate
	}
	if c.Latency == 0 {
		c.Latency = 5 * time.Microsecond
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
}

func (c *SimConfig) validate() error {
	switch {
	case c.Iters < 0:
		return fmt.Errorf("%w: Iters must not be negative", ErrConfig)
	case c.Window < 1 || c.Window > MaxWindow:
		return fmt.Errorf("%w: Window %d outside [1, %d]", ErrConfig, c.Window, MaxWindow)
	case !(c.Rate > 0) || c.Rate > 1e15:
		return fmt.Errorf("%w: link rate %v bit/s", ErrConfig, c.Rate)
	case c.Latency < 0:
		return fmt.Errorf("%w: negative link latency %v", ErrConfig, c.Latency)
	case !(c.Loss >= 0 && c.Loss < 1):
		return fmt.Errorf("%w: loss %v: want a probability in [0, 1)", ErrConfig, c.Loss)
	}
	if err := checkMTU(c.MTU); err != nil {
		return err
	}
	return checkSizes(c.Sizes, simRegion)
}

func (c *SimConfig) iters(size int) int {
	if c.Iters > 0 {
		return c.Iters
	}
	return min(max(simBudget/size, 16), 20000)
}

// RunSim measures WRITE goodput on netio/simnet, in virtual time: one
// client endpoint core keeps Window WRITEs of each size in flight to a
// memory node core, each attached by a link of Rate and Latency (IPv4 and
// UDP headers counted on the wire). Goodput is payload bits over the
// virtual time from the first post to the last completion. With Loss > 0,
// every size is measured lossless first, then
// with loss, and each lossy row's Ratio is to its size's lossless one (Baseline "lossless"). Results are deterministic for a
// given SimConfig.
func RunSim(ctx context.Context, cfg SimConfig, emit func(Result) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	losses := []float64{0}
	if cfg.Loss > 0 {
		losses = append(losses, cfg.Loss)
	}
	total, done := len(cfg.Sizes)*len(losses), 0
	lossless := make(map[int]Result)
	for _, loss := range losses {
		for _, size := range cfg.Sizes {
			if err := ctx.Err(); err != nil {
				return err
			}
			res, err := simWrite(cfg, size, loss)
			if err != nil {
				return err
			}
			if loss == 0 {
				lossless[size] = res
			} else if b := lossless[size]; b.Gbps > 0 {
				res.Ratio, res.Baseline, res.BaselineValue = res.Gbps/b.Gbps, "lossless", b.Gbps
			}
			if err := emit(res); err != nil {
				return err
			}
			done++
			if cfg.Progress != nil {
				cfg.Progress(done, total)
			}
		}
	}
	return nil
}

// simWrite runs one simulated WRITE measurement.
func simWrite(cfg SimConfig, size int, loss float64) (Result, error) {
	iters := cfg.iters(size)
	nw := simnet.New(cfg.Seed)
	tcfg := transport.Config{MTU: cfg.MTU, Seed: uint64(cfg.Seed)}
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return Result{}, err
	}
	region := min(simRegion, max(size, cfg.Window*size))
	key, err := st.Alloc(region, wire.PermAll, 0)
	if err != nil {
		return Result{}, err
	}
	srv, err := endpoint.NewCore(endpoint.Config{Transport: tcfg, Store: st})
	if err != nil {
		return Result{}, err
	}
	tcfg.Seed++
	cli, err := endpoint.NewCore(endpoint.Config{Transport: tcfg})
	if err != nil {
		return Result{}, err
	}
	srvAddr := netip.MustParseAddrPort("10.0.0.1:4791")
	cliAddr := netip.MustParseAddrPort("10.0.0.2:4791")
	const ipUDPHeaders = 28
	up := simnet.LinkConfig{Rate: cfg.Rate, Latency: cfg.Latency, Overhead: ipUDPHeaders, Loss: loss}
	down := simnet.LinkConfig{Rate: cfg.Rate, Latency: cfg.Latency, Overhead: ipUDPHeaders}

	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	slots := region / size
	ops := make([]endpoint.Op, cfg.Window)
	free := make([]*endpoint.Op, 0, cfg.Window)
	for i := range ops {
		free = append(free, &ops[i])
	}
	var (
		posted, completed int
		start, last       time.Time
		opErr             error
	)
	// The client posts the next operations before each Poll, and at once
	// after completions (internal/simhost).
	client := &simhost.Host[*endpoint.Op]{Core: cli, Repoll: true}
	client.Before = func(now time.Time) {
		if start.IsZero() {
			start = now
		}
		for posted < iters && len(free) > 0 && opErr == nil {
			op := free[len(free)-1]
			*op = endpoint.Op{Kind: endpoint.KindWrite, Peer: srvAddr, Key: key, Addr: uint64((posted % slots) * size), Buf: data}
			if err := cli.Post(now, op); err != nil {
				opErr = err
				return
			}
			free = free[:len(free)-1]
			posted++
		}
	}
	client.Done = func(now time.Time, op *endpoint.Op) {
		if op.Err != nil && opErr == nil {
			opErr = op.Err
		}
		completed++
		last = now
		free = append(free, op)
	}
	(&simhost.Host[*endpoint.Op]{Core: srv}).Attach(nw, srvAddr, up, down)
	client.Attach(nw, cliAddr, up, down)
	err = nw.RunUntil(func() bool { return completed == iters || opErr != nil }, time.Hour)
	if opErr != nil {
		return Result{}, fmt.Errorf("bench: sim write %s (loss %g, seed %d): %w", FormatSize(size), loss, cfg.Seed, opErr)
	}
	if err != nil {
		return Result{}, fmt.Errorf("bench: sim write %s (loss %g, seed %d): %w", FormatSize(size), loss, cfg.Seed, err)
	}
	d := last.Sub(start)
	return Result{
		Kind: Bandwidth, Op: OpWrite, Size: size, Iters: iters, Window: cfg.Window,
		Gbps: gbps(iters*size, d), Sim: true, Loss: loss, Virtual: d,
	}, nil
}
