package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math/bits"
)

// Sizes of the layout's fixed parts.
const (
	// HeaderBytes is the region header's space.
	HeaderBytes = 4096
	// BucketBytes is one bucket: hash, version, value address, value
	// length, checksum.
	BucketBytes = 32
	// recordOverhead is a value record's bytes besides its key and value:
	// version, key length, value length, expiry, flags, checksum.
	recordOverhead = 32
	// MinSlot is the smallest size class.
	MinSlot = 64
	// MaxKey is the longest key, in bytes (memcached's limit).
	MaxKey = 250
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// magic opens a key space's header; its last byte is the header's
// version: 2 plain, 3 erasure-coded (the coding follows the common
// fields), 4 and 5 the same with tables that grow (MaxBuckets follows).
var magic = [8]byte{'N', 'D', 'M', 'A', 'K', 'V', 0, 2}

const (
	verPlain     = 2
	verCoded     = 3
	verGrow      = 4
	verGrowCoded = 5
)

// Errors of layouts and records.
var (
	// ErrBadLayout is wrapped by the error for a geometry that is not
	// usable, or a header that is not a key space's.
	ErrBadLayout = errors.New("kv: bad key space layout")
	// ErrTooLarge is wrapped by the error for a key or value over the
	// key space's limits.
	ErrTooLarge = errors.New("kv: key or value too large")
)

// Layout is the geometry of a key space.
type Layout struct {
	// Shards is the number of shards; each is owned by one owner.
	Shards int
	// Buckets is the buckets of a shard's table when the key space is
	// created: the most keys a shard holds unless its table grows.
	Buckets int
	// MaxBuckets is the most buckets a shard's table grows to (see
	// OwnerConfig.GrowAt): Buckets times a power of two. Zero, or
	// Buckets: the table never grows. A key space whose tables may
	// grow reserves one and a half times MaxBuckets buckets per shard.
	MaxBuckets int
	// PageBytes is the largest value record (key, value and 32 bytes),
	// and the unit in which a shard's heap is given to size classes: a
	// power of two, at least MinSlot.
	PageBytes uint64
	// HeapBytes is a shard's value space: a multiple of PageBytes.
	HeapBytes uint64
	// Owners is the number of owner processes the shards are spread
	// over, shard s going to owner s*Owners/Shards.
	Owners int
	// Code, when set, erasure-codes the key space (see Coding); zero:
	// the region keeps it as it is (in one or two copies).
	Code Coding
}

// Check reports what makes l unusable.
func (l Layout) Check() error {
	switch {
	case l.Shards < 1 || l.Shards > 1<<16:
		return fmt.Errorf("%w: %d shards (want 1 to 65536)", ErrBadLayout, l.Shards)
	case l.Buckets < 8 || l.Buckets > 1<<26:
		return fmt.Errorf("%w: %d buckets per shard (want 8 to 2^26)", ErrBadLayout, l.Buckets)
	case l.PageBytes < MinSlot || l.PageBytes > 64<<20 || bits.OnesCount64(l.PageBytes) != 1:
		return fmt.Errorf("%w: page of %d bytes (want a power of two from %d to 64 MiB)", ErrBadLayout, l.PageBytes, MinSlot)
	case l.HeapBytes == 0 || l.HeapBytes%l.PageBytes != 0 || l.HeapBytes > 1<<40:
		return fmt.Errorf("%w: heap of %d bytes per shard (want a positive multiple of the page, %d bytes, up to 1 TiB)", ErrBadLayout, l.HeapBytes, l.PageBytes)
	case l.Owners < 1 || l.Owners > l.Shards:
		return fmt.Errorf("%w: %d owners for %d shards (want 1 to the shard count)", ErrBadLayout, l.Owners, l.Shards)
	case l.MaxBuckets != 0 && (l.MaxBuckets < l.Buckets || l.MaxBuckets > 1<<26 || l.MaxBuckets%l.Buckets != 0 || bits.OnesCount(uint(l.MaxBuckets/l.Buckets)) != 1):
		return fmt.Errorf("%w: at most %d buckets per shard for %d at first (want the first times a power of two, up to 2^26)", ErrBadLayout, l.MaxBuckets, l.Buckets)
	}
	return l.Code.check(l.HeapBytes)
}

// headerSpan is the space before the buckets: the header's 4 KiB, or
// an erasure-coded key space's first row (a copy of the header at the
// start of each of its data shards).
func (l Layout) headerSpan() uint64 {
	if l.Code.coded() {
		return l.Code.row()
	}
	return HeaderBytes
}

// growable reports whether the shards' tables may grow.
func (l Layout) growable() bool { return l.MaxBuckets > l.Buckets }

// maxGen is the generation of the largest table: table generation g
// has Buckets << g buckets.
func (l Layout) maxGen() int {
	if !l.growable() {
		return 0
	}
	return bits.Len(uint(l.MaxBuckets/l.Buckets)) - 1
}

// tableBuckets is the buckets of a table of generation gen.
func (l Layout) tableBuckets(gen int) int { return l.Buckets << gen }

// areaBuckets is the buckets of a shard's table area a (0 or 1): the
// tables of even generations take area 0, odd ones area 1, so a table
// being built never overlaps the one in use. The area of the largest
// generation holds MaxBuckets, the other half that.
func (l Layout) areaBuckets(a int) int {
	g := l.maxGen()
	switch {
	case g%2 == a:
		return l.tableBuckets(g)
	case g == 0:
		return 0
	}
	return l.tableBuckets(g - 1)
}

// bucketStride is the space of one shard's tables (and, when they may
// grow, its table descriptor): in an erasure-coded key space, whole
// rows, so that every row is written by one owner.
func (l Layout) bucketStride() uint64 {
	n := uint64(l.areaBuckets(0)+l.areaBuckets(1)) * BucketBytes
	if l.growable() {
		n += BucketBytes
	}
	if l.Code.coded() {
		r := l.Code.row()
		n = (n + r - 1) / r * r
	}
	return n
}

// heapStart is where the first shard's heap begins.
func (l Layout) heapStart() uint64 {
	end := l.headerSpan() + uint64(l.Shards)*l.bucketStride()
	return (end + HeaderBytes - 1) / HeaderBytes * HeaderBytes
}

// Size is the space the layout needs: the region's size, or an
// erasure-coded key space's data bytes (its region holds (K+M)/K
// times that).
func (l Layout) Size() uint64 { return l.heapStart() + uint64(l.Shards)*l.HeapBytes }

// bucketAddr is the region offset (in an erasure-coded key space, the
// volume offset) of bucket i of shard s's first table.
func (l Layout) bucketAddr(s, i int) uint64 { return l.tableAddr(s, 0, i) }

// tableAddr is the offset of bucket i of shard s's table of generation
// gen.
func (l Layout) tableAddr(s, gen, i int) uint64 {
	a := l.headerSpan() + uint64(s)*l.bucketStride() + uint64(i)*BucketBytes
	if gen%2 == 1 {
		a += uint64(l.areaBuckets(0)) * BucketBytes
	}
	return a
}

// descAddr is the offset of shard s's table descriptor (growable
// layouts only).
func (l Layout) descAddr(s int) uint64 {
	return l.headerSpan() + uint64(s)*l.bucketStride() + uint64(l.areaBuckets(0)+l.areaBuckets(1))*BucketBytes
}

// heapAddr is the region offset of shard s's heap.
func (l Layout) heapAddr(s int) uint64 { return l.heapStart() + uint64(s)*l.HeapBytes }

// shardSpans are the byte ranges of the region (the volume) shard s
// alone writes: its tables (with its descriptor) and its heap.
func (l Layout) shardSpans(s int) [2][2]uint64 {
	return [2][2]uint64{
		{l.headerSpan() + uint64(s)*l.bucketStride(), l.bucketStride()},
		{l.heapAddr(s), l.HeapBytes},
	}
}

// inShard reports whether [off, off+n) lies inside one of shard s's
// spans.
func (l Layout) inShard(s int, off, n uint64) bool {
	if s < 0 || s >= l.Shards || n == 0 {
		return false
	}
	for _, sp := range l.shardSpans(s) {
		if off >= sp[0] && n <= sp[1] && off-sp[0] <= sp[1]-n {
			return true
		}
	}
	return false
}

// owner is the owner rank of shard s.
func (l Layout) owner(s int) int { return s * l.Owners / l.Shards }

// shardsOf is the shards owner rank r owns: [lo, hi).
func (l Layout) shardsOf(r int) (lo, hi int) {
	lo = (r*l.Shards + l.Owners - 1) / l.Owners
	hi = ((r+1)*l.Shards + l.Owners - 1) / l.Owners
	return lo, hi
}

// MaxValue is the largest value a key of klen bytes may have.
func (l Layout) MaxValue(klen int) int { return int(l.PageBytes) - recordOverhead - klen }

// place is a key's hash and shard (its probe path starts at
// Layout.home in the shard's table).
type place struct {
	hash  uint64
	shard int
}

func (l Layout) place(key []byte) place {
	h := fnv.New64a()
	h.Write(key)
	v := h.Sum64()
	if v == 0 {
		v = 1 // zero marks an empty bucket
	}
	return place{hash: v, shard: int(v % uint64(l.Shards))}
}

// home is where the probe path of a key of hash h starts in a table of
// n buckets.
func (l Layout) home(h uint64, n int) int { return int(h / uint64(l.Shards) % uint64(n)) }

// headerVersion is the header version of layout l.
func (l Layout) headerVersion() byte {
	v := byte(verPlain)
	if l.Code.coded() {
		v = verCoded
	}
	if l.growable() {
		v += verGrow - verPlain
	}
	return v
}

// appendHeader encodes the header of a key space of layout l: an
// erasure-coded one's has the coding (K, M as 16 bits, Shard), a
// growable one's MaxBuckets (32 bits), before the checksum.
func appendHeader(b []byte, l Layout) []byte {
	start := len(b)
	m := magic
	m[7] = l.headerVersion()
	b = append(b, m[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(l.Shards))
	b = binary.LittleEndian.AppendUint32(b, uint32(l.Buckets))
	b = binary.LittleEndian.AppendUint64(b, l.PageBytes)
	b = binary.LittleEndian.AppendUint64(b, l.HeapBytes)
	b = binary.LittleEndian.AppendUint32(b, uint32(l.Owners))
	if l.Code.coded() {
		b = binary.LittleEndian.AppendUint16(b, uint16(l.Code.K))
		b = binary.LittleEndian.AppendUint16(b, uint16(l.Code.M))
		b = binary.LittleEndian.AppendUint64(b, l.Code.Shard)
	}
	if l.growable() {
		b = binary.LittleEndian.AppendUint32(b, uint32(l.MaxBuckets))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// headerLen is appendHeader's output length for a plain key space;
// headerLenCoded an erasure-coded one's; headerLenMax the longest.
const (
	headerLen      = 8 + 4 + 4 + 8 + 8 + 4 + 4
	headerLenCoded = headerLen + 2 + 2 + 8
	headerLenMax   = headerLenCoded + 4
)

// parseHeader decodes and checks a header.
func parseHeader(b []byte) (Layout, error) {
	if len(b) < headerLen || [7]byte(b[:7]) != [7]byte(magic[:7]) || b[7] < verPlain || b[7] > verGrowCoded {
		return Layout{}, fmt.Errorf("%w: the region does not start with a key space header", ErrBadLayout)
	}
	ver := b[7]
	coded, grow := ver == verCoded || ver == verGrowCoded, ver >= verGrow
	n := headerLen
	if coded {
		n += 12
	}
	if grow {
		n += 4
	}
	if len(b) < n || crc32.Checksum(b[:n-4], castagnoli) != binary.LittleEndian.Uint32(b[n-4:]) {
		return Layout{}, fmt.Errorf("%w: the header's checksum does not match", ErrBadLayout)
	}
	l := Layout{
		Shards:    int(binary.LittleEndian.Uint32(b[8:])),
		Buckets:   int(binary.LittleEndian.Uint32(b[12:])),
		PageBytes: binary.LittleEndian.Uint64(b[16:]),
		HeapBytes: binary.LittleEndian.Uint64(b[24:]),
		Owners:    int(binary.LittleEndian.Uint32(b[32:])),
	}
	off := 36
	if coded {
		l.Code = Coding{K: int(binary.LittleEndian.Uint16(b[36:])), M: int(binary.LittleEndian.Uint16(b[38:])), Shard: binary.LittleEndian.Uint64(b[40:])}
		if !l.Code.coded() {
			return Layout{}, fmt.Errorf("%w: an erasure-coded key space's header with %d data shards", ErrBadLayout, l.Code.K)
		}
		off += 12
	}
	if grow {
		l.MaxBuckets = int(binary.LittleEndian.Uint32(b[off:]))
		if !l.growable() {
			return Layout{}, fmt.Errorf("%w: a growable key space's header with at most %d buckets for %d", ErrBadLayout, l.MaxBuckets, l.Buckets)
		}
	}
	return l, l.Check()
}

// bucket is a decoded bucket. A bucket is empty (all zero), a tombstone
// (hash set, no value: the key was deleted; probes go on past it) or
// live.
type bucket struct {
	hash, ver, addr uint64
	len             uint32
}

func (b bucket) empty() bool { return b.hash == 0 }
func (b bucket) live() bool  { return b.hash != 0 && b.len != 0 }

func (b bucket) put(p []byte) { b.putTag(p, 0) }

// putTag encodes b into a table of tag: the checksum covers the tag too,
// so a reader expecting another table's tag (one since built over the
// same area) finds the bucket torn. A table of tag 0, the first, is
// encoded as it always was; an empty bucket of another tag holds the
// tag as its version, since a table built later never has all-zero
// buckets.
func (b bucket) putTag(p []byte, tag uint32) {
	if b.empty() {
		b = bucket{ver: uint64(tag)}
		if tag == 0 {
			clear(p[:BucketBytes])
			return
		}
	}
	binary.LittleEndian.PutUint64(p[0:], b.hash)
	binary.LittleEndian.PutUint64(p[8:], b.ver)
	binary.LittleEndian.PutUint64(p[16:], b.addr)
	binary.LittleEndian.PutUint32(p[24:], b.len)
	binary.LittleEndian.PutUint32(p[28:], bucketSum(p, tag))
}

// bucketSum is the checksum of an encoded bucket of a table of tag.
func bucketSum(p []byte, tag uint32) uint32 {
	sum := crc32.Checksum(p[:28], castagnoli)
	if tag != 0 {
		sum = crc32.Update(sum, castagnoli, binary.LittleEndian.AppendUint32(nil, tag))
	}
	return sum
}

// errTorn is a bucket or record whose bytes do not check: read while
// being written, or reused.
var errTorn = errors.New("kv: torn read")

// tornRecord is errTorn for the record bucket b points at: it does not
// check, or is not of b's version (errors.Is(err, errTorn) holds).
type tornRecord struct{ b bucket }

func (tornRecord) Error() string        { return errTorn.Error() }
func (tornRecord) Is(target error) bool { return target == errTorn }

func parseBucket(p []byte) (bucket, error) { return parseBucketTag(p, 0) }

// parseBucketTag decodes a bucket of a table of tag.
func parseBucketTag(p []byte, tag uint32) (bucket, error) {
	b := bucket{
		hash: binary.LittleEndian.Uint64(p[0:]),
		ver:  binary.LittleEndian.Uint64(p[8:]),
		addr: binary.LittleEndian.Uint64(p[16:]),
		len:  binary.LittleEndian.Uint32(p[24:]),
	}
	if tag == 0 && b == (bucket{}) && binary.LittleEndian.Uint32(p[28:]) == 0 {
		return b, nil // never written
	}
	if bucketSum(p, tag) != binary.LittleEndian.Uint32(p[28:]) {
		return bucket{}, errTorn
	}
	if b.hash == 0 {
		if tag == 0 || b != (bucket{ver: uint64(tag)}) {
			return bucket{}, errTorn
		}
		return bucket{}, nil // an empty bucket of a later table
	}
	return b, nil
}

// recordLen is the bytes of a value record.
func recordLen(klen, vlen int) int { return recordOverhead + klen + vlen }

// meta is what a value record carries besides key and value: its
// expiry (unix nanoseconds; 0 never) and the client's flags (memcached's
// 32 opaque bits, kept and returned).
type meta struct {
	exp   int64
	flags uint32
}

// expired reports whether a value of expiry exp is gone at now (unix
// nanoseconds).
func expired(exp, now int64) bool { return exp != 0 && now >= exp }

// appendRecord encodes a value record: version, key length, 2 zero
// bytes, value length, expiry, flags, key, value, checksum.
func appendRecord(b []byte, ver uint64, m meta, key, val []byte) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint64(b, ver)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(val)))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.exp))
	b = binary.LittleEndian.AppendUint32(b, m.flags)
	b = append(b, key...)
	b = append(b, val...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// record is a decoded value record; key and val alias what it was
// decoded from.
type record struct {
	ver      uint64
	m        meta
	key, val []byte
}

// parseRecord checks a value record read from a slot.
func parseRecord(p []byte) (record, error) {
	if len(p) < recordOverhead {
		return record{}, errTorn
	}
	klen := int(binary.LittleEndian.Uint16(p[8:]))
	vlen := int(binary.LittleEndian.Uint32(p[12:]))
	n := recordLen(klen, vlen)
	if n > len(p) || n < recordOverhead || binary.LittleEndian.Uint16(p[10:]) != 0 {
		return record{}, errTorn
	}
	if crc32.Checksum(p[:n-4], castagnoli) != binary.LittleEndian.Uint32(p[n-4:]) {
		return record{}, errTorn
	}
	const h = recordOverhead - 4
	return record{
		ver: binary.LittleEndian.Uint64(p),
		m:   meta{exp: int64(binary.LittleEndian.Uint64(p[16:])), flags: binary.LittleEndian.Uint32(p[24:])},
		key: p[h : h+klen], val: p[h+klen : h+klen+vlen],
	}, nil
}
