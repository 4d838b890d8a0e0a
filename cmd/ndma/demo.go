package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/bench"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// demoRegionSize is the region of the demo's in-process memory node.
const demoRegionSize = 64 << 20

func init() {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run every NDMA operation against an in-process memory node and switch and verify the results",
		Long: `Starts a memory node in-process on loopback with a 64 MiB region, connects an
endpoint to it and runs every operation: WRITE and READ of several sizes,
compare-and-swap that succeeds and one that fails, fetch-and-add from
concurrent goroutines, vector ADD/MIN/MAX on f32, f64, i32 and i64, and the
refusals (bad key, out of bounds, misaligned, unknown op).

Then it starts a switch (forwarding node) in-process with a fabric token and
joins 4 endpoints to a job, and compares each group operation with a
host-only way of doing the same with one-sided WRITEs: a 1 MiB multicast
against sequential unicasts, a 1 MiB f32 allreduce (deterministic) against
gathering to a root, reducing there and writing back — times and the bytes
the sender or root put on the wire — and anycast to a round-robin and a
key-affinity service of two members, 100 requests each. Last, three memory
nodes lend memory to the switch's pool: a 4 MiB write and read striped over
them, a chained reduce of one vector per node summed node to node with no
host in between, and an Adam step applied by the nodes to parameters in the
pool.

Every process runs sealed: the demo draws a fabric secret for the run and
issues each process its own credential (client, member, memory-node,
switch), so every datagram is encrypted and authenticated; the last row
counts the datagrams sealed and opened, and fails if any was refused.

Each result is verified; the exit status is non-zero if anything fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), jsonOut)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON Lines, one object per row")
	rootCmd.AddCommand(cmd)
}

// demoRow is one line of the demo's report.
type demoRow struct {
	Op     string `json:"op"`
	Size   int    `json:"size"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// One of the following measures the row, the rest are zero.
	LatencyUS float64 `json:"latency_us,omitempty"`
	Gbps      float64 `json:"gbps,omitempty"`
	OpsPerSec float64 `json:"ops_per_sec,omitempty"`
	// A group operation compared with a host-only way of doing the same
	// thing: LatencyUS is the group operation's median time, HostLatencyUS
	// the host-only one's, Speedup their ratio (host / NDMA). SentBytes and
	// HostSentBytes are the transport payload bytes the sender (or root)
	// put on the wire per operation.
	HostLatencyUS float64 `json:"host_latency_us,omitempty"`
	Speedup       float64 `json:"speedup,omitempty"`
	SentBytes     int64   `json:"sent_bytes,omitempty"`
	HostSentBytes int64   `json:"host_sent_bytes,omitempty"`
	// The security row: datagrams the demo's processes sealed, opened,
	// and refused (none when every one verified).
	Sealed  uint64 `json:"sealed,omitempty"`
	Opened  uint64 `json:"opened,omitempty"`
	Refused uint64 `json:"refused,omitempty"`

	bytesBy string // who sent SentBytes, for the table: "sender", "root"
}

func (r *demoRow) perf() string {
	switch {
	case r.HostLatencyUS > 0:
		return fmt.Sprintf("NDMA %s vs host %s (%.1fx), %s bytes %s vs %s",
			formatDuration(r.LatencyUS), formatDuration(r.HostLatencyUS), r.Speedup,
			r.bytesBy, formatMiB(r.SentBytes), formatMiB(r.HostSentBytes))
	case r.Gbps > 0:
		return fmt.Sprintf("%.2f Gbit/s", r.Gbps)
	case r.OpsPerSec > 0:
		return fmt.Sprintf("%.0f ops/s", r.OpsPerSec)
	case r.LatencyUS > 0:
		return fmt.Sprintf("%.1f µs", r.LatencyUS)
	}
	return "-"
}

// demoTimeout bounds the whole demo, so that a fault shows as a failed row
// rather than a hang. It is generous: under the race detector on a loaded
// two-core machine the demo takes about half a minute.
const demoTimeout = 2 * time.Minute

// errDemoFailed is returned by runDemo when a row did not verify.
var errDemoFailed = errors.New("demo: some operations failed to verify")

// demo runs the demo's steps against one memory node, then against a
// forwarding node.
type demo struct {
	sec  *demoSecurity
	r    *endpoint.Remote
	key  uint64
	rows []demoRow
	ctx  context.Context
	sw   string // the forwarding node's address, once started
}

// add records a row; err (nil for success) becomes its result.
func (d *demo) add(op string, size int, detail string, err error, elapsed time.Duration, bytes int) {
	row := demoRow{Op: op, Size: size, OK: err == nil, Detail: detail}
	if err != nil {
		row.Detail = err.Error()
	}
	if bytes > 0 {
		row.Gbps = float64(bytes) * 8 / elapsed.Seconds() / 1e9
	} else if elapsed > 0 {
		row.LatencyUS = float64(elapsed) / float64(time.Microsecond)
	}
	d.rows = append(d.rows, row)
}

// runDemo starts a memory node, runs every operation against it and
// writes the report to w as a table or, with jsonOut, JSON Lines. It
// returns errDemoFailed if a result did not verify, or the error that
// kept it from running.
func runDemo(ctx context.Context, w io.Writer, jsonOut bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	sec, err := newDemoSecurity()
	if err != nil {
		return err
	}
	node, err := startDemoNode(sec)
	if err != nil {
		return err
	}
	defer node.Close()
	opts, err := sec.endpoint(secure.RoleClient, "demo-client")
	if err != nil {
		return err
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: bench.DefaultMTU}}, opts)
	if err != nil {
		return err
	}
	defer ep.Close()
	sec.watch(ep.SecurityStats)
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	r, err := ep.Dial(ctx, node.Addr().String())
	if err != nil {
		return err
	}
	d := &demo{sec: sec, r: r, key: node.Key, ctx: ctx}
	d.readWrite()
	d.cas()
	d.fetchAdd()
	d.vectors()
	d.refusals()
	sw, closeFabric := d.fabric()
	defer closeFabric()
	d.sw = sw
	d.rows = append(d.rows, sec.row())

	if err := writeDemo(w, d, jsonOut, node); err != nil {
		return err
	}
	for _, row := range d.rows {
		if !row.OK {
			return errDemoFailed
		}
	}
	return nil
}

// startDemoNode starts the demo's memory node: an endpoint on loopback
// with a region of demoRegionSize bytes that allows every operation,
// sealing every datagram under a memory node's identity.
func startDemoNode(sec *demoSecurity) (*bench.Node, error) {
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return nil, err
	}
	key, err := st.Alloc(demoRegionSize, wire.PermAll, 0)
	if err != nil {
		return nil, fmt.Errorf("memory node region: %w", err)
	}
	opts, err := sec.endpoint(secure.RoleMemoryNode, "demo-mem")
	if err != nil {
		return nil, err
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Store: st, Transport: transport.Config{MTU: bench.DefaultMTU}}, opts)
	if err != nil {
		return nil, fmt.Errorf("memory node: %w", err)
	}
	sec.watch(ep.SecurityStats)
	return &bench.Node{EP: ep, Key: key, Size: demoRegionSize}, nil
}

func writeDemo(w io.Writer, d *demo, jsonOut bool, node *bench.Node) error {
	rows := d.rows
	if jsonOut {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(w, "NDMA demo: memory node on %v, a region of %s\n", node.Addr(), bench.FormatSize(node.Size))
	if d.sw != "" {
		fmt.Fprintf(w, "           switch on %s with a fabric token, %d endpoints in job %q (host-only: one-sided WRITEs)\n", d.sw, demoMembers, demoJob)
	}
	fmt.Fprintf(w, "           every process with its own credential under a fabric secret drawn for this run: every datagram sealed\n")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tSIZE\tRESULT\tPERFORMANCE")
	failed := 0
	for _, r := range rows {
		res := "ok"
		if !r.OK {
			res = "FAIL"
			failed++
		}
		if r.Detail != "" {
			res += ": " + r.Detail
		}
		size := "-"
		if r.Size > 0 {
			size = bench.FormatSize(r.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Op, size, res, r.perf())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		_, err := fmt.Fprintf(w, "\n%d of %d checks FAILED\n", failed, len(rows))
		return err
	}
	_, err := fmt.Fprintf(w, "\nall %d checks passed\n", len(rows))
	return err
}

// demoReps is how often each WRITE and READ is repeated; the median time
// is reported, so that a cold first operation does not stand for the rest.
const demoReps = 9

// readWrite writes patterns of several sizes and reads them back, each
// demoReps times with a fresh pattern, verifying every read.
func (d *demo) readWrite() {
	const base = 1 << 20 // clear of the words the other steps use
	for i, size := range []int{64, 4 << 10, 1 << 20} {
		addr := uint64(base + i*(2<<20))
		data := make([]byte, size)
		got := make([]byte, size)
		var wt, rt []time.Duration
		var werr, rerr error
		for rep := range demoReps {
			for j := range data {
				data[j] = byte(j*7 + rep + 1)
			}
			t0 := time.Now()
			if werr = d.r.Write(d.ctx, d.key, addr, data); werr != nil {
				break
			}
			wt = append(wt, time.Since(t0))
			t0 = time.Now()
			if rerr = d.r.Read(d.ctx, d.key, addr, got); rerr != nil {
				break
			}
			rt = append(rt, time.Since(t0))
			if !bytes.Equal(got, data) {
				rerr = fmt.Errorf("read back differs from what was written (repetition %d)", rep+1)
				break
			}
		}
		bw := 0
		if size >= 1<<20 {
			bw = size
		}
		d.add("write", size, fmt.Sprintf("%d writes at %#x", demoReps, addr), werr, median(wt), bw)
		d.add("read", size, fmt.Sprintf("%d reads match the writes", demoReps), errors.Join(werr, rerr), median(rt), bw)
	}
}

// median returns the median of ds, or zero for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// cas swaps a word that holds the expected value, then fails to swap it
// with a stale expected value.
func (d *demo) cas() {
	const addr = 64
	const first, second = 0x1111, 0x2222
	t0 := time.Now()
	old, err := d.r.CompareAndSwap(d.ctx, d.key, addr, 0, first)
	el := time.Since(t0)
	if err == nil && old != 0 {
		err = fmt.Errorf("swap of 0 found %#x", old)
	}
	d.add("cas", 8, "0 -> 0x1111 swapped", err, el, 0)

	t0 = time.Now()
	old, err = d.r.CompareAndSwap(d.ctx, d.key, addr, 0, second)
	el = time.Since(t0)
	if err == nil && old != first {
		err = fmt.Errorf("stale compare returned %#x, want %#x", old, first)
	}
	if err == nil {
		var b [8]byte
		if err = d.r.Read(d.ctx, d.key, addr, b[:]); err == nil && binary.LittleEndian.Uint64(b[:]) != first {
			err = fmt.Errorf("failed CAS changed the word to %#x", binary.LittleEndian.Uint64(b[:]))
		}
	}
	d.add("cas", 8, "stale 0 refused, word still 0x1111", err, el, 0)
}

// fetchAdd adds distinct deltas from concurrent goroutines and checks the
// sum and that every add saw a distinct previous value.
func (d *demo) fetchAdd() {
	const addr = 128
	const goroutines, each = 8, 100
	olds := make([][]uint64, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	var want uint64
	t0 := time.Now()
	for g := range goroutines {
		for i := range each {
			want += uint64(g*1000 + i + 1)
		}
		wg.Go(func() {
			for i := range each {
				old, err := d.r.FetchAdd(d.ctx, d.key, addr, uint64(g*1000+i+1))
				if err != nil {
					errs[g] = err
					return
				}
				olds[g] = append(olds[g], old)
			}
		})
	}
	wg.Wait()
	el := time.Since(t0)
	err := errors.Join(errs...)
	if err == nil {
		var b [8]byte
		if err = d.r.Read(d.ctx, d.key, addr, b[:]); err == nil {
			if got := binary.LittleEndian.Uint64(b[:]); got != want {
				err = fmt.Errorf("sum %d, want %d", got, want)
			}
		}
	}
	if err == nil {
		all := slices.Concat(olds...)
		slices.Sort(all)
		if len(slices.Compact(all)) != goroutines*each {
			err = fmt.Errorf("two fetch-adds saw the same previous value")
		}
	}
	row := demoRow{Op: "fadd", Size: 8, OK: err == nil,
		Detail:    fmt.Sprintf("%d goroutines x %d adds, sum %d exact", goroutines, each, want),
		OpsPerSec: goroutines * each / el.Seconds()}
	if err != nil {
		row.Detail = err.Error()
	}
	d.rows = append(d.rows, row)
}

// vectors applies ADD, MIN and MAX on every element type to random data
// and compares memory with a local computation.
func (d *demo) vectors() {
	const base = 16 << 20
	const n = 1024 // elements
	rng := rand.New(rand.NewPCG(1, 2))
	i := 0
	for _, dt := range []wire.Dtype{wire.DtypeF32, wire.DtypeF64, wire.DtypeI32, wire.DtypeI64} {
		for _, alu := range []wire.Alu{wire.AluAdd, wire.AluMin, wire.AluMax} {
			addr := uint64(base + i*n*8)
			i++
			mem, arg := randomVector(rng, dt, n), randomVector(rng, dt, n)
			want := slices.Clone(mem)
			applyLocal(want, arg, dt, alu)
			err := d.r.Write(d.ctx, d.key, addr, mem)
			var el time.Duration
			if err == nil {
				t0 := time.Now()
				err = d.r.Apply(d.ctx, d.key, addr, dt, alu, arg)
				el = time.Since(t0)
			}
			got := make([]byte, len(mem))
			if err == nil {
				err = d.r.Read(d.ctx, d.key, addr, got)
			}
			if err == nil && !bytes.Equal(got, want) {
				err = fmt.Errorf("result differs from the local computation")
			}
			d.add(fmt.Sprintf("vector %s %s", alu, dt), len(arg), fmt.Sprintf("%d elements match local", n), err, el, 0)
		}
	}
}

// randomVector returns n little-endian elements of dt: floats in
// [-1000, 1000), integers over their whole range (so ADD wraps).
func randomVector(rng *rand.Rand, dt wire.Dtype, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := range n {
		switch dt {
		case wire.DtypeF32:
			binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(float32(rng.Float64()*2000-1000)))
		case wire.DtypeF64:
			binary.LittleEndian.PutUint64(b[i*8:], math.Float64bits(rng.Float64()*2000-1000))
		case wire.DtypeI32:
			binary.LittleEndian.PutUint32(b[i*4:], rng.Uint32())
		case wire.DtypeI64:
			binary.LittleEndian.PutUint64(b[i*8:], rng.Uint64())
		}
	}
	return b
}

// applyLocal computes mem[i] = alu(mem[i], arg[i]) the way a memory node
// does, as the reference the demo checks against.
func applyLocal(mem, arg []byte, dt wire.Dtype, alu wire.Alu) {
	le := binary.LittleEndian
	for off := 0; off < len(mem); off += dt.Size() {
		m, a := mem[off:], arg[off:]
		switch dt {
		case wire.DtypeF32:
			x, y := math.Float32frombits(le.Uint32(m)), math.Float32frombits(le.Uint32(a))
			if alu == wire.AluAdd {
				le.PutUint32(m, math.Float32bits(x+y))
			} else if wins(alu, x, y) {
				le.PutUint32(m, le.Uint32(a))
			}
		case wire.DtypeF64:
			x, y := math.Float64frombits(le.Uint64(m)), math.Float64frombits(le.Uint64(a))
			if alu == wire.AluAdd {
				le.PutUint64(m, math.Float64bits(x+y))
			} else if wins(alu, x, y) {
				le.PutUint64(m, le.Uint64(a))
			}
		case wire.DtypeI32:
			x, y := int32(le.Uint32(m)), int32(le.Uint32(a))
			if alu == wire.AluAdd {
				le.PutUint32(m, uint32(x+y))
			} else if wins(alu, x, y) {
				le.PutUint32(m, uint32(y))
			}
		case wire.DtypeI64:
			x, y := int64(le.Uint64(m)), int64(le.Uint64(a))
			if alu == wire.AluAdd {
				le.PutUint64(m, uint64(x+y))
			} else if wins(alu, x, y) {
				le.PutUint64(m, uint64(y))
			}
		}
	}
}

// wins reports whether MIN or MAX replaces memory element x with argument
// element y: only when y compares strictly less (MIN) or greater (MAX).
func wins[T int32 | int64 | float32 | float64](alu wire.Alu, x, y T) bool {
	return alu == wire.AluMin && y < x || alu == wire.AluMax && y > x
}

// refusals sends requests a memory node must refuse and checks the status
// codes that come back.
func (d *demo) refusals() {
	var buf [8]byte
	cases := []struct {
		name string
		want wire.Status
		run  func() error
	}{
		{"read, bad key", wire.StatusBadKey, func() error { return d.r.Read(d.ctx, d.key^1, 0, buf[:]) }},
		{"write, out of bounds", wire.StatusOutOfBounds, func() error { return d.r.Write(d.ctx, d.key, demoRegionSize-4, buf[:]) }},
		{"fadd, misaligned", wire.StatusMisaligned, func() error {
			_, err := d.r.FetchAdd(d.ctx, d.key, 3, 1)
			return err
		}},
		{"vector prod, unknown op", wire.StatusUnknownOp, func() error {
			return d.r.Apply(d.ctx, d.key, 0, wire.DtypeF32, wire.AluProd, buf[:])
		}},
	}
	for _, c := range cases {
		t0 := time.Now()
		err := c.run()
		el := time.Since(t0)
		var oe *endpoint.OpError
		switch {
		case err == nil:
			err = fmt.Errorf("accepted, want %s", c.want.String())
		case !errors.Is(err, c.want):
			err = fmt.Errorf("got %v, want %s", err, c.want.String())
		case !errors.As(err, &oe):
			err = fmt.Errorf("%v is not an *endpoint.OpError", err)
		default:
			err = nil
		}
		d.add(c.name, len(buf), fmt.Sprintf("refused: %s (status %d)", c.want.String(), uint8(c.want)), err, el, 0)
	}
}
