package kv

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"math"
	"time"
)

// Growing a shard's table. A key space whose layout has MaxBuckets
// above Buckets reserves, per shard, two table areas (tables of even
// generations in one, odd ones in the other) and a table descriptor:
// the generation of the table in use (Buckets << gen buckets) and its
// tag, which every bucket's checksum covers. The owner grows a table
// whose load passes OwnerConfig.GrowAt:
//
//  1. It builds the table of the next generation in memory, with a new
//     tag, from the one in use, and writes it to the other area in
//     chunks of growChunk buckets, one chunk after a write to the shard
//     and sweepGrowChunks each check interval, the shard's lock
//     released in between, so writes go on.
//  2. A write meanwhile goes to both tables: the bigger one first (in
//     memory, and in the pool once its chunk is written), then the one
//     in use, which stays the one readers use and the one a new holder
//     loads.
//  3. Once every chunk is written it switches the descriptor, one
//     32-byte write: from then on the bigger table is the one in use.
//
// Readers read the descriptor with the buckets (one round trip), and
// read the table it names; a bucket of another tag (a table since built
// over the area a reader's descriptor named) fails its checksum and the
// read starts again. The table a switch left is never written again
// until the table after next is built over it, so a reader that read
// the descriptor before the switch finds there what was in use at the
// switch. An owner that fails before the switch leaves the table in use
// whole: its successor loads that one and builds the bigger one again,
// under a new tag.

// DefaultGrowAt is OwnerConfig.GrowAt when zero: a table with keys in
// more than three quarters of its buckets grows.
const DefaultGrowAt = 0.75

// growChunk is the buckets of a bigger table written at once (16 KiB):
// a variable, which tests make small so that writes fall between
// chunks.
var growChunk = 512

// sweepGrowChunks is the chunks of each shard's bigger table written
// per check interval besides those written after writes.
const sweepGrowChunks = 64

// tableDesc names a shard's table in use: generation and tag. The zero
// one is the first table (tag 0), as created. floor is above every
// version the shard had given when the owner switched to the table: the
// tables a growth builds leave deleted keys out, and with them perhaps
// the highest version, which a new holder must not give again.
type tableDesc struct {
	gen   int
	tag   uint32
	floor uint64
}

// sameTable reports whether d and e name the same table.
func (d tableDesc) sameTable(e tableDesc) bool { return d.gen == e.gen && d.tag == e.tag }

// descMagic opens an encoded table descriptor.
var descMagic = [4]byte{'K', 'V', 'T', 'B'}

// appendDesc encodes d (32 bytes): magic, generation, buckets, tag,
// version floor, 4 zero bytes, CRC32C.
func (l Layout) appendDesc(b []byte, d tableDesc) []byte {
	start := len(b)
	b = append(b, descMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(d.gen))
	b = binary.LittleEndian.AppendUint32(b, uint32(l.tableBuckets(d.gen)))
	b = binary.LittleEndian.AppendUint32(b, d.tag)
	b = binary.LittleEndian.AppendUint64(b, d.floor)
	b = append(b, 0, 0, 0, 0)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// parseDesc decodes a table descriptor of a key space of layout l: all
// zero (never written) is the first table; one that does not check is
// errTorn.
func (l Layout) parseDesc(p []byte) (tableDesc, error) {
	p = p[:BucketBytes]
	if allZero(p) {
		return tableDesc{}, nil
	}
	d := tableDesc{gen: int(binary.LittleEndian.Uint32(p[4:])), tag: binary.LittleEndian.Uint32(p[12:]), floor: binary.LittleEndian.Uint64(p[16:])}
	if crc32.Checksum(p[:28], castagnoli) != binary.LittleEndian.Uint32(p[28:]) || [4]byte(p) != descMagic ||
		d.gen < 1 || d.gen > l.maxGen() || d.tag == 0 || !allZero(p[24:28]) ||
		binary.LittleEndian.Uint32(p[8:]) != uint32(l.tableBuckets(d.gen)) {
		return tableDesc{}, errTorn
	}
	return d, nil
}

func allZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

// readDescBytes reads shard s's table descriptor, and returns it with
// its bytes as read (a layout whose tables do not grow has none: the
// first table, and nil bytes).
func (o *Owner) readDescBytes(ctx context.Context, s int) (tableDesc, []byte, error) {
	if !o.l.growable() {
		return tableDesc{}, nil, nil
	}
	p := make([]byte, BucketBytes)
	if err := o.mem.readAt(ctx, p, o.l.descAddr(s)); err != nil {
		return tableDesc{}, nil, err
	}
	d, err := o.l.parseDesc(p)
	if err != nil {
		return tableDesc{}, nil, ErrBadLayout
	}
	return d, p, nil
}

// growth is a shard's bigger table while the owner writes it: its
// buckets, expiries, keys and index as the shard's, and how many of its
// buckets (from the first) are written to the pool.
type growth struct {
	tab     tableDesc
	b       []bucket
	exp     []int64
	keys    []string
	idx     map[string]int
	written int
}

// shouldGrow reports whether sh's table is past its load and may grow.
func (o *Owner) shouldGrow(sh *shard) bool {
	return o.mayGrow(sh) && float64(len(sh.idx)) > o.cfg.GrowAt*float64(len(sh.b))
}

// startGrowth builds sh's next table in memory from the one in use.
func (o *Owner) startGrowth(sh *shard) {
	n := o.l.tableBuckets(sh.tab.gen + 1)
	g := &growth{tab: tableDesc{gen: sh.tab.gen + 1, tag: o.nextTag(sh.tab.tag)},
		b: make([]bucket, n), exp: make([]int64, n), keys: make([]string, n), idx: make(map[string]int, len(sh.idx))}
	for i, b := range sh.b {
		if !b.live() {
			continue
		}
		j := o.freeIn(g.b, b.hash)
		g.b[j], g.exp[j], g.keys[j] = b, sh.exp[i], sh.keys[i]
		g.idx[sh.keys[i]] = j
	}
	sh.grow = g
	o.log.Info("kv: growing a shard's table", "space", o.cfg.Space, "shard", sh.id, "keys", len(sh.idx), "buckets", n)
}

// nextTag is a new table's tag: drawn from the owner's incarnation and
// a count of its tables, never 0 nor cur.
func (o *Owner) nextTag(cur uint32) uint32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		o.builds++
		x := o.inc + o.builds*0x9e3779b97f4a7c15 // splitmix64
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		if t := uint32(x ^ x>>31); t != 0 && t != cur {
			return t
		}
	}
}

// afterWrite goes on with sh's growth after a write (on the locked
// shard): it starts it when the table passed its load, and writes one
// chunk.
func (o *Owner) afterWrite(sh *shard) {
	if !o.l.growable() || sh.dirty || sh.gen != o.generation() || (sh.grow == nil && !o.shouldGrow(sh)) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*o.cfg.WriteTimeout)
	defer cancel()
	o.growStep(ctx, sh, 1)
}

// mayGrow reports whether sh's table is below the layout's largest.
func (o *Owner) mayGrow(sh *shard) bool { return o.l.growable() && sh.tab.gen < o.l.maxGen() }

// growNow grows sh's table to the end (a full table, on a new key),
// and reports whether it did: false when a write failed.
func (o *Owner) growNow(ctx context.Context, sh *shard) bool {
	return o.mayGrow(sh) && o.growStep(ctx, sh, math.MaxInt)
}

// growStep writes up to chunks chunks of sh's bigger table (starting
// it when sh's table passed its load), and switches to it once all are
// written: it reports whether it did. A write that fails ends the
// growth (the table in use stays, whole); the next starts over.
func (o *Owner) growStep(ctx context.Context, sh *shard, chunks int) bool {
	if sh.grow == nil {
		if !o.mayGrow(sh) || (chunks != math.MaxInt && !o.shouldGrow(sh)) {
			return false
		}
		o.startGrowth(sh)
	}
	g := sh.grow
	buf := make([]byte, growChunk*BucketBytes)
	for ; chunks > 0 && g.written < len(g.b); chunks-- {
		n := min(growChunk, len(g.b)-g.written)
		p := buf[:n*BucketBytes]
		for j := range n {
			g.b[g.written+j].putTag(p[j*BucketBytes:], g.tab.tag)
		}
		wctx, cancel := context.WithTimeout(ctx, o.cfg.WriteTimeout)
		err := o.write(wctx, sh, p, o.l.tableAddr(sh.id, g.tab.gen, g.written))
		cancel()
		if err != nil {
			o.log.Warn("kv: writing a bigger table failed; it is built again later", "shard", sh.id, "err", err)
			sh.grow = nil
			return false
		}
		g.written += n
	}
	if g.written < len(g.b) {
		return false
	}
	g.tab.floor = sh.nextVer
	wctx, cancel := context.WithTimeout(ctx, o.cfg.WriteTimeout)
	err := o.write(wctx, sh, o.l.appendDesc(nil, g.tab), o.l.descAddr(sh.id))
	cancel()
	sh.grow = nil
	if err != nil {
		// The switch may or may not have happened: the shard is read
		// again (its descriptor says which table) before its next write.
		sh.dirty, sh.dirtyAt = true, time.Now()
		o.log.Warn("kv: switching to a bigger table failed; the shard is read again before its next write", "shard", sh.id, "err", err)
		return false
	}
	sh.tab, sh.b, sh.exp, sh.keys, sh.idx, sh.sweep = g.tab, g.b, g.exp, g.keys, g.idx, 0
	o.mu.Lock()
	o.stats.Growths++
	o.mu.Unlock()
	o.log.Info("kv: a shard's table grew", "space", o.cfg.Space, "shard", sh.id, "buckets", len(sh.b))
	return true
}

// mirror applies a write of bucket nb for key (expiry exp) to sh's
// bigger table, if one is being written: in memory, and in the pool if
// its chunk is written. The caller then writes the table in use. A
// write that fails ends the growth.
func (o *Owner) mirror(ctx context.Context, sh *shard, key []byte, nb bucket, exp int64) {
	g := sh.grow
	if g == nil {
		return
	}
	k := string(key)
	j, ok := g.idx[k]
	if !ok {
		if !nb.live() {
			return // a key the bigger table does not hold
		}
		if j = o.freeIn(g.b, nb.hash); j < 0 {
			sh.grow = nil // (it has twice the buckets: never)
			return
		}
	}
	g.b[j], g.exp[j] = nb, exp
	if nb.live() {
		g.idx[k], g.keys[j] = j, k
	} else {
		delete(g.idx, k)
		g.keys[j] = ""
	}
	if j >= g.written {
		return
	}
	var p [BucketBytes]byte
	nb.putTag(p[:], g.tab.tag)
	wctx, cancel := context.WithTimeout(ctx, o.cfg.WriteTimeout)
	err := o.write(wctx, sh, p[:], o.l.tableAddr(sh.id, g.tab.gen, j))
	cancel()
	if err != nil {
		o.log.Warn("kv: writing to a bigger table failed; it is built again later", "shard", sh.id, "err", err)
		sh.grow = nil
	}
}
