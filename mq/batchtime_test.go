package mq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// timedRecords are records with times of their own, out of order, one
// before the batch's write time and base, and one without (it takes the
// write time).
func timedRecords() []Record {
	return []Record{
		{Key: []byte("a"), Value: []byte("late"), Timestamp: 9_000_000_123},
		{Value: []byte("no time of its own")},
		{Key: []byte("c"), Value: []byte("early"), Headers: []Header{{Key: "h", Value: []byte("v")}}, Timestamp: 1_000_000_000},
		{Value: []byte("negative"), Timestamp: -5},
		{Value: []byte("mid"), Timestamp: 4_000_000_000},
	}
}

// decodeBatch parses batch b written at offset off.
func decodeBatch(t *testing.T, b []byte, off uint64) (batchMeta, []Record) {
	t.Helper()
	h, err := parseBatchHeader(b, off, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := parseBody(h, b[batchHeaderLen:batchHeaderLen+h.bodyLen])
	if err != nil {
		t.Fatal(err)
	}
	return h, rs
}

// TestBatchRecordTimes: records' own times come back exactly, in any
// order, before the write time and below zero; a record without one
// gets the write time; the batch's time is the newest record's; the
// size is BatchBytes and within the RecordBytes bound.
func TestBatchRecordTimes(t *testing.T) {
	recs := timedRecords()
	for _, wrote := range []int64{5_000_000_000, 10_000_000_000} {
		b, m := encodeBatch(batchMeta{producer: 4}, recs)
		m.offset, m.seq = 8192, 2
		m = stampBatch(b, m, timesOf(recs), wrote)
		putBatchHeader(b, m)
		h, rs := decodeBatch(t, b, 8192)
		if h.flags != flagTimes || h.timestamp != max(wrote, 9_000_000_123) {
			t.Fatalf("written at %d: flags %#x, batch time %d", wrote, h.flags, h.timestamp)
		}
		for i, r := range rs {
			want := recs[i].Timestamp
			if want == 0 {
				want = wrote
			}
			if r.Timestamp != want || !bytes.Equal(r.Value, recs[i].Value) || r.Index != i || r.Offset != 8192 {
				t.Fatalf("written at %d: record %d: %+v, want time %d", wrote, i, r, want)
			}
		}
	}
	bound := BatchHeaderBytes + BatchTimesBytes
	for _, r := range recs {
		bound += RecordBytes(r)
	}
	b, m := encodeBatch(batchMeta{}, recs)
	if BatchBytes(recs) != batchHeaderLen+int(m.bodyLen) || BatchBytes(recs) > bound || uint64(len(b)) != spanOf(BatchBytes(recs)) {
		t.Fatalf("BatchBytes %d, body %d, bound %d, span %d", BatchBytes(recs), m.bodyLen, bound, len(b))
	}
	// Without times of their own, records take the first format: no
	// flag, no time bytes, each record's time the batch's.
	plain := testRecords()
	pb, pm := encodeBatch(batchMeta{}, plain)
	pm = stampBatch(pb, pm, timesOf(plain), 777)
	putBatchHeader(pb, pm)
	if _, rs := decodeBatch(t, pb, 0); pm.flags != 0 || pm.timestamp != 777 || rs[2].Timestamp != 777 ||
		BatchBytes(plain) != batchHeaderLen+bodyLen(plain) || bodyLen(plain) != int(pm.bodyLen) {
		t.Fatalf("first format: %+v", pm)
	}
}

// TestBatchFirstFormat reads a batch of the first format built by hand:
// each record's time is the header's.
func TestBatchFirstFormat(t *testing.T) {
	le := binary.LittleEndian
	var body []byte
	for _, v := range []string{"one", "two"} {
		body = le.AppendUint32(body, 1)
		body = le.AppendUint32(body, uint32(len(v)))
		body = le.AppendUint32(body, 0)
		body = append(append(body, 'k'), v...)
	}
	b := make([]byte, 64, 128)
	le.PutUint16(b, batchMagic)
	le.PutUint32(b[4:], 2)
	le.PutUint64(b[8:], 4096)
	le.PutUint64(b[16:], 128)
	le.PutUint32(b[24:], uint32(len(body)))
	le.PutUint32(b[28:], crc32.Checksum(body, castagnoli))
	le.PutUint64(b[32:], 7)
	le.PutUint64(b[40:], 1)
	le.PutUint64(b[48:], 1_700_000_000_000_000_000)
	le.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	b = append(b, body...)
	b = b[:128]
	h, rs := decodeBatch(t, b, 4096)
	if h.flags != 0 || len(rs) != 2 || string(rs[1].Value) != "two" || rs[0].Timestamp != 1_700_000_000_000_000_000 || rs[1].Timestamp != rs[0].Timestamp {
		t.Fatalf("%+v %+v", h, rs)
	}
}

// TestBatchTimesCorrupt: a header whose time is not the newest record's,
// an unknown flag, and a body too short for its times are corrupt.
func TestBatchTimesCorrupt(t *testing.T) {
	recs := timedRecords()
	b, m := encodeBatch(batchMeta{}, recs)
	m = stampBatch(b, m, timesOf(recs), 5e9)
	for name, f := range map[string]func(*batchMeta){
		"time not the newest": func(m *batchMeta) { m.timestamp-- },
		"unknown flag":        func(m *batchMeta) { m.flags |= 4 },
		"skip with times":     func(m *batchMeta) { m.flags |= flagSkip },
	} {
		c, cm := bytes.Clone(b), m
		f(&cm)
		putBatchHeader(c, cm)
		h, err := parseBatchHeader(c, 0, 1<<20)
		if err == nil {
			_, err = parseBody(h, c[batchHeaderLen:batchHeaderLen+h.bodyLen])
		}
		if !errors.Is(err, errCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	short := batchMeta{flags: flagTimes, count: 1, bodyLen: 8, crc: crc32.Checksum(make([]byte, 8), castagnoli)}
	if _, err := parseBody(short, make([]byte, 8)); !errors.Is(err, errCorrupt) {
		t.Errorf("a body shorter than its times: %v", err)
	}
}

// TestSameRecords: a batch retried after an unknown outcome is the same
// whatever its write time; other times are other records.
func TestSameRecords(t *testing.T) {
	recs := timedRecords()
	a, am := encodeBatch(batchMeta{}, recs)
	stampBatch(a, am, timesOf(recs), 5e9)
	b, bm := encodeBatch(batchMeta{}, recs)
	if !sameRecords(a, b, am, bm) {
		t.Fatal("the same records, written at another time, differ")
	}
	other := timedRecords()
	other[4].Timestamp++
	c, cm := encodeBatch(batchMeta{}, other)
	if sameRecords(a, c, am, cm) {
		t.Fatal("records of other times are the same")
	}
}
