package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// The fabric part of the demo: a switch and demoMembers endpoints in one
// job, each group operation compared with a host-only way of doing the
// same thing over one-sided WRITEs.
const (
	demoMembers   = 4       // endpoints in the job
	demoJob       = "demo"  // the job's name at the switch
	demoGroupSize = 1 << 20 // bytes multicast and allreduced
	// demoFabricReps is how often each group operation and its host-only
	// counterpart run (interleaved); the median time is reported.
	demoFabricReps = 5
	// demoRequests is the number of anycast requests per policy.
	demoRequests = 100
)

// fabricDemo holds the switch and the job's members.
type fabricDemo struct {
	ctx     context.Context
	sw      string         // the switch's address
	swAddr  netip.AddrPort // the same, parsed
	lendCtx context.Context
	closers *[]func()
	opts    endpoint.FabricOptions
	sec     *demoSecurity
	eps     []*endpoint.Endpoint
	gs      []*endpoint.Group

	// region[i] is member i's registered region of demoGroupSize bytes
	// (member 0's is demoMembers times that: the gather region).
	region [][]byte
	keys   []uint64
}

// fabric starts a switch on loopback, joins demoMembers endpoints to a
// job and runs the group operations, adding a row for each. It returns
// the switch's address ("" if it could not start) and a function that
// closes the endpoints and the switch.
func (d *demo) fabric() (string, func()) {
	f, closeAll, err := startFabric(d.ctx, d.sec)
	if err != nil {
		d.rows = append(d.rows, demoRow{Op: "fabric setup", Detail: err.Error()})
		return "", closeAll
	}
	d.rows = append(d.rows, f.multicast(), f.allreduce(), f.anycastRoundRobin(), f.anycastAffinity())
	d.rows = append(d.rows, f.pool()...)
	d.rows = append(d.rows, f.storage())
	return f.sw, closeAll
}

// startFabric starts the switch and the members, joins them to the job and
// registers their regions. The returned function closes whatever was
// started, also on error.
func startFabric(ctx context.Context, sec *demoSecurity) (*fabricDemo, func(), error) {
	var closers []func()
	lendCtx, stopLending := context.WithCancel(context.Background())
	closers = append(closers, stopLending)
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		return nil, closeAll, err
	}
	// The demo's switch and endpoints share a fabric token of their own,
	// drawn for this run.
	token := secure.NewToken()
	sw, err := fabric.New(fabric.Config{Token: token})
	if err != nil {
		conn.Close()
		return nil, closeAll, err
	}
	swID, err := sec.issue(secure.RoleSwitch, "demo-switch")
	if err != nil {
		conn.Close()
		return nil, closeAll, err
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: swID, SecurityOptions: sealOptions})
	if err != nil {
		return nil, closeAll, err
	}
	closers = append(closers, func() { srv.Close() })
	sec.watch(srv.SecurityStats)
	f := &fabricDemo{ctx: ctx, sw: srv.Addr().String(), swAddr: srv.Addr(), lendCtx: lendCtx, closers: &closers,
		opts: endpoint.FabricOptions{Token: token}, sec: sec}
	for i := range demoMembers {
		opts, err := sec.endpoint(secure.RoleMember, fmt.Sprintf("%s/%d", demoJob, i))
		if err != nil {
			return nil, closeAll, err
		}
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, opts)
		if err != nil {
			return nil, closeAll, err
		}
		closers = append(closers, func() { ep.Close() })
		sec.watch(ep.SecurityStats)
		f.eps = append(f.eps, ep)
		size := demoGroupSize
		if i == 0 {
			size *= demoMembers
		}
		buf := make([]byte, size)
		key, err := ep.Register(buf, wire.PermAll, 0)
		if err != nil {
			return nil, closeAll, err
		}
		f.region = append(f.region, buf)
		f.keys = append(f.keys, key)
	}
	f.gs = make([]*endpoint.Group, demoMembers)
	errs := make([]error, demoMembers)
	var wg sync.WaitGroup
	for i, ep := range f.eps {
		wg.Go(func() { f.gs[i], errs[i] = ep.JoinJob(ctx, f.sw, demoJob, demoMembers, i, f.opts) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, closeAll, err
	}
	return f, closeAll, nil
}

// sent is the transport payload bytes ep has sent so far.
func sent(ep *endpoint.Endpoint) int64 { return int64(ep.Stats().Transport.BytesSent) }

// comparison is the measurements of one group operation against its
// host-only counterpart.
type comparison struct {
	ndma, host         []time.Duration
	ndmaSent, hostSent int64 // by the sender or root, summed over the repetitions
}

// row makes the report row: times are medians, bytes per repetition.
func (c *comparison) row(op string, size int, detail, bytesBy string, err error) demoRow {
	r := demoRow{Op: op, Size: size, OK: err == nil, Detail: detail, bytesBy: bytesBy}
	if err != nil {
		r.Detail = err.Error()
	}
	if len(c.ndma) > 0 && len(c.host) > 0 {
		nd, hd := median(c.ndma), median(c.host)
		r.LatencyUS = float64(nd) / float64(time.Microsecond)
		r.HostLatencyUS = float64(hd) / float64(time.Microsecond)
		r.Speedup = float64(hd) / float64(nd)
		r.SentBytes = c.ndmaSent / int64(len(c.ndma))
		r.HostSentBytes = c.hostSent / int64(len(c.host))
	}
	return r
}

// multicast sends demoGroupSize bytes from member 0 to the others through
// the switch, and the same bytes as sequential one-sided WRITEs into each
// other member's region.
func (f *fabricDemo) multicast() demoRow {
	var c comparison
	data := make([]byte, demoGroupSize)
	err := func() error {
		for rep := range demoFabricReps {
			for j := range data {
				data[j] = byte(j*13 + rep*7 + 1)
			}
			// NDMA: one transmission, replicated by the switch.
			bufs := make([][]byte, demoMembers)
			errs := make([]error, demoMembers)
			before := sent(f.eps[0])
			var wg sync.WaitGroup
			ctx, cancel := context.WithCancel(f.ctx)
			t0 := time.Now()
			for i := 1; i < demoMembers; i++ {
				bufs[i] = make([]byte, len(data))
				wg.Go(func() { errs[i] = f.gs[i].Recv(ctx, 0, bufs[i]) })
			}
			errs[0] = f.gs[0].Multicast(f.ctx, data, endpoint.MulticastOptions{})
			if errs[0] != nil {
				cancel() // the receivers would wait for nothing
			}
			wg.Wait()
			cancel()
			c.ndma = append(c.ndma, time.Since(t0))
			c.ndmaSent += sent(f.eps[0]) - before
			if err := errors.Join(errs...); err != nil {
				return err
			}
			for i := 1; i < demoMembers; i++ {
				if !bytes.Equal(bufs[i], data) {
					return fmt.Errorf("multicast: member %d received different bytes (repetition %d)", i, rep+1)
				}
			}

			// Host only: member 0 writes to each other member in turn.
			for i := 1; i < demoMembers; i++ {
				f.eps[i].Locked(func() { clear(f.region[i]) })
			}
			before = sent(f.eps[0])
			t0 = time.Now()
			for i := 1; i < demoMembers; i++ {
				if err := f.eps[0].Remote(f.eps[i].LocalAddr()).Write(f.ctx, f.keys[i], 0, data); err != nil {
					return fmt.Errorf("unicast to member %d: %w", i, err)
				}
			}
			c.host = append(c.host, time.Since(t0))
			c.hostSent += sent(f.eps[0]) - before
			for i := 1; i < demoMembers; i++ {
				var same bool
				f.eps[i].Locked(func() { same = bytes.Equal(f.region[i], data) })
				if !same {
					return fmt.Errorf("unicast: member %d's memory differs (repetition %d)", i, rep+1)
				}
			}
		}
		return nil
	}()
	return c.row("multicast vs unicasts", demoGroupSize,
		fmt.Sprintf("%d members got %d x %s, both ways", demoMembers-1, demoFabricReps, formatMiB(demoGroupSize)), "sender", err)
}

// allreduce sums demoGroupSize bytes of f32 over the members at the switch
// (deterministic mode), and the same by gathering the vectors into member
// 0's region with WRITEs, reducing there and writing the result back.
func (f *fabricDemo) allreduce() demoRow {
	const n = demoGroupSize / 4 // elements
	rng := rand.New(rand.NewPCG(3, 4))
	vecs := make([][]byte, demoMembers)
	for i := range vecs {
		vecs[i] = randomVector(rng, wire.DtypeF32, n)
	}
	// The reference: the sum in member order, as the switch's
	// deterministic mode computes it.
	want := slices.Clone(vecs[0])
	for _, v := range vecs[1:] {
		applyLocal(want, v, wire.DtypeF32, wire.AluAdd)
	}
	var c comparison
	recv := make([][]byte, demoMembers)
	for i := range recv {
		recv[i] = make([]byte, demoGroupSize)
	}
	err := func() error {
		for rep := range demoFabricReps {
			// NDMA: each member sends its vector once and gets the sum.
			for i := range recv {
				clear(recv[i])
			}
			errs := make([]error, demoMembers)
			before := sent(f.eps[0])
			var wg sync.WaitGroup
			t0 := time.Now()
			for i, g := range f.gs {
				wg.Go(func() {
					errs[i] = g.Allreduce(f.ctx, vecs[i], recv[i], wire.DtypeF32, wire.AluAdd, endpoint.ReduceOptions{Deterministic: true})
				})
			}
			wg.Wait()
			c.ndma = append(c.ndma, time.Since(t0))
			c.ndmaSent += sent(f.eps[0]) - before
			if err := errors.Join(errs...); err != nil {
				return err
			}
			for i := range recv {
				if j := firstDiff(recv[i], want); j >= 0 {
					return fmt.Errorf("allreduce: member %d element %d differs from the local sum (repetition %d)", i, j/4, rep+1)
				}
			}

			// Host only: gather to member 0, reduce there, write back.
			for i := 1; i < demoMembers; i++ {
				f.eps[i].Locked(func() { clear(f.region[i]) })
			}
			before = sent(f.eps[0])
			t0 = time.Now()
			root := f.eps[0].LocalAddr()
			for i := 1; i < demoMembers; i++ {
				wg.Go(func() {
					errs[i] = f.eps[i].Remote(root).Write(f.ctx, f.keys[0], uint64(i*demoGroupSize), vecs[i])
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("gather: %w", err)
			}
			sum := slices.Clone(vecs[0])
			f.eps[0].Locked(func() {
				for i := 1; i < demoMembers; i++ {
					applyLocal(sum, f.region[0][i*demoGroupSize:(i+1)*demoGroupSize], wire.DtypeF32, wire.AluAdd)
				}
			})
			for i := 1; i < demoMembers; i++ {
				wg.Go(func() {
					errs[i] = f.eps[0].Remote(f.eps[i].LocalAddr()).Write(f.ctx, f.keys[i], 0, sum)
				})
			}
			wg.Wait()
			c.host = append(c.host, time.Since(t0))
			c.hostSent += sent(f.eps[0]) - before
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("write back: %w", err)
			}
			if j := firstDiff(sum, want); j >= 0 {
				return fmt.Errorf("gather: root's element %d differs from the local sum (repetition %d)", j/4, rep+1)
			}
			for i := 1; i < demoMembers; i++ {
				j := -1
				f.eps[i].Locked(func() { j = firstDiff(f.region[i], recv[i]) })
				if j >= 0 {
					return fmt.Errorf("gather: member %d element %d differs from the allreduce (repetition %d)", i, j/4, rep+1)
				}
			}
		}
		return nil
	}()
	return c.row("allreduce f32 sum vs gather", demoGroupSize,
		fmt.Sprintf("%d members, %d elements, deterministic, exact both ways", demoMembers, n), "root", err)
}

// firstDiff returns the offset of the first byte where a and b (of equal
// length) differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// serve registers members 1 and 2 as service members 0 and 1 of sc; their
// handler counts requests in served (by service member) and replies
// "<service member>:<request>".
func (f *fabricDemo) serve(sc endpoint.ServiceConfig, served *[2]int, mu *sync.Mutex) error {
	for rank := range 2 {
		h := func(_ uint64, _ endpoint.Caller, req []byte) ([]byte, error) {
			mu.Lock()
			served[rank]++
			mu.Unlock()
			return fmt.Appendf(nil, "%d:%s", rank, req), nil
		}
		if _, err := f.eps[1+rank].RegisterService(f.ctx, f.sw, sc, rank, h, f.opts); err != nil {
			return err
		}
	}
	return nil
}

// request sends one anycast request from member 0 and returns the service
// member that served it, checking that the reply echoes the request.
func (f *fabricDemo) request(service string, key uint64, i int) (int, error) {
	req := fmt.Sprintf("req%03d", i)
	rep, err := f.eps[0].Anycast(f.ctx, f.sw, service, key, []byte(req), f.opts)
	if err != nil {
		return 0, err
	}
	who, echo, ok := strings.Cut(string(rep), ":")
	m, aerr := strconv.Atoi(who)
	if !ok || aerr != nil || echo != req || m < 0 || m > 1 {
		return 0, fmt.Errorf("request %d: reply %q", i, rep)
	}
	return m, nil
}

// anycastRoundRobin makes demoRequests requests to a round-robin service
// of two members and checks that each served half.
func (f *fabricDemo) anycastRoundRobin() demoRow {
	var mu sync.Mutex
	var served, replied [2]int
	var el time.Duration
	err := func() error {
		if err := f.serve(endpoint.ServiceConfig{Name: demoJob + ".rr", Size: 2, Policy: ctrl.PolicyRoundRobin}, &served, &mu); err != nil {
			return err
		}
		t0 := time.Now()
		for i := range demoRequests {
			m, err := f.request(demoJob+".rr", uint64(i), i)
			if err != nil {
				return err
			}
			replied[m]++
		}
		el = time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		if served != [2]int{demoRequests / 2, demoRequests / 2} || replied != served {
			return fmt.Errorf("served %v, replies name %v, want %d each", served, replied, demoRequests/2)
		}
		return nil
	}()
	row := demoRow{Op: "anycast round-robin", Size: len("req000"), OK: err == nil,
		Detail: fmt.Sprintf("%d requests, 2 members served %d/%d, replies match", demoRequests, served[0], served[1])}
	if err != nil {
		row.Detail = err.Error()
	} else {
		row.OpsPerSec = demoRequests / el.Seconds()
	}
	return row
}

// anycastAffinity makes demoRequests requests to a key-affinity service
// whose two key ranges each belong to one member, alternating between the
// ranges, and checks that the owner served every one.
func (f *fabricDemo) anycastAffinity() demoRow {
	const half = uint64(1) << 63
	ranges := []ctrl.KeyRange{{Start: 0, End: half, Owner: 0}, {Start: half, End: math.MaxUint64, Owner: 1}}
	var mu sync.Mutex
	var served [2]int
	onOwner := 0
	var el time.Duration
	err := func() error {
		if err := f.serve(endpoint.ServiceConfig{Name: demoJob + ".kv", Size: 2, Policy: ctrl.PolicyKeyAffinity, Ranges: ranges}, &served, &mu); err != nil {
			return err
		}
		t0 := time.Now()
		for i := range demoRequests {
			owner := i % 2
			key := uint64(i) * 977
			if owner == 1 {
				key += half
			}
			m, err := f.request(demoJob+".kv", key, i)
			if err != nil {
				return err
			}
			if m == owner {
				onOwner++
			}
		}
		el = time.Since(t0)
		if onOwner != demoRequests {
			return fmt.Errorf("%d of %d requests served by their key's owner", onOwner, demoRequests)
		}
		return nil
	}()
	row := demoRow{Op: "anycast key-affinity", Size: len("req000"), OK: err == nil,
		Detail: fmt.Sprintf("%d requests over 2 ranges, %d%% on the owner", demoRequests, onOwner*100/demoRequests)}
	if err != nil {
		row.Detail = err.Error()
	} else {
		row.OpsPerSec = demoRequests / el.Seconds()
	}
	return row
}

// formatDuration prints d with three significant figures or so: "850 µs",
// "1.2 ms", "2.31 s".
func formatDuration(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%.0f µs", us)
	case us < 1e6:
		return fmt.Sprintf("%.1f ms", us/1e3)
	}
	return fmt.Sprintf("%.2f s", us/1e6)
}

// formatMiB prints a byte count in MiB with one decimal: "1.0M".
func formatMiB(n int64) string { return fmt.Sprintf("%.1fM", float64(n)/(1<<20)) }
