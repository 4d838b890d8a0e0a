package kv

import (
	"errors"
	"testing"
)

// TestGrowLayout checks a growable layout's limits and that each
// shard's two table areas and its descriptor lie within its own span,
// apart, with every generation's table inside its area, for plain and
// erasure-coded key spaces and an odd and an even number of growths.
func TestGrowLayout(t *testing.T) {
	for _, max := range []int{0, 64, 100} {
		l := testLayout()
		l.MaxBuckets = max
		if err := l.Check(); errors.Is(err, ErrBadLayout) != (max == 100) { // 100 is not 64 times a power of two
			t.Errorf("MaxBuckets %d for %d: %v", max, l.Buckets, err)
		}
	}
	for _, l := range []Layout{testLayout(), codedLayout()} {
		for _, max := range []int{128, 256, 1024} {
			l.MaxBuckets = max
			if err := l.Check(); err != nil {
				t.Fatal(err)
			}
			for s := range l.Shards {
				lo, hi := l.tableAddr(s, 0, 0), l.tableAddr(s, 0, 0)+l.bucketStride()
				if d := l.descAddr(s); d < lo || d+BucketBytes > hi {
					t.Errorf("%+v: shard %d's descriptor at %d, outside [%d, %d)", l, s, d, lo, hi)
				}
				for g := 0; g <= l.maxGen(); g++ {
					a, b := l.tableAddr(s, g, 0), l.tableAddr(s, g, l.tableBuckets(g)-1)+BucketBytes
					if a < lo || b > l.descAddr(s) || (g > 0 && a < l.tableAddr(s, g-1, l.tableBuckets(g-1)) && b > l.tableAddr(s, g-1, 0)) {
						t.Errorf("%+v: shard %d's table %d at [%d, %d) overlaps its neighbour or leaves [%d, %d)", l, s, g, a, b, lo, l.descAddr(s))
					}
				}
				if l.maxGen() != bitsOf(max/l.Buckets) {
					t.Errorf("%+v: %d generations", l, l.maxGen())
				}
			}
			if end := l.tableAddr(l.Shards-1, 0, 0) + l.bucketStride(); end > l.heapAddr(0) {
				t.Errorf("%+v: tables end at %d, heaps start at %d", l, end, l.heapAddr(0))
			}
			got, err := parseHeader(appendHeader(nil, l))
			if err != nil || got != l {
				t.Errorf("header of %+v: %+v, %v", l, got, err)
			}
		}
	}
}

func bitsOf(n int) int {
	b := 0
	for n > 1 {
		n, b = n/2, b+1
	}
	return b
}

// TestTableTags checks that a bucket of one table's tag does not check
// as another's, that an empty bucket of a later table is not an empty
// one of the first (all zero), and that descriptors round-trip and
// catch a flipped bit.
func TestTableTags(t *testing.T) {
	var p [BucketBytes]byte
	b := bucket{hash: 77, ver: 9, addr: 4096, len: 40}
	b.putTag(p[:], 5)
	if got, err := parseBucketTag(p[:], 5); err != nil || got != b {
		t.Fatalf("tag 5: %+v, %v", got, err)
	}
	for _, tag := range []uint32{0, 6} {
		if _, err := parseBucketTag(p[:], tag); !errors.Is(err, errTorn) {
			t.Errorf("a bucket of tag 5 read as tag %d: %v", tag, err)
		}
	}
	bucket{}.putTag(p[:], 5)
	if got, err := parseBucketTag(p[:], 5); err != nil || !got.empty() {
		t.Fatalf("empty bucket of tag 5: %+v, %v", got, err)
	}
	if _, err := parseBucketTag(p[:], 0); err == nil {
		t.Error("an empty bucket of tag 5 checks as the first table's")
	}
	if _, err := parseBucketTag(make([]byte, BucketBytes), 5); err == nil {
		t.Error("a bucket never written checks as one of tag 5")
	}
	l := testLayout()
	l.MaxBuckets = 512
	d := tableDesc{gen: 2, tag: 0xabcdef, floor: 1234}
	e := l.appendDesc(nil, d)
	if len(e) != BucketBytes {
		t.Fatalf("descriptor of %d bytes", len(e))
	}
	if got, err := l.parseDesc(e); err != nil || got != d {
		t.Fatalf("descriptor: %+v, %v", got, err)
	}
	if got, err := l.parseDesc(make([]byte, BucketBytes)); err != nil || got != (tableDesc{}) {
		t.Fatalf("zero descriptor: %+v, %v", got, err)
	}
	for bit := range BucketBytes * 8 {
		q := append([]byte(nil), e...)
		q[bit/8] ^= 1 << (bit % 8)
		if _, err := l.parseDesc(q); err == nil {
			t.Fatalf("descriptor bit %d flipped, not caught", bit)
		}
	}
	if _, err := l.parseDesc(l.appendDesc(nil, tableDesc{gen: 4, tag: 1})); err == nil {
		t.Error("a descriptor past the largest table checks")
	}
}
