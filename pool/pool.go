// Package pool is the client of the NetDAM memory pool: one address space
// striped across the memory nodes behind a forwarding node (package fabric,
// its MMU). A Client creates, opens and frees regions; a Region reads and
// writes at pool addresses (io.ReaderAt, io.WriterAt) and runs atomics and
// vector ops there.
//
// A transfer is split at stripe boundaries (the layout comes from the
// switch when the region is opened), and the pieces go out in parallel, up
// to Options.Window of them at once: each piece goes through the switch to
// the node that holds it, which answers this client directly. See
// docs/ARCHITECTURE.md ("Memory pool") and docs/PROTOCOL.md ("Pool
// requests").
package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// DefaultWindow is the pieces of a transfer in flight at once when
// Options.Window is zero.
const DefaultWindow = 64

// Options configure a Client.
type Options struct {
	// Fabric carries the fabric token for the switch's control messages.
	Fabric endpoint.FabricOptions
	// Window bounds the stripe pieces of one ReadAt or WriteAt in flight at
	// once. Zero means DefaultWindow.
	Window int
}

// Client talks to the pool of one forwarding node through an endpoint.
type Client struct {
	ep   *endpoint.Endpoint
	sw   string
	addr netip.AddrPort
	opts Options
	// proved is when (Unix ns) the switch last got an acknowledged control
	// response from this client: what proves to it that the client
	// receives at its address, without which it does not forward a READ
	// or chain whose answer would be more than three times the request.
	proved atomic.Int64
}

// ReproveAfter is how long after its last control exchange with the
// switch a client makes another (it opens the region again) before a
// read or chain: the switch forgets a proven address unused for
// fabric.ControlLimits.PoolClientTTL (one hour by default), which must be
// longer.
const ReproveAfter = 30 * time.Minute

// keepProven opens r again if the client's proof at the switch may have
// lapsed (see ReproveAfter).
func (r *Region) keepProven(ctx context.Context) error {
	if time.Since(time.Unix(0, r.c.proved.Load())) < ReproveAfter {
		return nil
	}
	if _, err := r.c.ep.PoolOpen(ctx, r.c.sw, r.spec.Region, r.key, r.c.opts.Fabric); err != nil {
		return fmt.Errorf("pool: region %d: %w", r.spec.Region, err)
	}
	r.c.proved.Store(time.Now().UnixNano())
	return nil
}

// New returns a client of the pool behind the switch at sw ("host:port"),
// using ep (which it does not close).
func New(ep *endpoint.Endpoint, sw string, opts Options) (*Client, error) {
	ap, err := endpoint.ResolveAddr(sw)
	if err != nil {
		return nil, fmt.Errorf("pool: switch address: %w", err)
	}
	sw = ap.String() // looked up once
	if opts.Window < 0 {
		return nil, fmt.Errorf("pool: negative window %d", opts.Window)
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	return &Client{ep: ep, sw: sw, addr: ap, opts: opts}, nil
}

// AllocOptions shape a new region.
type AllocOptions struct {
	// Stripe is the interleave unit in bytes (a multiple of 8); zero means
	// 64 KiB.
	Stripe uint64
	// Replicas is the copies of every byte, 1 (zero means 1) or 2.
	// Replicated regions refuse atomics and vector ops.
	Replicas int
	// Columns is the memory nodes to spread over; zero means every live
	// one.
	Columns int
	// Perm is what accesses may do; zero means read and write (plus
	// atomics and vector ops for a region with one copy).
	Perm wire.Perm
}

// DefaultStripe is the stripe size when AllocOptions.Stripe is zero.
const DefaultStripe = 64 << 10

// Alloc creates a region of size bytes.
func (c *Client) Alloc(ctx context.Context, size uint64, o AllocOptions) (*Region, error) {
	spec := ctrl.PoolSpec{Size: size, Stripe: o.Stripe, Columns: o.Columns, Replicas: o.Replicas, Perm: uint8(o.Perm)}
	if spec.Stripe == 0 {
		spec.Stripe = DefaultStripe
	}
	if spec.Replicas == 0 {
		spec.Replicas = 1
	}
	if spec.Perm == 0 {
		p := wire.PermRead | wire.PermWrite
		if spec.Replicas == 1 {
			p = wire.PermAll
		}
		spec.Perm = uint8(p)
	}
	got, key, err := c.ep.PoolCreate(ctx, c.sw, spec, c.opts.Fabric)
	if err != nil {
		return nil, err
	}
	return c.region(got, key)
}

// Open opens region id with its key.
func (c *Client) Open(ctx context.Context, id uint32, key uint64) (*Region, error) {
	spec, err := c.ep.PoolOpen(ctx, c.sw, id, key, c.opts.Fabric)
	if err != nil {
		return nil, err
	}
	return c.region(spec, key)
}

func (c *Client) region(spec ctrl.PoolSpec, key uint64) (*Region, error) {
	c.proved.Store(time.Now().UnixNano())
	l, err := poolmap.NewLayout(spec.Size, spec.Stripe, spec.Columns, spec.Replicas)
	if err != nil {
		return nil, fmt.Errorf("pool: region %d: %w", spec.Region, err)
	}
	return &Region{c: c, spec: spec, key: key, layout: l}, nil
}

// Free frees region r; its memory is scrubbed before it is used again,
// and every access with its key fails from then on.
func (c *Client) Free(ctx context.Context, r *Region) error {
	return c.ep.PoolFree(ctx, c.sw, r.spec.Region, r.key, c.opts.Fabric)
}

// Region is an open pool region. Its methods are safe for concurrent use.
type Region struct {
	c      *Client
	spec   ctrl.PoolSpec
	key    uint64
	layout poolmap.Layout
	fence  Fence // carried by the writes, atomics and vector ops (Fenced)
}

// ID is the region's id.
func (r *Region) ID() uint32 { return r.spec.Region }

// Key is the region's key: the capability that opens it.
func (r *Region) Key() uint64 { return r.key }

// Size is the region's size in bytes.
func (r *Region) Size() int64 { return int64(r.spec.Size) }

// Spec is the region's shape.
func (r *Region) Spec() ctrl.PoolSpec { return r.spec }

// ErrDegraded is returned (joined with nothing else: the data was written)
// by a write to a replicated region that reached fewer copies than the
// region keeps, because a memory node is dead.
var ErrDegraded = errors.New("pool: written with a replica missing (degraded)")

// ReadAt reads len(p) bytes at pool offset off (io.ReaderAt). A read that
// runs past the region's end reads what is there and returns io.EOF.
func (r *Region) ReadAt(p []byte, off int64) (int, error) {
	return r.ReadAtContext(context.Background(), p, off)
}

// WriteAt writes p at pool offset off (io.WriterAt). A write past the
// region's end writes nothing and fails with wire.StatusOutOfBounds.
func (r *Region) WriteAt(p []byte, off int64) (int, error) {
	return r.WriteAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt with a context.
func (r *Region) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("pool: read at negative offset %d", off)
	}
	size := r.Size()
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), size-off))
	if err := r.transfer(ctx, endpoint.KindRead, p[:n], uint64(off)); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAtContext is WriteAt with a context.
func (r *Region) WriteAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || off > r.Size() || int64(len(p)) > r.Size()-off {
		return 0, fmt.Errorf("pool: write of %d bytes at %d in a region of %d: %w", len(p), off, r.Size(), wire.StatusOutOfBounds)
	}
	if err := r.transfer(ctx, endpoint.KindWrite, p, uint64(off)); err != nil {
		if errors.Is(err, ErrDegraded) {
			return len(p), err
		}
		return 0, err
	}
	return len(p), nil
}

// Apply applies the element-wise vector op alu with the elements of data
// (little-endian dt values) to the region's memory at off.
func (r *Region) Apply(ctx context.Context, off uint64, dt wire.Dtype, alu wire.Alu, data []byte) error {
	return r.transferOp(ctx, &endpoint.Op{Kind: endpoint.KindVector, Dtype: dt, Alu: alu}, data, off)
}

// CompareAndSwap swaps the little-endian 64-bit word at off (8-byte
// aligned) for swap if it equals compare, and returns its old value.
func (r *Region) CompareAndSwap(ctx context.Context, off, compare, swap uint64) (uint64, error) {
	op := r.op(endpoint.KindCAS, off)
	op.Compare, op.Swap = compare, swap
	err := r.c.ep.Do(ctx, op)
	return op.Old, err
}

// Pending is an atomic operation started by StartCompareAndSwap.
type Pending struct {
	r   *Region
	op  *endpoint.Op
	ctx context.Context
}

// StartCompareAndSwap starts CompareAndSwap and returns at once: what
// one goroutine starts next goes on the wire after it. Wait for the
// result with Pending.Wait; ctx bounds it as it does CompareAndSwap.
func (r *Region) StartCompareAndSwap(ctx context.Context, off, compare, swap uint64) (*Pending, error) {
	op := r.op(endpoint.KindCAS, off)
	op.Compare, op.Swap = compare, swap
	if err := r.c.ep.Begin(ctx, op); err != nil {
		return nil, err
	}
	return &Pending{r: r, op: op, ctx: ctx}, nil
}

// Wait waits for the operation and returns the word's old value.
func (p *Pending) Wait() (uint64, error) {
	err := p.r.c.ep.Wait(p.ctx, p.op)
	return p.op.Old, err
}

// FetchAdd adds delta to the little-endian 64-bit word at off (8-byte
// aligned) and returns its old value.
func (r *Region) FetchAdd(ctx context.Context, off, delta uint64) (uint64, error) {
	op := r.op(endpoint.KindFetchAdd, off)
	op.Add = delta
	err := r.c.ep.Do(ctx, op)
	return op.Old, err
}

func (r *Region) op(k endpoint.Kind, off uint64) *endpoint.Op {
	lane := 0
	if es, err := r.layout.Extents(off, 1, 0, nil); err == nil && len(es) == 1 {
		lane = es[0].Column
	}
	return &endpoint.Op{Kind: k, Peer: r.c.addr, Pool: r.spec.Region, Key: r.key, Addr: off, Lane: uint16(lane), Fence: r.fence}
}

func (r *Region) transfer(ctx context.Context, k endpoint.Kind, p []byte, off uint64) error {
	return r.transferOp(ctx, &endpoint.Op{Kind: k}, p, off)
}

// transferOp runs the op tmpl over p at off, one op per stripe piece, with
// up to the client's window of them in flight.
func (r *Region) transferOp(ctx context.Context, tmpl *endpoint.Op, p []byte, off uint64) error {
	if len(p) == 0 {
		return nil
	}
	if tmpl.Kind == endpoint.KindRead {
		if err := r.keepProven(ctx); err != nil {
			return err
		}
	}
	exts, err := r.layout.Extents(off, uint64(len(p)), 0, nil)
	if err != nil {
		return fmt.Errorf("pool: region %d: %w", r.spec.Region, err)
	}
	degraded, err := r.runOps(ctx, len(exts), func(op *endpoint.Op, i int) {
		e := exts[i]
		*op = *tmpl
		op.Peer, op.Pool, op.Key, op.Addr, op.Lane = r.c.addr, r.spec.Region, r.key, e.Off, uint16(e.Column)
		op.Buf = p[e.Off-off : e.Off-off+e.Len]
		if op.Kind != endpoint.KindRead {
			op.Fence = r.fence
		}
	})
	if err != nil {
		return fmt.Errorf("pool: region %d: %w", r.spec.Region, err)
	}
	if degraded {
		return ErrDegraded
	}
	return nil
}

// runOps runs n ops, keeping up to the client's window of them in flight:
// fill sets op up as the i-th. It returns the first error (after the ops
// in flight have ended: on an error or ctx's end no new op starts, and on
// ctx's end those in flight are canceled) and whether any op reported a
// degraded write.
func (r *Region) runOps(ctx context.Context, n int, fill func(op *endpoint.Op, i int)) (bool, error) {
	return r.runOpsEach(ctx, n, fill, nil)
}

// runOpsEach is runOps calling each (if not nil) with every op started,
// and its index, once it has ended.
func (r *Region) runOpsEach(ctx context.Context, n int, fill func(op *endpoint.Op, i int), each func(op *endpoint.Op, i int)) (bool, error) {
	window := min(r.c.opts.Window, n)
	index := make(map[*endpoint.Op]int, window)
	done := make(chan *endpoint.Op, window)
	ops := make([]endpoint.Op, window)
	free := make([]*endpoint.Op, 0, window)
	for i := range ops {
		free = append(free, &ops[i])
	}
	var first error
	degraded := false
	ctxDone := ctx.Done()
	inflight, next := 0, 0
	for next < n || inflight > 0 {
		for first == nil && next < n && len(free) > 0 {
			op := free[len(free)-1]
			free = free[:len(free)-1]
			fill(op, next)
			index[op] = next
			if err := r.c.ep.Start(op, done); err != nil {
				first = err
				free = append(free, op)
				break
			}
			inflight++
			next++
		}
		if inflight == 0 {
			break
		}
		select {
		case op := <-done:
			inflight--
			if op.Err != nil && first == nil {
				first = op.Err
			}
			if each != nil {
				each(op, index[op])
			}
			degraded = degraded || op.Degraded
			free = append(free, op)
		case <-ctxDone:
			ctxDone = nil
			if first == nil {
				first = ctx.Err()
			}
			for i := range ops {
				r.c.ep.Cancel(&ops[i])
			}
		}
	}
	return degraded, first
}

// ChainChunks cuts a chain over n bytes at every hop address in addrs
// into chunk lengths such that each chunk lies inside one stripe at every
// hop and holds at most max bytes (rounded down to a multiple of align,
// the element size). The chunks cover n in order.
func ChainChunks(l poolmap.Layout, addrs []uint64, n, max, align int) ([]int, error) {
	if align <= 0 || max < align {
		return nil, fmt.Errorf("pool: chain chunk of at most %d bytes cannot hold a %d-byte element", max, align)
	}
	max -= max % align
	var out []int
	for off := 0; off < n; {
		c := min(max, n-off)
		for _, a := range addrs {
			pos := a + uint64(off)
			if room := l.Stripe - pos%l.Stripe; uint64(c) > room {
				c = int(room)
			}
		}
		if c < n-off {
			c -= c % align
		}
		if c <= 0 {
			return nil, fmt.Errorf("pool: chain hops at %v are not aligned to %d-byte elements at stripe boundaries", addrs, align)
		}
		out = append(out, c)
		off += c
	}
	return out, nil
}

// Chain runs hops over n bytes: chunk by chunk (cut at stripe boundaries
// and datagram size), each chunk one chained instruction that visits the
// memory nodes of the hops' addresses in order, with no host in between.
// in is the data the chain starts with (nil when the first hop is a
// Load); out, if not nil, receives the data the last hop answers with
// (when it is a Load, an Apply or a Delta). dt and alu apply to Apply and
// Accumulate hops. A chunk that is lost is resent whole; memory nodes
// answer a resent Store or Accumulate from their reply cache, so none is
// applied twice.
func (r *Region) Chain(ctx context.Context, hops []wire.ChainHop, n int, dt wire.Dtype, alu wire.Alu, in, out []byte) error {
	_, err := r.chain(ctx, hops, n, dt, alu, in, out, nil, false)
	return err
}

// chain runs Chain; with track it returns the request ids (ChainIDs),
// sending again under ids those of an earlier run.
func (r *Region) chain(ctx context.Context, hops []wire.ChainHop, n int, dt wire.Dtype, alu wire.Alu, in, out []byte, ids []uint64, track bool) ([]uint64, error) {
	if n <= 0 || (in != nil && len(in) != n) || (out != nil && len(out) != n) || len(hops) == 0 || len(hops) > wire.MaxChainHops {
		return nil, fmt.Errorf("pool: chain of %d hops over %d bytes (in %d, out %d): %w", len(hops), n, len(in), len(out), endpoint.ErrBadOp)
	}
	addrs := make([]uint64, len(hops))
	for i, h := range hops {
		if h.Addr > uint64(r.Size()) || uint64(n) > uint64(r.Size())-h.Addr {
			return nil, fmt.Errorf("pool: chain hop %d at %d: %w", i, h.Addr, wire.StatusOutOfBounds)
		}
		addrs[i] = h.Addr
	}
	if err := r.keepProven(ctx); err != nil {
		return nil, err
	}
	align := max(dt.Size(), 1)
	room := r.c.ep.PoolSegment() - len(hops)*wire.ChainHopLen
	if r.fence.Token != 0 {
		room -= wire.FenceLen
	}
	chunks, err := ChainChunks(r.layout, addrs, n, room, align)
	if err != nil {
		return nil, err
	}
	if track && len(ids) != len(chunks) {
		ids = make([]uint64, len(chunks)) // (none, or another chain's)
	}
	var each func(op *endpoint.Op, i int)
	if track {
		each = func(op *endpoint.Op, i int) { ids[i] = op.ChainID }
	}
	offs := make([]int, len(chunks))
	for i := 1; i < len(chunks); i++ {
		offs[i] = offs[i-1] + chunks[i-1]
	}
	_, first := r.runOpsEach(ctx, len(chunks), func(op *endpoint.Op, i int) {
		off, c := offs[i], chunks[i]
		hs := make([]wire.ChainHop, len(hops))
		for k, h := range hops {
			hs[k] = h
			hs[k].Addr += uint64(off)
		}
		lane := 0
		if es, err := r.layout.Extents(hs[0].Addr, 1, 0, nil); err == nil && len(es) == 1 {
			lane = es[0].Column
		}
		*op = endpoint.Op{Kind: endpoint.KindChain, Peer: r.c.addr, Pool: r.spec.Region, Key: r.key, Lane: uint16(lane),
			Chain: hs, ChainLen: c, Dtype: dt, Alu: alu, Fence: r.fence}
		if track {
			op.ChainID = ids[i]
		}
		if in != nil {
			op.Buf = in[off : off+c]
		}
		if out != nil {
			op.Recv = out[off : off+c]
		}
	}, each)
	if first != nil {
		return ids, fmt.Errorf("pool: region %d: chain: %w", r.spec.Region, first)
	}
	return ids, nil
}

// ChainIDs is Chain keeping the request ids its datagrams went under:
// one per chunk of the chain (ChainChunks), zero for a chunk never sent.
// Given ids an earlier ChainIDs of the same chain returned, it sends
// those requests again (endpoint.Op.ChainID): each hop that applied one
// answers from its memory node's reply cache and passes it on without
// applying it twice, so a chain cut short (a memory node unreachable
// longer than ctx allowed) is taken to its end. Within the memory
// nodes' reply TTL only (30 s by default): after it a hop applies a
// request again.
func (r *Region) ChainIDs(ctx context.Context, hops []wire.ChainHop, n int, dt wire.Dtype, alu wire.Alu, in, out []byte, ids []uint64) ([]uint64, error) {
	return r.chain(ctx, hops, n, dt, alu, in, out, ids, true)
}

// Reduce combines the n-byte vectors at srcs element-wise with alu (as dt
// elements) and stores the result at dst, in one chain per chunk through
// the memory nodes that hold them: Load srcs[0], Apply each other source,
// Store at dst. No host touches the data.
func (r *Region) Reduce(ctx context.Context, dst uint64, srcs []uint64, n int, dt wire.Dtype, alu wire.Alu) error {
	if len(srcs) == 0 || len(srcs)+1 > wire.MaxChainHops {
		return fmt.Errorf("pool: reduce of %d sources (want 1 to %d): %w", len(srcs), wire.MaxChainHops-1, endpoint.ErrBadOp)
	}
	hops := []wire.ChainHop{{Addr: srcs[0], Op: wire.ChainLoad}}
	for _, s := range srcs[1:] {
		hops = append(hops, wire.ChainHop{Addr: s, Op: wire.ChainApply})
	}
	hops = append(hops, wire.ChainHop{Addr: dst, Op: wire.ChainStore})
	return r.Chain(ctx, hops, n, dt, alu, nil, nil)
}

// StateStride is the smallest optimizer state stride for n bytes of
// parameters: n rounded up to the region's stripe times its columns, so
// that a parameter and its moments lie on the same memory node.
func (r *Region) StateStride(n uint64) uint64 {
	period := r.layout.Stripe * uint64(r.layout.Columns)
	return max(period, (n+period-1)/period*period)
}

// OptimizerStep pushes the f32 gradients grads for the parameters at off
// and lets the memory nodes apply the optimizer in place (MemoryX-style):
// the first moment lives at off+stride and Adam's second moment at
// off+2×stride, in this region (stride from StateStride, or a multiple of
// it). The step is cut at stripes like a write; each piece is applied once
// even if resent. Zero the moments (a fresh region is zero) before the
// first step.
func (r *Region) OptimizerStep(ctx context.Context, off, stride uint64, p wire.OptimParams, grads []byte) error {
	if len(grads)%4 != 0 || off%4 != 0 {
		return fmt.Errorf("pool: optimizer step of %d bytes at %d: want whole, aligned f32 values: %w", len(grads), off, endpoint.ErrBadOp)
	}
	return r.transferOp(ctx, &endpoint.Op{Kind: endpoint.KindOptim, Optim: p, Stride: stride}, grads, off)
}
