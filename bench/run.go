package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
)

// runner holds what one Run shares between its measurements.
type runner struct {
	cfg    Config
	ep     *endpoint.Endpoint
	remote *endpoint.Remote
	key    uint64
}

// step is one measurement of a Run's plan.
type step func(ctx context.Context) (Result, error)

// Run makes the measurements cfg selects and hands each Result to emit as
// soon as it is made, in this order: for latency the UDP ping-pong
// baseline, then READ and WRITE per size, then CAS and FetchAdd; for
// bandwidth the TCP stream baseline, then WRITE and READ per size. NDMA
// rows carry their ratio to the baseline of the same size (the largest
// UDP datagram for sizes beyond it). Run stops at the first error, from a
// measurement, from emit or from ctx.
func Run(ctx context.Context, cfg Config, emit func(Result) error) error {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	r := &runner{cfg: cfg, key: cfg.Key}
	server := cfg.Server
	if server == "" {
		node, err := StartNodeWith(cfg.RegionSize, cfg.MTU, netio.UDPConfig{BusyPoll: cfg.BusyPoll})
		if err != nil {
			return err
		}
		defer node.Close()
		server, r.key = node.Addr().String(), node.Key
	}
	local := "127.0.0.1:0"
	if cfg.Server != "" {
		local = ":0" // an external node may be on another host
	}
	opts := endpoint.Options{UDP: netio.UDPConfig{BusyPoll: cfg.BusyPoll}}
	if cfg.Server != "" && cfg.Security != nil {
		opts.Security, opts.SecurityOptions = cfg.Security, cfg.SecurityOptions
	}
	ep, err := endpoint.Listen(local, endpoint.Config{Transport: transport.Config{MTU: cfg.MTU}}, opts)
	if err != nil {
		return fmt.Errorf("bench: endpoint: %w", err)
	}
	defer ep.Close()
	r.ep = ep
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	r.remote, err = ep.Dial(dctx, server)
	cancel()
	if err != nil {
		return fmt.Errorf("bench: memory node at %s: %w", server, err)
	}

	udp := make(map[int]Result)
	tcp := make(map[int]Result)
	var plan []step
	if cfg.Tests&TestLatency != 0 {
		sizes := cfg.Sizes
		if sizes == nil {
			sizes = DefaultLatencySizes
		}
		// Baselines: each latency size (capped at the largest datagram),
		// and 8 bytes for the atomics.
		var base []int
		for _, s := range append([]int{8}, sizes...) {
			if s = min(s, maxUDPPayload); !slices.Contains(base, s) {
				base = append(base, s)
			}
		}
		slices.Sort(base)
		for _, s := range base {
			plan = append(plan, func(ctx context.Context) (Result, error) {
				res, err := udpPingPong(ctx, s, cfg.latIters(s), cfg.warmup(cfg.latIters(s)))
				udp[s] = res
				return res, err
			})
		}
		withBase := func(res Result, err error) (Result, error) {
			if b, ok := udp[min(res.Size, maxUDPPayload)]; ok && err == nil && b.P50 > 0 {
				res.Baseline, res.BaselineValue = OpUDPPingPong, us(b.P50)
				res.Ratio = float64(res.P50) / float64(b.P50)
				if b.P99 > 0 {
					res.P99Ratio = float64(res.P99) / float64(b.P99)
				}
			}
			return res, err
		}
		for _, op := range []string{OpRead, OpWrite} {
			for _, s := range sizes {
				plan = append(plan, func(ctx context.Context) (Result, error) { return withBase(r.latency(ctx, op, s)) })
			}
		}
		for _, op := range []string{OpCAS, OpFetchAdd} {
			plan = append(plan, func(ctx context.Context) (Result, error) { return withBase(r.latency(ctx, op, 8)) })
		}
	}
	if cfg.Tests&TestBandwidth != 0 {
		sizes := cfg.Sizes
		if sizes == nil {
			sizes = DefaultBandwidthSizes
		}
		for _, s := range sizes {
			plan = append(plan, func(ctx context.Context) (Result, error) {
				res, err := tcpStream(ctx, s, cfg.bwIters(s))
				tcp[s] = res
				return res, err
			})
		}
		withBase := func(res Result, err error) (Result, error) {
			if b, ok := tcp[res.Size]; ok && err == nil && b.Gbps > 0 {
				res.Baseline, res.BaselineValue = OpTCPStream, b.Gbps
				res.Ratio = res.Gbps / b.Gbps
			}
			return res, err
		}
		for _, op := range []string{OpWrite, OpRead} {
			for _, s := range sizes {
				plan = append(plan, func(ctx context.Context) (Result, error) { return withBase(r.bandwidth(ctx, op, s)) })
			}
		}
	}
	for i, st := range plan {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := st(ctx)
		if err != nil {
			return err
		}
		if err := emit(res); err != nil {
			return err
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(plan))
		}
	}
	return nil
}

// cpuPerOp is this process's CPU time since cpu0 (a rusageCPU reading)
// divided over n operations.
func cpuPerOp(cpu0 time.Duration, n int) time.Duration {
	return (rusageCPU() - cpu0) / time.Duration(n)
}

// percentiles sorts samples and returns the 50th and 99th percentiles
// (nearest rank).
func percentiles(samples []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(samples)
	rank := func(p int) time.Duration {
		i := (len(samples)*p + 99) / 100 // ceil(n*p/100)
		return samples[max(i-1, 0)]
	}
	return rank(50), rank(99)
}
