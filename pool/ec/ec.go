// Package ec stores bytes in a pool region as Reed-Solomon stripes of k
// data shards and m parity shards, each shard of a stripe on its own
// memory node, with the parity computed by the memory nodes: a write
// sends each data byte once, in a chained instruction (wire.OpChain)
// that takes the change to the data shard (wire.ChainDelta), adds it
// times each parity shard's coefficient into that shard
// (wire.ChainGFAccumulate, GF(2^8)), and adds it into the data shard last.
// The client sends k shards' worth of bytes, not k+m. A read reads the
// data shards; where one is unreachable (its memory node dead or its
// memory lost) it reads any k shards of the stripe and reconstructs with
// github.com/klauspost/reedsolomon, whose field and coefficients the
// memory nodes use, so up to m memory nodes may be lost.
//
// Layout: the region's stripe is the shard size S and its columns are
// k+m memory nodes; row r of the volume is the region's stripes
// r(k+m) .. r(k+m)+k+m-1, the first k its data shards (volume bytes
// [rkS, (r+1)kS) in order), the last m its parity. Stripe index s lies
// on column s mod (k+m), so shard i of every row is on column i.
//
// One writer at a time per byte range: a write's change is taken at its
// first hop and added into the data shard at its last, so two writes of
// the same bytes at once would add both changes to the same old data.
// (A resent chain is safe: the first hop changes nothing, and the memory
// nodes answer a resent GFAccumulate from their reply cache.) Writes need
// every shard of the row reachable; a piece whose chain fails is written
// on the degraded path (degraded.go), which needs one writer per row.
package ec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/klauspost/reedsolomon"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

// Limits on the shard counts: the chain of a write visits the data
// shard twice and every parity shard once.
const (
	MaxParity = wire.MaxChainHops - 2
	MaxShards = 256 // GF(2^8)
)

// ErrUnreadable reports a stripe with fewer than k shards reachable.
var ErrUnreadable = errors.New("ec: fewer than k shards of a stripe reachable")

// Volume is a region used as Reed-Solomon coded storage.
type Volume struct {
	r    *pool.Region
	k, m int
	s    uint64    // shard bytes (the region's stripe)
	rows uint64    // stripes of k+m shards
	coef [][]uint8 // coef[j][i]: data shard i's coefficient in parity j
	enc  reedsolomon.Encoder
	st   *volState // shared by the volume's fenced views
}

// volState is what a Volume and its fenced views share.
type volState struct {
	mu sync.Mutex
	// unsure are pieces whose parity may not match their data (a write
	// failed half way), repaired before their row is written again
	// (repair.go); under mu.
	unsure []piece
	// finished counts the chains cut short finished by sending them
	// again; under mu.
	finished int
}

// Create allocates a region for size bytes of data (rounded up to whole
// rows of k shards of shard bytes) spread over k+m memory nodes, and
// opens it as a Volume. shard is the region's stripe (a multiple of 8,
// at least 64).
func Create(ctx context.Context, c *pool.Client, k, m int, shard, size uint64) (*Volume, error) {
	if err := checkShape(k, m); err != nil {
		return nil, err
	}
	if shard == 0 || size == 0 {
		return nil, fmt.Errorf("ec: shards of %d bytes for %d bytes: want both positive", shard, size)
	}
	rows := (size + uint64(k)*shard - 1) / (uint64(k) * shard)
	r, err := c.Alloc(ctx, rows*uint64(k+m)*shard, pool.AllocOptions{Stripe: shard, Columns: k + m})
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	return Open(r, k, m)
}

// Open uses region r, laid out by Create for k data and m parity shards,
// as a Volume.
func Open(r *pool.Region, k, m int) (*Volume, error) {
	if err := checkShape(k, m); err != nil {
		return nil, err
	}
	sp := r.Spec()
	row := uint64(k+m) * sp.Stripe
	switch {
	case sp.Columns != k+m || sp.Replicas != 1:
		return nil, fmt.Errorf("ec: region %d spans %d memory nodes with %d copies; %d+%d shards need %d with 1", sp.Region, sp.Columns, sp.Replicas, k, m, k+m)
	case sp.Size == 0 || sp.Size%row != 0:
		return nil, fmt.Errorf("ec: region %d of %d bytes is not whole rows of %d", sp.Region, sp.Size, row)
	case wire.Perm(sp.Perm)&(wire.PermRead|wire.PermVector) != wire.PermRead|wire.PermVector:
		return nil, fmt.Errorf("ec: region %d allows %v; coded writes need read and vector ops", sp.Region, wire.Perm(sp.Perm))
	}
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, fmt.Errorf("ec: %w", err)
	}
	coef, err := coefficients(enc, k, m)
	if err != nil {
		return nil, err
	}
	return &Volume{r: r, k: k, m: m, s: sp.Stripe, rows: sp.Size / row, coef: coef, enc: enc, st: &volState{}}, nil
}

func checkShape(k, m int) error {
	if k < 1 || m < 1 || m > MaxParity || k+m > MaxShards {
		return fmt.Errorf("ec: %d data and %d parity shards: want k >= 1, 1 <= m <= %d, k+m <= %d", k, m, MaxParity, MaxShards)
	}
	return nil
}

// coefficients are the parity rows of enc's code: data shard i's weight
// in parity j is parity j of the data that is 1 in shard i and 0
// elsewhere (the code is linear).
func coefficients(enc reedsolomon.Encoder, k, m int) ([][]uint8, error) {
	coef := make([][]uint8, m)
	for j := range coef {
		coef[j] = make([]uint8, k)
	}
	for i := range k {
		unit := make([][]byte, k+m)
		for s := range unit {
			unit[s] = make([]byte, 1)
		}
		unit[i][0] = 1
		if err := enc.Encode(unit); err != nil {
			return nil, fmt.Errorf("ec: %w", err)
		}
		for j := range m {
			if coef[j][i] = unit[k+j][0]; coef[j][i] == 0 {
				return nil, fmt.Errorf("ec: data shard %d does not reach parity %d", i, j)
			}
		}
	}
	return coef, nil
}

// Region is the volume's region.
func (v *Volume) Region() *pool.Region { return v.r }

// Size is the volume's data bytes.
func (v *Volume) Size() int64 { return int64(v.rows * uint64(v.k) * v.s) }

// Shards returns k and m.
func (v *Volume) Shards() (k, m int) { return v.k, v.m }

// ShardAddr is the region offset of byte w of shard i (0 to k+m-1: data
// shards, then parity) of row row.
func (v *Volume) ShardAddr(row uint64, i int, w uint64) uint64 {
	return (row*uint64(v.k+v.m)+uint64(i))*v.s + w
}

// piece is the part of an access inside one data shard of one row.
type piece struct {
	row  uint64
	i    int    // data shard
	w, n uint64 // offset in the shard, length
	off  int    // offset in the caller's buffer
	// cut, for an unsure piece whose chain was cut short: what sends it
	// again (repair.go).
	cut *cutChain
}

// pieces cuts the access [off, off+n) into pieces.
func (v *Volume) pieces(off int64, n int) ([]piece, error) {
	if off < 0 || off > v.Size() || int64(n) > v.Size()-off {
		return nil, fmt.Errorf("ec: %d bytes at %d in a volume of %d: %w", n, off, v.Size(), wire.StatusOutOfBounds)
	}
	var out []piece
	rowBytes := uint64(v.k) * v.s
	for done := 0; done < n; {
		o := uint64(off) + uint64(done)
		p := piece{row: o / rowBytes, i: int(o % rowBytes / v.s), w: o % v.s, off: done}
		p.n = min(v.s-p.w, uint64(n-done))
		out = append(out, p)
		done += int(p.n)
	}
	return out, nil
}

// WriteAt writes p at volume offset off: for every piece of a data
// shard, one chain (cut into datagrams by pool.Region.Chain) that
// updates the data shard and every parity shard of its row. A piece
// whose chain fails is written on the degraded path (rewrite, around
// the shards the switch reports lost or on a dead node, which it is told
// are lost): the call then succeeds with an error wrapping
// pool.ErrDegraded (the data is written, to fewer than k+m shards), and
// fails with an error wrapping ErrUnreadable when more than m shards of
// a row are gone. A failed write leaves its bytes undefined until written
// again (and the parity of a piece it cut short is recomputed before
// this Volume writes that piece's row again: repair.go).
func (v *Volume) WriteAt(ctx context.Context, p []byte, off int64) error {
	ps, err := v.pieces(off, len(p))
	if err != nil {
		return err
	}
	degraded := false
	hops := make([]wire.ChainHop, v.m+2)
	for i, pc := range ps {
		if i == 0 || pc.row != ps[i-1].row {
			v.repairRow(ctx, pc.row, true)
		}
		data := p[pc.off : pc.off+int(pc.n)]
		ids, err := v.chainWrite(ctx, hops, pc, data, nil)
		if err == nil {
			continue
		}
		wrote := false
		if ctx.Err() == nil && !errors.Is(err, pool.ErrFenced) {
			// (A write refused for its fence is not written around.)
			wrote, err = v.rewriteRow(ctx, pc, data, true)
		}
		if err != nil {
			if !wrote && !errors.Is(err, pool.ErrFenced) {
				// The row is as the chain left it: sending the same
				// chain again takes it to its end (repair.go).
				pc.cut = &cutChain{ids: ids, data: bytes.Clone(data), at: time.Now()}
			}
			v.markUnsure(pc)
			return err
		}
		degraded = true
	}
	if degraded {
		return fmt.Errorf("ec: %w", pool.ErrDegraded)
	}
	return nil
}

// chainWrite writes piece pc with one chain through its data shard and
// every parity shard of its row, under the request ids of an earlier
// chainWrite of the same piece and data if ids holds them (repair.go),
// and returns the ids it went under.
func (v *Volume) chainWrite(ctx context.Context, hops []wire.ChainHop, pc piece, data []byte, ids []uint64) ([]uint64, error) {
	at := v.ShardAddr(pc.row, pc.i, pc.w)
	hops[0] = wire.ChainHop{Addr: at, Op: wire.ChainDelta}
	for j := range v.m {
		hops[1+j] = wire.ChainHop{Addr: v.ShardAddr(pc.row, v.k+j, pc.w), Op: wire.ChainGFAccumulate, Coef: v.coef[j][pc.i]}
	}
	hops[v.m+1] = wire.ChainHop{Addr: at, Op: wire.ChainGFAccumulate, Coef: 1}
	ids, err := v.r.ChainIDs(ctx, hops, int(pc.n), wire.DtypeNone, wire.AluNone, data, nil, ids)
	if err != nil {
		return ids, fmt.Errorf("ec: write of row %d shard %d: %w", pc.row, pc.i, err)
	}
	return ids, nil
}
