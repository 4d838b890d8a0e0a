package mq

import (
	"bytes"
	"errors"
	"testing"
)

func testRecords() []Record {
	return []Record{
		{Key: []byte("k1"), Value: []byte("hello"), Headers: []Header{{Key: "h", Value: []byte("v")}, {Key: "", Value: nil}}},
		{Value: []byte("no key")},
		{Key: []byte("k3"), Value: bytes.Repeat([]byte{7}, 300)},
	}
}

// TestBatchRoundTrip encodes a batch and decodes it back: every field
// of the header and every record.
func TestBatchRoundTrip(t *testing.T) {
	recs := testRecords()
	b, m := encodeBatch(batchMeta{producer: 9}, recs)
	m.offset, m.seq, m.timestamp = 4096, 3, 12345
	putBatchHeader(b, m)
	if uint64(len(b)) != m.span || m.span%Align != 0 {
		t.Fatalf("batch of %d bytes, span %d", len(b), m.span)
	}
	got, err := parseBatchHeader(b, 4096, 1<<20)
	if err != nil || got != m {
		t.Fatalf("header: %+v %v, want %+v", got, err, m)
	}
	rs, err := parseBody(got, b[batchHeaderLen:batchHeaderLen+got.bodyLen])
	if err != nil || len(rs) != len(recs) {
		t.Fatalf("body: %d records, %v", len(rs), err)
	}
	for i, r := range rs {
		w := recs[i]
		if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || len(r.Headers) != len(w.Headers) ||
			r.Offset != 4096 || r.Index != i || r.Producer != 9 || r.Sequence != 3 || r.Timestamp != 12345 {
			t.Fatalf("record %d: %+v, want %+v", i, r, w)
		}
		for j, h := range r.Headers {
			if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d: %+v", i, j, h)
			}
		}
	}
}

// TestBatchCorrupt: a flipped bit anywhere, a batch read at another
// offset (stale), a span over the largest batch and a skip marker are
// each told apart.
func TestBatchCorrupt(t *testing.T) {
	b, m := encodeBatch(batchMeta{producer: 1}, testRecords())
	m.offset = 128
	putBatchHeader(b, m)
	if _, err := parseBatchHeader(b, 192, 1<<20); !errors.Is(err, errCorrupt) {
		t.Fatalf("batch read at another offset: %v", err)
	}
	if _, err := parseBatchHeader(b, 128, m.span-Align); !errors.Is(err, errCorrupt) {
		t.Fatalf("batch over the largest: %v", err)
	}
	for _, at := range []int{0, 9, 17, 30, 61, 70, 200, int(batchHeaderLen + m.bodyLen - 1)} {
		c := bytes.Clone(b)
		c[at] ^= 0x10
		h, err := parseBatchHeader(c, 128, 1<<20)
		if err == nil {
			_, err = parseBody(h, c[batchHeaderLen:batchHeaderLen+h.bodyLen])
		}
		if !errors.Is(err, errCorrupt) {
			t.Errorf("bit flipped at byte %d: %v", at, err)
		}
	}
	s := skipMarker(640, 4096)
	h, err := parseBatchHeader(s, 640, 1<<20)
	if err != nil || !h.skip() || h.span != 4096 {
		t.Fatalf("skip marker: %+v %v", h, err)
	}
}

// FuzzParseBatch feeds the batch decoder arbitrary bytes: it fails
// cleanly or returns records that lie inside the body. The push
// decoders get the same bytes, tagged with the topic's key (so that
// they are parsed past the tag), and fail cleanly too.
func FuzzParseBatch(f *testing.F) {
	b, m := encodeBatch(batchMeta{producer: 1}, testRecords())
	putBatchHeader(b, m)
	f.Add(b)
	tb, tm := encodeBatch(batchMeta{producer: 1}, timedRecords())
	putBatchHeader(tb, stampBatch(tb, tm, timesOf(timedRecords()), 5e9))
	f.Add(tb)
	f.Add(skipMarker(0, 64))
	f.Add(make([]byte, 64))
	f.Add(append([]byte{0x4d, 0x50, 0, 0, 1, 0, 0, 0}, b...))
	tp := &Topic{ref: Ref{Data: 1, DataKey: 2}, l: testLayout()}
	sub := &Subscription{c: &Consumer{handle: handle{t: tp}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		tagged := pushTag(tp, append([]byte(nil), data...))
		if p, m, body, err := sub.parsePush(tagged); err == nil {
			if p < 0 || p >= tp.l.Partitions || len(body) != int(m.bodyLen) {
				t.Fatalf("pushed batch of partition %d, body %d bytes, header %+v", p, len(body), m)
			}
		}
		if job, size, rank, err := parseInvite(tp, tagged); err == nil && (rank < 1 || rank >= size || len(job) > 64) {
			t.Fatalf("invitation to %q: rank %d of %d", job, rank, size)
		}
		h, err := parseBatchHeader(data, 0, 1<<20)
		if err != nil || h.skip() {
			return
		}
		if uint64(len(data)) < batchHeaderLen+uint64(h.bodyLen) {
			return
		}
		rs, err := parseBody(h, data[batchHeaderLen:batchHeaderLen+h.bodyLen])
		if err != nil {
			return
		}
		if len(rs) != int(h.count) {
			t.Fatalf("%d records, header says %d", len(rs), h.count)
		}
		// A batch's time is its newest record's; decoded records
		// encode to a batch that decodes to the same records.
		for _, r := range rs {
			if r.Timestamp > h.timestamp {
				t.Fatalf("record %d of time %d in a batch of time %d", r.Index, r.Timestamp, h.timestamp)
			}
		}
		e, em := encodeBatch(batchMeta{}, rs)
		putBatchHeader(e, stampBatch(e, em, timesOf(rs), 0))
		back, err := parseBatchHeader(e, 0, 1<<40)
		if err == nil {
			var again []Record
			if again, err = parseBody(back, e[batchHeaderLen:batchHeaderLen+back.bodyLen]); err == nil {
				for i, r := range again {
					if r.Timestamp != rs[i].Timestamp || !bytes.Equal(r.Value, rs[i].Value) || !bytes.Equal(r.Key, rs[i].Key) {
						t.Fatalf("record %d: %+v encoded again is %+v", i, rs[i], r)
					}
				}
			}
		}
		if err != nil {
			t.Fatalf("decoded records encoded again: %v", err)
		}
	})
}

// TestLayout checks the geometry's bounds and where partitions, groups
// and the time index lie.
func TestLayout(t *testing.T) {
	l := Layout{Partitions: 3, SegmentBytes: 4096, Segments: 4, MaxBatch: 4096, Groups: 2}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	if got, err := parseHeader(appendHeader(nil, l)); err != nil || got != l {
		t.Fatalf("header: %+v %v", got, err)
	}
	if l.DataSize() != HeaderBytes+3*4*4096 || l.groupBytes() != 64 || l.ControlSize() != 3*64+2*64+3*4*8 {
		t.Fatalf("sizes: data %d, group %d, control %d", l.DataSize(), l.groupBytes(), l.ControlSize())
	}
	if ps := l.pieces(1, 4*4096-64, 128); len(ps) != 2 || ps[0] != [2]uint64{HeaderBytes + 2*4*4096 - 64, 64} || ps[1] != [2]uint64{HeaderBytes + 4*4096, 64} {
		t.Fatalf("a batch across the ring's end: %v", ps)
	}
	if a, b := l.timeAddr(0, 0), l.timeAddr(2, 4*5+3); a != 3*64+2*64 || b != a+(2*4+3)*8 {
		t.Fatalf("time index words at %d and %d", a, b)
	}
	for _, bad := range []Layout{
		{Partitions: 0, SegmentBytes: 4096, Segments: 4, MaxBatch: 4096},
		{Partitions: 1, SegmentBytes: 4000, Segments: 4, MaxBatch: 1024},
		{Partitions: 1, SegmentBytes: 4096, Segments: 1, MaxBatch: 4096},
		{Partitions: 1, SegmentBytes: 4096, Segments: 4, MaxBatch: 8192},
		{Partitions: 1, SegmentBytes: 4096, Segments: 4, MaxBatch: 4096, Groups: -1},
		{Partitions: 64, SegmentBytes: 4096, Segments: 1 << 20, MaxBatch: 4096},
	} {
		if err := bad.Check(); !errors.Is(err, ErrBadLayout) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	for _, n := range []string{"", "-a", "a b", string(make([]byte, 65))} {
		if err := CheckName(n); !errors.Is(err, ErrBadName) {
			t.Errorf("name %q: %v", n, err)
		}
	}
}
