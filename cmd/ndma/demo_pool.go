package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// The demo's memory pool: demoPoolNodes memory nodes lend demoPoolNodeSize
// bytes each to the demo's switch.
const (
	demoPoolNodes    = 3
	demoPoolNodeSize = 16 << 20
	demoPoolTransfer = 4 << 20
	demoPoolVector   = 256 << 10
	demoPoolParams   = 64 << 10 // parameters of the optimizer step, in bytes
)

// pool starts the memory nodes, lends their memory to the switch and runs
// the pool rows: a striped write and read, a chained reduce across the
// nodes and an Adam step in the nodes.
func (f *fabricDemo) pool() []demoRow {
	var rows []demoRow
	fail := func(op string, err error) []demoRow {
		return append(rows, demoRow{Op: op, Detail: err.Error()})
	}
	for i := range demoPoolNodes {
		st, err := memnode.NewStore(memnode.Config{})
		if err != nil {
			return fail("pool setup", err)
		}
		key, err := st.Alloc(demoPoolNodeSize, wire.PermAll, 0)
		if err != nil {
			return fail("pool setup", err)
		}
		opts, err := f.sec.endpoint(secure.RoleMemoryNode, fmt.Sprintf("demo-pool%d", i))
		if err != nil {
			return fail("pool setup", err)
		}
		conn, err := netio.ListenUDP("127.0.0.1:0", opts.UDP)
		if err != nil {
			return fail("pool setup", err)
		}
		n, err := node.New(conn, node.Config{Store: st, Pool: &server.PoolServe{Switch: f.swAddr, Key: key, Token: f.opts.Token}},
			node.Options{Logger: opts.Logger, Security: opts.Security, SecurityOptions: opts.SecurityOptions})
		if err != nil {
			conn.Close()
			return fail("pool setup", err)
		}
		*f.closers = append(*f.closers, func() { n.Close() })
		f.sec.watch(n.SecurityStats)
		if _, err := n.Lend(f.lendCtx, f.swAddr, key, demoPoolNodeSize, f.opts); err != nil {
			return fail("pool setup", err)
		}
	}
	c, err := pool.New(f.eps[0], f.sw, pool.Options{Fabric: f.opts})
	if err != nil {
		return fail("pool setup", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))

	// Striped write and read back.
	r, err := c.Alloc(f.ctx, demoPoolTransfer, pool.AllocOptions{Stripe: 64 << 10})
	if err != nil {
		return fail("pool write+read", err)
	}
	data := make([]byte, demoPoolTransfer)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	back := make([]byte, len(data))
	t0 := time.Now()
	_, err = r.WriteAt(data, 0)
	if err == nil {
		_, err = r.ReadAt(back, 0)
	}
	row := demoRow{Op: "pool write+read", Size: len(data), OK: err == nil && bytes.Equal(back, data),
		Detail: fmt.Sprintf("striped over %d memory nodes, read back equal", r.Spec().Columns)}
	if err != nil {
		row.Detail = err.Error()
	} else if !row.OK {
		row.Detail = "read back differs"
	}
	row.Gbps = float64(2*len(data)) * 8 / time.Since(t0).Seconds() / 1e9
	rows = append(rows, row)
	_ = c.Free(f.ctx, r)

	// Chained reduce: one vector per node, summed node to node, stored.
	rows = append(rows, f.poolReduce(c, rng))
	rows = append(rows, f.poolAdam(c, rng))
	return rows
}

// poolReduce sums demoPoolNodes i64 vectors, one on each memory node, with
// chained instructions and checks the stored sum.
func (f *fabricDemo) poolReduce(c *pool.Client, rng *rand.Rand) demoRow {
	const n = demoPoolVector
	row := demoRow{Op: "pool chained reduce i64", Size: n}
	r, err := c.Alloc(f.ctx, (demoPoolNodes+1)*n, pool.AllocOptions{Stripe: n})
	if err != nil {
		row.Detail = err.Error()
		return row
	}
	defer func() { _ = c.Free(f.ctx, r) }()
	want := make([]int64, n/8)
	var srcs []uint64
	for k := range demoPoolNodes {
		v := make([]byte, n)
		for i := range want {
			x := int64(rng.Uint64() >> 8)
			binary.LittleEndian.PutUint64(v[8*i:], uint64(x))
			want[i] += x
		}
		if _, err := r.WriteAt(v, int64(k*n)); err != nil {
			row.Detail = err.Error()
			return row
		}
		srcs = append(srcs, uint64(k*n))
	}
	t0 := time.Now()
	err = r.Reduce(f.ctx, uint64(demoPoolNodes*n), srcs, n, wire.DtypeI64, wire.AluAdd)
	elapsed := time.Since(t0)
	got := make([]byte, n)
	if err == nil {
		_, err = r.ReadAt(got, int64(demoPoolNodes*n))
	}
	if err != nil {
		row.Detail = err.Error()
		return row
	}
	for i, w := range want {
		if g := int64(binary.LittleEndian.Uint64(got[8*i:])); g != w {
			row.Detail = fmt.Sprintf("element %d: %d, want %d", i, g, w)
			return row
		}
	}
	row.OK = true
	row.Detail = fmt.Sprintf("%d vectors on %d nodes summed node to node, exact", demoPoolNodes, demoPoolNodes)
	row.LatencyUS = float64(elapsed) / float64(time.Microsecond)
	return row
}

// poolAdam runs one Adam step in the memory nodes and compares it with the
// same step computed here in float64.
func (f *fabricDemo) poolAdam(c *pool.Client, rng *rand.Rand) demoRow {
	const n = demoPoolParams / 4
	row := demoRow{Op: "pool adam step f32", Size: demoPoolParams}
	r, err := c.Alloc(f.ctx, 3*demoPoolParams+(3<<20), pool.AllocOptions{Stripe: 16 << 10})
	if err != nil {
		row.Detail = err.Error()
		return row
	}
	defer func() { _ = c.Free(f.ctx, r) }()
	o := wire.OptimParams{Algo: wire.OptimAdam, Step: 1, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	p, g := make([]byte, 4*n), make([]byte, 4*n)
	ref := make([]float64, n)
	for i := range n {
		pi, gi := float32(rng.NormFloat64()), float32(rng.NormFloat64())
		binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(pi))
		binary.LittleEndian.PutUint32(g[4*i:], math.Float32bits(gi))
		// First Adam step from zero moments: m̂ = g, v̂ = g².
		ref[i] = float64(pi) - 1e-3*float64(gi)/(math.Abs(float64(gi))+1e-8)
	}
	if _, err := r.WriteAt(p, 0); err != nil {
		row.Detail = err.Error()
		return row
	}
	t0 := time.Now()
	err = r.OptimizerStep(f.ctx, 0, r.StateStride(4*n), o, g)
	elapsed := time.Since(t0)
	if err == nil {
		_, err = r.ReadAt(p, 0)
	}
	if err != nil {
		row.Detail = err.Error()
		return row
	}
	worst := 0.0
	for i := range n {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:])))
		worst = max(worst, math.Abs(x-ref[i])/max(1, math.Abs(ref[i])))
	}
	row.OK = worst < 1e-5
	row.Detail = fmt.Sprintf("%d parameters updated in the nodes, within %.0e of the reference", n, worst)
	if !row.OK {
		row.Detail = fmt.Sprintf("differs from the reference by %g", worst)
	}
	row.LatencyUS = float64(elapsed) / float64(time.Microsecond)
	return row
}
