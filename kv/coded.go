package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/pool/ec"
	"github.com/ndma/ndma/wire"
)

// Erasure-coded key spaces. The whole key space (header, buckets and
// values) lies in a pool/ec volume: a region of rows of K data and M
// parity shards, each shard of a row on its own memory node, so it
// survives any M memory nodes lost while storing (K+M)/K times its bytes
// (1.5 for 4+2, where two copies store 2 and survive one). Addresses in
// the layout (bucketAddr, heapAddr, a bucket's value address) are volume
// offsets. The owner's writes are the volume's: each piece of a value or
// bucket one chain through its data shard and the row's parity shards,
// whose memory nodes build the parity, so the owner sends each byte
// once. A bucket (32 bytes, never across a shard) is applied by the
// chain's last hop at its data shard in one datagram, so a reader of
// that shard sees it whole or not at all, as in a key space with copies.
// A reader whose data shard is gone reconstructs from K others; what a
// write in flight tore fails the checksums and is read again.
//
// The volume's degraded writes (a shard unreachable) rewrite the row's
// parity from its data, which needs one writer per row: every shard's
// buckets and heap take whole rows (bucketStride, Coding.check), and the
// header row is written once, by Create.

// Coding is how an erasure-coded key space stores its bytes.
type Coding struct {
	// K data and M parity shards per row (pool/ec): the key space lives
	// on K+M memory nodes and survives any M of them lost. K zero: not
	// coded.
	K, M int
	// Shard is the bytes of one shard of a row: a multiple of 4096.
	// A shard's buckets and a shard's heap (Layout.HeapBytes) are whole
	// rows of K×Shard bytes.
	Shard uint64
}

// DefaultShard is the shard size `ndma kv create --ec` uses: pieces
// that fill a datagram or two of a chain, rows of 64 KiB for 4+2.
const DefaultShard = 16 << 10

func (c Coding) coded() bool { return c.K != 0 || c.M != 0 || c.Shard != 0 }

// row is the data bytes of one row.
func (c Coding) row() uint64 { return uint64(c.K) * c.Shard }

// check reports what makes c unusable with heaps of heap bytes.
func (c Coding) check(heap uint64) error {
	switch {
	case !c.coded():
		return nil
	case c.K < 1 || c.M < 1 || c.M > ec.MaxParity || c.K+c.M > maxCodedShards:
		return fmt.Errorf("%w: %d+%d shards (want K >= 1, 1 <= M <= %d, K+M <= %d)", ErrBadLayout, c.K, c.M, ec.MaxParity, maxCodedShards)
	case c.Shard == 0 || c.Shard%HeaderBytes != 0 || c.Shard > 64<<20:
		return fmt.Errorf("%w: shards of %d bytes (want a multiple of %d, up to 64 MiB)", ErrBadLayout, c.Shard, HeaderBytes)
	case heap%c.row() != 0:
		return fmt.Errorf("%w: a heap of %d bytes per shard is not whole rows of %d (%d×%d): every row has one writer", ErrBadLayout, heap, c.row(), c.K, c.Shard)
	}
	return nil
}

// maxCodedShards bounds K+M: the memory nodes of one region.
const maxCodedShards = 64

// store is where a key space's bytes are read and written: its region,
// or the erasure-coded volume in it.
type store struct {
	reg *pool.Region
	vol *ec.Volume // nil: not coded
}

func (s store) readAt(ctx context.Context, p []byte, off uint64) error {
	if s.vol != nil {
		_, err := s.vol.ReadAt(ctx, p, int64(off))
		return err
	}
	_, err := s.reg.ReadAtContext(ctx, p, int64(off))
	return err
}

// readVec reads ps[i] at offs[i] and returns each read's error: a
// region's reads all at once, their ops started in order from this
// goroutine (one round trip, in an order a simulation replays); a coded
// volume's one after another (a round trip each: a volume read may
// rebuild a shard, and reads on goroutines of their own would go out in
// the scheduler's order).
func (s store) readVec(ctx context.Context, ps [][]byte, offs []uint64) []error {
	if s.vol == nil {
		o := make([]int64, len(offs))
		for i, off := range offs {
			o[i] = int64(off)
		}
		return s.reg.ReadVec(ctx, ps, o)
	}
	errs := make([]error, len(ps))
	for i := range ps {
		errs[i] = s.readAt(ctx, ps[i], offs[i])
	}
	return errs
}

// writeAt writes p at off; an error wrapping pool.ErrDegraded says it
// was written with a copy or shard missing.
func (s store) writeAt(ctx context.Context, p []byte, off uint64) error {
	if s.vol != nil {
		return s.vol.WriteAt(ctx, p, int64(off))
	}
	_, err := s.reg.WriteAtContext(ctx, p, int64(off))
	return err
}

// fenced is the view of s whose writes carry fence f.
func (s store) fenced(f pool.Fence) *store {
	w := store{reg: s.reg.Fenced(f)}
	if s.vol != nil {
		w.vol = s.vol.Fenced(f)
	}
	return &w
}

// raiseFence raises fence f on every memory node of the key space (a
// coded one's dead nodes are reported lost, as its writes around them
// do); see pool.Region.RaiseFence and ec.Volume.RaiseFence.
func (s store) raiseFence(ctx context.Context, f pool.Fence) (uint64, error) {
	if s.vol != nil {
		return s.vol.RaiseFence(ctx, f)
	}
	return s.reg.RaiseFence(ctx, f)
}

// openStore reads the layout of the key space in region reg. An
// erasure-coded key space's header is at the start of each data shard
// of the first row: when the first is unreachable, the others are read.
func openStore(ctx context.Context, reg *pool.Region) (Layout, store, error) {
	sp := reg.Spec()
	if sp.Stripe%BucketBytes != 0 {
		return Layout{}, store{}, fmt.Errorf("%w: the region's stripe (%d bytes) is not a multiple of %d", ErrBadLayout, sp.Stripe, BucketBytes)
	}
	h := make([]byte, headerLenMax)
	var first error
	for c := range max(sp.Columns, 1) {
		_, err := reg.ReadAtContext(ctx, h, int64(uint64(c)*sp.Stripe))
		if err != nil {
			if ctx.Err() != nil {
				return Layout{}, store{}, err
			}
			if first == nil {
				first = fmt.Errorf("kv: reading the key space header: %w", err)
			}
			continue
		}
		l, err := parseHeader(h)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if c > 0 && !l.Code.coded() {
			continue // a plain key space's header is at 0 alone
		}
		st, err := layoutStore(reg, l)
		return l, st, err
	}
	return Layout{}, store{}, first
}

// layoutStore checks that region reg can hold a key space of layout l.
func layoutStore(reg *pool.Region, l Layout) (store, error) {
	st := store{reg: reg}
	size := uint64(reg.Size())
	if l.Code.coded() {
		if reg.Spec().Stripe != l.Code.Shard {
			return store{}, fmt.Errorf("%w: shards of %d bytes in a region of stripe %d", ErrBadLayout, l.Code.Shard, reg.Spec().Stripe)
		}
		vol, err := ec.Open(reg, l.Code.K, l.Code.M)
		if err != nil {
			return store{}, fmt.Errorf("%w: %w", ErrBadLayout, err)
		}
		st.vol, size = vol, uint64(vol.Size())
	}
	if l.Size() > size {
		return store{}, fmt.Errorf("%w: the layout needs %d bytes, the region has %d", ErrBadLayout, l.Size(), size)
	}
	return st, nil
}

// createCoded makes an erasure-coded key space of layout l: a pool/ec
// volume with a copy of the header at the start of each data shard of
// its first row.
func createCoded(ctx context.Context, pc *pool.Client, l Layout, o pool.AllocOptions) (*pool.Region, error) {
	c := l.Code
	switch {
	case o.Replicas > 1:
		return nil, fmt.Errorf("%w: an erasure-coded key space keeps one copy (its parity is the redundancy), not %d", ErrBadLayout, o.Replicas)
	case o.Stripe != 0 && o.Stripe != c.Shard:
		return nil, fmt.Errorf("%w: a stripe of %d bytes for shards of %d: the stripe is the shard", ErrBadLayout, o.Stripe, c.Shard)
	case o.Columns != 0 && o.Columns != c.K+c.M:
		return nil, fmt.Errorf("%w: %d columns for %d+%d shards", ErrBadLayout, o.Columns, c.K, c.M)
	}
	vol, err := ec.Create(ctx, pc, c.K, c.M, c.Shard, l.Size())
	if err != nil {
		return nil, fmt.Errorf("kv: creating an erasure-coded key space of %d bytes: %w", l.Size(), err)
	}
	row := make([]byte, c.row())
	for i := range c.K {
		appendHeader(row[uint64(i)*c.Shard:uint64(i)*c.Shard], l)
	}
	if err := vol.WriteAt(ctx, row, 0); err != nil {
		_ = pc.Free(ctx, vol.Region())
		return nil, fmt.Errorf("kv: writing the key space header: %w", err)
	}
	return vol.Region(), nil
}

// ErrOwnersServing is wrapped by RebuildShards's error while the switch
// lists owners for some ranks of the key space and none for others.
var ErrOwnersServing = errors.New("kv: owners serve some ranks of the key space")

// rebuildRows is how many rows of a shard one rebuild request covers;
// rebuildTries bounds the requests for them.
const (
	rebuildRows  = 8
	rebuildTries = 16
)

// RebuildShards restores the shards of the erasure-coded key space in
// region reg (space cfg.Space, reached through cfg.Switch) that the
// switch reports lost, onto their memory nodes (restarted, or back after
// writes went around them): each is recomputed from K others and serves
// again. It returns the shards rebuilt, and those that do not answer
// (their node down: rebuild them once it is back). Reads go on
// meanwhile, and so may writes: a row rebuilt while its writer writes
// it could miss the write, so with owners serving every rank, each
// owner rebuilds its own shards' rows (a request per few rows, under
// the shard's lock, with its fence), and this process only the rows no
// owner writes (the key space's header); with none serving, this
// process rebuilds everything (the owners must stay stopped until it
// returns). With owners serving some ranks and not others it refuses
// (ErrOwnersServing): start them all, or stop them all.
func RebuildShards(ctx context.Context, ep *endpoint.Endpoint, reg *pool.Region, cfg ClientConfig) (rebuilt, unreachable []int, err error) {
	l, st, err := openStore(ctx, reg)
	if err != nil {
		return nil, nil, err
	}
	if st.vol == nil {
		return nil, nil, fmt.Errorf("%w: key space %q is not erasure-coded (the switch rebuilds copies itself)", ErrBadLayout, cfg.Space)
	}
	ms, err := ep.ServiceMembers(ctx, cfg.Switch, ServiceName(cfg.Space), cfg.Fabric)
	switch {
	case err != nil && !errors.Is(err, wire.StatusNotMember): // (no such service: none ever started)
		return nil, nil, fmt.Errorf("kv: asking the switch for the owners of %q: %w", cfg.Space, err)
	case len(ms) > 0 && len(ms) < l.Owners:
		return nil, nil, fmt.Errorf("%w: %d of %d owner ranks registered: start every rank's ndma kvd, or stop them all, and run the rebuild again", ErrOwnersServing, len(ms), l.Owners)
	}
	var c *Client
	if len(ms) > 0 {
		c = newClient(ep, cfg)
		c.l, c.reg, c.mem = l, reg, st
	}
	lost, unreachable, err := st.vol.Lost(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range lost {
		if c == nil {
			err = st.vol.Rebuild(ctx, s)
		} else {
			err = rebuildServed(ctx, c, st.vol, s)
		}
		if err != nil {
			if errors.Is(err, wire.StatusMemberDead) {
				unreachable = append(unreachable, s)
				continue
			}
			return rebuilt, unreachable, fmt.Errorf("kv: %w", err)
		}
		rebuilt = append(rebuilt, s)
	}
	slices.Sort(unreachable)
	return rebuilt, unreachable, nil
}

// rebuildServed rebuilds shard column col of volume v while owners
// serve: the column is granted again (from then on every write of its
// rows reaches it: ec.Volume.RebuildRows), this process rebuilds the
// header's rows, the owners the rows of their shards, and the column
// serves reads again.
func rebuildServed(ctx context.Context, c *Client, v *ec.Volume, col int) error {
	if err := v.Region().RegrantColumn(ctx, col); err != nil {
		return fmt.Errorf("rebuild of shard %d: %w", col, err)
	}
	if _, err := v.RebuildRows(ctx, col, 0, int64(c.l.headerSpan()), nil); err != nil {
		return err
	}
	chunk := rebuildRows * c.l.Code.row()
	for s := range c.l.Shards {
		for _, sp := range c.l.shardSpans(s) {
			for off := sp[0]; off < sp[0]+sp[1]; off += chunk {
				n := min(chunk, sp[0]+sp[1]-off)
				if err := rebuildRequest(ctx, c, s, col, off, n); err != nil {
					return fmt.Errorf("rebuild of shard %d: rows at %d of key shard %d: %w", col, off, s, err)
				}
			}
		}
	}
	if err := v.Region().RestoreColumn(ctx, col); err != nil {
		return fmt.Errorf("rebuild of shard %d: %w", col, err)
	}
	return nil
}

// rebuildRequest asks the owner of shard s to rebuild column col in
// [off, off+n), again (up to rebuildTries times) while it answers that
// its rebuild was cut short (a rebuild is idempotent).
func rebuildRequest(ctx context.Context, c *Client, s, col int, off, n uint64) error {
	for try := 1; ; try++ {
		_, _, err := c.writeShard(ctx, s, &request{op: opRebuild, val: appendRebuild(col, off, n)})
		if errors.Is(err, ErrBadRequest) {
			return fmt.Errorf("%w: the owner refused: the column is not being rebuilt (another rebuild restored it, or a write marked it lost again): run the rebuild again", err)
		}
		if !errors.Is(err, ErrUnknownOutcome) || ctx.Err() != nil || try == rebuildTries {
			return err
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}
