package mq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// A batch in a partition's log (all integers little-endian):
//
//	0  u16 batchMagic   2 u8 flags   3 u8 zero   4 u32 record count
//	8  u64 offset (where the batch starts: a batch read elsewhere is stale)
//	16 u64 span (bytes to the next batch: a multiple of Align)
//	24 u32 body length   28 u32 body CRC32C
//	32 u64 producer id   40 u64 sequence
//	48 i64 the batch's time (unix ns): the newest of its records' times
//	56 u32 zero          60 u32 header CRC32C over bytes 0-59
//	64 body: the records, each
//	   u32 key length, u32 value length, u32 header count, key, value,
//	   and per header u32 name length, u32 value length, name, value
//
// Two formats: in the first, a batch's records have no times of their
// own: each record's time is the batch's, its write time. A batch with
// flagTimes set (the second, written when a record has a time of its
// own) begins its body with
//
//	i64 write time (unix ns)   i64 base (the oldest time of a record's own)
//
// and each record with a uvarint d before its key length: 0 when the
// record has no time of its own (its time is the write time), else its
// time is base + d - 1. The batch's time is then the newest of its
// records' times.
//
// A skip marker is a batch with flagSkip and no body: it seals a hole
// of span bytes.
const (
	// BatchHeaderBytes is a batch header's size.
	BatchHeaderBytes = batchHeaderLen
	batchHeaderLen   = 64
	batchMagic       = 0x514d // "MQ"
	flagSkip         = 1
	flagTimes        = 2
	// BatchTimesBytes is what the body of a batch in which a record has
	// a time of its own begins with: its write time and its base.
	BatchTimesBytes = 16
	// maxTimeBytes is the most a record's time delta takes (a uvarint).
	maxTimeBytes = binary.MaxVarintLen64
	// recordOverhead is a record's bytes besides key, value and headers.
	recordOverhead = 12
	// headerOverhead is a record header's bytes besides name and value.
	headerOverhead = 8
)

// Header is a record header: a name and a value.
type Header struct {
	Key   string
	Value []byte
}

// Record is one message: a key, a value, headers and a time. Records a
// consumer returns carry where they were stored and who produced them.
type Record struct {
	Key, Value []byte
	Headers    []Header
	// Partition, Offset (the batch's) and Index (in the batch) say
	// where the record is; set by the consumer.
	Partition int
	Offset    uint64
	Index     int
	// Producer and Sequence name the batch's producer and its number
	// for it; set by the consumer.
	Producer, Sequence uint64
	// Timestamp is the record's time (unix ns): given to Produce (any
	// value, in any order within a batch), or zero for the time its
	// batch was written; a consumer returns the record's time.
	Timestamp int64
}

// batchMeta is what a batch header says.
type batchMeta struct {
	offset, span  uint64
	flags         uint8
	count         uint32
	bodyLen, crc  uint32
	producer, seq uint64
	timestamp     int64
}

func (m batchMeta) skip() bool { return m.flags&flagSkip != 0 }

// errCorrupt is a batch whose header or body does not check.
var errCorrupt = errors.New("mq: corrupt batch")

// RecordBytes is at most the bytes r takes in a batch: a batch of
// records recs takes at most BatchHeaderBytes plus BatchTimesBytes plus
// the sum of their RecordBytes (BatchBytes is exact), which must not
// exceed the topic's Layout.MaxBatch. Without a time of its own, r takes
// a byte less than RecordBytes; so does a batch of such records
// BatchTimesBytes less.
func RecordBytes(r Record) int {
	n := recordBytes(r) + 1
	if r.Timestamp != 0 {
		n += maxTimeBytes - 1
	}
	return n
}

// recordBytes is r's bytes in a batch of the first format.
func recordBytes(r Record) int {
	n := recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// BatchBytes is the bytes a batch of recs takes (header and body, before
// the padding to Align), which must not exceed the topic's
// Layout.MaxBatch.
func BatchBytes(recs []Record) int { return batchHeaderLen + bodyLen(recs) }

// recordTimes is what recs' own times say: whether any record has one
// (the batch takes the second format), the oldest and newest of them,
// and whether some record has none (it takes the write time).
type recordTimes struct {
	own, defaults bool
	base, newest  int64
}

func timesOf(recs []Record) recordTimes {
	var rt recordTimes
	for _, r := range recs {
		switch {
		case r.Timestamp == 0:
			rt.defaults = true
		case !rt.own:
			rt.own, rt.base, rt.newest = true, r.Timestamp, r.Timestamp
		default:
			rt.base, rt.newest = min(rt.base, r.Timestamp), max(rt.newest, r.Timestamp)
		}
	}
	return rt
}

// delta is the uvarint d that encodes a record's time ts.
func (rt recordTimes) delta(ts int64) uint64 {
	if ts == 0 {
		return 0
	}
	return uint64(ts) - uint64(rt.base) + 1
}

// batchTime is the time of a batch of these records written at now.
func (rt recordTimes) batchTime(now int64) int64 {
	switch {
	case !rt.own:
		return now
	case rt.defaults:
		return max(now, rt.newest)
	}
	return rt.newest
}

// bodyLen is the encoded size of records.
func bodyLen(recs []Record) int {
	rt := timesOf(recs)
	n := 0
	if rt.own {
		n = BatchTimesBytes
	}
	for _, r := range recs {
		n += recordBytes(r)
		if rt.own {
			n += uvarintLen(rt.delta(r.Timestamp))
		}
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// spanOf is the log bytes a batch of n bytes takes.
func spanOf(n int) uint64 { return (uint64(n) + Align - 1) / Align * Align }

// encodeBatch encodes recs as a batch into a buffer of its span
// (padding zero), with the header of m and the body's length, count,
// format and checksum, and returns the header it wrote. A batch of the
// second format gets its write time (and with it its time and checksum)
// from stampBatch.
func encodeBatch(m batchMeta, recs []Record) ([]byte, batchMeta) {
	body := bodyLen(recs)
	rt := timesOf(recs)
	m.span = spanOf(batchHeaderLen + body)
	b := make([]byte, batchHeaderLen, m.span)
	if rt.own {
		m.flags |= flagTimes
		b = binary.LittleEndian.AppendUint64(b, 0)
		b = binary.LittleEndian.AppendUint64(b, uint64(rt.base))
	}
	for _, r := range recs {
		if rt.own {
			b = binary.AppendUvarint(b, rt.delta(r.Timestamp))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Key)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Value)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Headers)))
		b = append(b, r.Key...)
		b = append(b, r.Value...)
		for _, h := range r.Headers {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Key)))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Value)))
			b = append(b, h.Key...)
			b = append(b, h.Value...)
		}
	}
	m.count, m.bodyLen = uint32(len(recs)), uint32(body)
	m.crc = crc32.Checksum(b[batchHeaderLen:], castagnoli)
	putBatchHeader(b, m)
	return b[:m.span], m
}

// stampBatch sets the time of batch b (of m, with records of times rt)
// written at now (unix ns): a batch of the second format also gets its
// write time in its body, and so a new checksum. The caller writes the
// header of the meta it returns.
func stampBatch(b []byte, m batchMeta, rt recordTimes, now int64) batchMeta {
	m.timestamp = rt.batchTime(now)
	if m.flags&flagTimes != 0 {
		body := b[batchHeaderLen : batchHeaderLen+m.bodyLen]
		binary.LittleEndian.PutUint64(body, uint64(now))
		m.crc = crc32.Checksum(body, castagnoli)
	}
	return m
}

// sameRecords reports whether batches a and b, of metas ma and mb, hold
// the same records (their write times aside).
func sameRecords(a, b []byte, ma, mb batchMeta) bool {
	from := batchHeaderLen
	if ma.flags&flagTimes != 0 {
		from += 8
	}
	return ma.flags == mb.flags && len(a) == len(b) && bytes.Equal(a[from:], b[from:])
}

// skipMarker is the header of a skip marker sealing span bytes at off.
func skipMarker(off, span uint64) []byte {
	b := make([]byte, batchHeaderLen)
	putBatchHeader(b, batchMeta{offset: off, span: span, flags: flagSkip})
	return b
}

func putBatchHeader(b []byte, m batchMeta) {
	binary.LittleEndian.PutUint16(b[0:], batchMagic)
	b[2], b[3] = m.flags, 0
	binary.LittleEndian.PutUint32(b[4:], m.count)
	binary.LittleEndian.PutUint64(b[8:], m.offset)
	binary.LittleEndian.PutUint64(b[16:], m.span)
	binary.LittleEndian.PutUint32(b[24:], m.bodyLen)
	binary.LittleEndian.PutUint32(b[28:], m.crc)
	binary.LittleEndian.PutUint64(b[32:], m.producer)
	binary.LittleEndian.PutUint64(b[40:], m.seq)
	binary.LittleEndian.PutUint64(b[48:], uint64(m.timestamp))
	binary.LittleEndian.PutUint32(b[56:], 0)
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
}

// parseBatchHeader checks a batch header read at offset off, in a log
// whose largest batch is maxBatch bytes: its checksum, its offset, and
// a span and body that fit.
func parseBatchHeader(b []byte, off, maxBatch uint64) (batchMeta, error) {
	if len(b) < batchHeaderLen {
		return batchMeta{}, fmt.Errorf("%w: header of %d bytes", errCorrupt, len(b))
	}
	if binary.LittleEndian.Uint16(b) != batchMagic || crc32.Checksum(b[:60], castagnoli) != binary.LittleEndian.Uint32(b[60:]) {
		return batchMeta{}, fmt.Errorf("%w: no batch header at offset %d", errCorrupt, off)
	}
	m := batchMeta{
		flags: b[2], count: binary.LittleEndian.Uint32(b[4:]),
		offset: binary.LittleEndian.Uint64(b[8:]), span: binary.LittleEndian.Uint64(b[16:]),
		bodyLen: binary.LittleEndian.Uint32(b[24:]), crc: binary.LittleEndian.Uint32(b[28:]),
		producer: binary.LittleEndian.Uint64(b[32:]), seq: binary.LittleEndian.Uint64(b[40:]),
		timestamp: int64(binary.LittleEndian.Uint64(b[48:])),
	}
	switch {
	case m.offset != off:
		return batchMeta{}, fmt.Errorf("%w: the batch at offset %d says it is at %d", errCorrupt, off, m.offset)
	case m.span == 0 || m.span%Align != 0 || m.span > maxOffset:
		return batchMeta{}, fmt.Errorf("%w: span of %d bytes at offset %d", errCorrupt, m.span, off)
	case m.flags&^(flagSkip|flagTimes) != 0 || m.flags == flagSkip|flagTimes:
		return batchMeta{}, fmt.Errorf("%w: flags %#x at offset %d", errCorrupt, m.flags, off)
	case m.skip() && (m.count != 0 || m.bodyLen != 0):
		return batchMeta{}, fmt.Errorf("%w: a skip marker with a body at offset %d", errCorrupt, off)
	case !m.skip() && (m.span > maxBatch || spanOf(batchHeaderLen+int(m.bodyLen)) != m.span):
		return batchMeta{}, fmt.Errorf("%w: body of %d bytes in a span of %d at offset %d (largest batch %d)", errCorrupt, m.bodyLen, m.span, off, maxBatch)
	}
	return m, nil
}

// parseBody checks a batch's body against its header and decodes its
// records; keys, values and headers alias body.
func parseBody(m batchMeta, body []byte) ([]Record, error) {
	if len(body) != int(m.bodyLen) || crc32.Checksum(body, castagnoli) != m.crc {
		return nil, fmt.Errorf("%w: the body at offset %d does not match its checksum", errCorrupt, m.offset)
	}
	recs := make([]Record, 0, min(int(m.count), len(body)/recordOverhead))
	p := body
	bad := fmt.Errorf("%w: records of the batch at offset %d overrun its body", errCorrupt, m.offset)
	times := m.flags&flagTimes != 0
	var wrote, base, newest int64
	if times {
		if len(p) < BatchTimesBytes {
			return nil, bad
		}
		wrote, base = int64(binary.LittleEndian.Uint64(p)), int64(binary.LittleEndian.Uint64(p[8:]))
		p = p[BatchTimesBytes:]
		newest = math.MinInt64
	}
	for i := range int(m.count) {
		r := Record{Offset: m.offset, Index: i, Producer: m.producer, Sequence: m.seq, Timestamp: m.timestamp}
		if times {
			d, n := binary.Uvarint(p)
			if n <= 0 {
				return nil, bad
			}
			p = p[n:]
			r.Timestamp = wrote
			if d != 0 {
				r.Timestamp = int64(uint64(base) + d - 1)
			}
			newest = max(newest, r.Timestamp)
		}
		var err error
		if p, err = parseRecord(&r, p); err != nil {
			return nil, bad
		}
		recs = append(recs, r)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the records of the batch at offset %d", errCorrupt, len(p), m.offset)
	}
	if times && m.count > 0 && newest != m.timestamp {
		return nil, fmt.Errorf("%w: the batch at offset %d says its time is %d, its newest record's is %d", errCorrupt, m.offset, m.timestamp, newest)
	}
	return recs, nil
}

// errOverrun: a record runs past its batch's body.
var errOverrun = errors.New("overrun")

// parseRecord decodes a record's key, value and headers from the start
// of p into r and returns the rest of p.
func parseRecord(r *Record, p []byte) ([]byte, error) {
	take := func(n uint32) ([]byte, bool) {
		if uint64(n) > uint64(len(p)) {
			return nil, false
		}
		v := p[:n:n]
		p = p[n:]
		return v, true
	}
	u32 := func() (uint32, bool) {
		v, ok := take(4)
		if !ok {
			return 0, false
		}
		return binary.LittleEndian.Uint32(v), true
	}
	kl, ok1 := u32()
	vl, ok2 := u32()
	nh, ok3 := u32()
	if !ok1 || !ok2 || !ok3 || uint64(nh)*headerOverhead > uint64(len(p)) {
		return nil, errOverrun
	}
	var ok bool
	if r.Key, ok = take(kl); !ok {
		return nil, errOverrun
	}
	if r.Value, ok = take(vl); !ok {
		return nil, errOverrun
	}
	for range nh {
		hk, ok1 := u32()
		hv, ok2 := u32()
		k, ok3 := take(hk)
		if !ok1 || !ok2 || !ok3 {
			return nil, errOverrun
		}
		v, ok := take(hv)
		if !ok {
			return nil, errOverrun
		}
		r.Headers = append(r.Headers, Header{Key: string(k), Value: v})
	}
	return p, nil
}
