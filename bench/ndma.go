package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/ndma/ndma/endpoint"
)

// latency measures op at size bytes with one operation in flight, through
// the blocking Remote API, at offset 0 of the region.
func (r *runner) latency(ctx context.Context, op string, size int) (Result, error) {
	iters := r.cfg.latIters(size)
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	var (
		f   func() error
		cas uint64
	)
	switch op {
	case OpRead:
		f = func() error { return r.remote.Read(ctx, r.key, 0, buf) }
	case OpWrite:
		f = func() error { return r.remote.Write(ctx, r.key, 0, buf) }
	case OpCAS:
		// Learn the word, then swap it forward so every CAS succeeds.
		old, err := r.remote.FetchAdd(ctx, r.key, 0, 0)
		if err != nil {
			return Result{}, fmt.Errorf("bench: cas setup: %w", err)
		}
		cas = old
		f = func() error {
			old, err := r.remote.CompareAndSwap(ctx, r.key, 0, cas, cas+1)
			if err == nil && old != cas {
				return fmt.Errorf("bench: cas found %d, want %d (is another client using the region?)", old, cas)
			}
			cas++
			return err
		}
	case OpFetchAdd:
		f = func() error {
			_, err := r.remote.FetchAdd(ctx, r.key, 0, 1)
			return err
		}
	default:
		return Result{}, fmt.Errorf("bench: latency of unknown op %q", op)
	}
	for range r.cfg.warmup(iters) {
		if err := f(); err != nil {
			return Result{}, fmt.Errorf("bench: %s %s warm-up: %w", op, FormatSize(size), err)
		}
	}
	samples := make([]time.Duration, iters)
	cpu0 := rusageCPU()
	for i := range samples {
		t0 := time.Now()
		if err := f(); err != nil {
			return Result{}, fmt.Errorf("bench: %s %s: %w", op, FormatSize(size), err)
		}
		samples[i] = time.Since(t0)
	}
	cpu := cpuPerOp(cpu0, iters)
	p50, p99 := percentiles(samples)
	return Result{Kind: Latency, Op: op, Size: size, Iters: iters, P50: p50, P99: p99, CPU: cpu}, nil
}

// bandwidth measures op at size bytes with Window operations in flight
// through the asynchronous API (Endpoint.Start with a completion channel).
// Successive operations walk the region in size-byte slots. WRITEs share
// one source buffer; READs land in up to Window destination buffers (at
// most 64 MiB of them, shared round-robin beyond that). One window of
// unmeasured operations warms the path up first.
func (r *runner) bandwidth(ctx context.Context, op string, size int) (Result, error) {
	iters := r.cfg.bwIters(size)
	window := r.cfg.Window
	kind := endpoint.KindWrite
	nbuf := 1
	if op == OpRead {
		kind = endpoint.KindRead
		nbuf = min(window, max(1, (64<<20)/size))
	} else if op != OpWrite {
		return Result{}, fmt.Errorf("bench: bandwidth of unknown op %q", op)
	}
	bufs := make([][]byte, nbuf)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	for i := range bufs[0] {
		bufs[0][i] = byte(i)
	}
	slots := r.cfg.RegionSize / size
	ops := make([]endpoint.Op, window)
	notify := make(chan *endpoint.Op, window)
	peer := r.remote.Addr()

	// run keeps window operations in flight until n have completed and
	// returns the time from the first start to the last completion.
	run := func(n int) (time.Duration, error) {
		posted := 0
		post := func(o *endpoint.Op) error {
			*o = endpoint.Op{Kind: kind, Peer: peer, Key: r.key, Addr: uint64((posted % slots) * size), Buf: bufs[posted%nbuf]}
			posted++
			return r.ep.Start(o, notify)
		}
		t0 := time.Now()
		inflight := 0
		for i := 0; i < min(window, n); i++ {
			if err := post(&ops[i]); err != nil {
				return 0, err
			}
			inflight++
		}
		for inflight > 0 {
			select {
			case o := <-notify:
				inflight--
				if o.Err != nil {
					return 0, o.Err
				}
				if posted < n {
					if err := post(o); err != nil {
						return 0, err
					}
					inflight++
				}
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return time.Since(t0), nil
	}
	if _, err := run(window); err != nil {
		return Result{}, fmt.Errorf("bench: %s bandwidth %s warm-up: %w", op, FormatSize(size), err)
	}
	d, err := run(iters)
	if err != nil {
		return Result{}, fmt.Errorf("bench: %s bandwidth %s: %w", op, FormatSize(size), err)
	}
	return Result{Kind: Bandwidth, Op: op, Size: size, Iters: iters, Window: window, Gbps: gbps(iters*size, d)}, nil
}

// gbps is n bytes over d in Gbit/s.
func gbps(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) * 8 / d.Seconds() / 1e9
}
