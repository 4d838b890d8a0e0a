package kv

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/pool/ec"
)

func testLayout() Layout {
	return Layout{Shards: 4, Buckets: 64, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 2}
}

func TestLayoutCheck(t *testing.T) {
	good := testLayout()
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Layout){
		func(l *Layout) { l.Shards = 0 },
		func(l *Layout) { l.Buckets = 7 },
		func(l *Layout) { l.PageBytes = 3000 },
		func(l *Layout) { l.PageBytes = 32 },
		func(l *Layout) { l.HeapBytes = 4096*8 + 1 },
		func(l *Layout) { l.HeapBytes = 0 },
		func(l *Layout) { l.Owners = 5 },
		func(l *Layout) { l.Owners = 0 },
	}
	for i, f := range bad {
		l := good
		f(&l)
		if err := l.Check(); !errors.Is(err, ErrBadLayout) {
			t.Errorf("case %d: %+v: err %v, want ErrBadLayout", i, l, err)
		}
	}
}

// TestCodedLayout checks an erasure-coded layout's limits, and that
// its header row, every shard's buckets and every shard's heap take
// whole rows of their own (one writer per row).
func TestCodedLayout(t *testing.T) {
	good := codedLayout()
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Layout){
		func(l *Layout) { l.Code.K = 0 },
		func(l *Layout) { l.Code.M = 0 },
		func(l *Layout) { l.Code.M = ec.MaxParity + 1 },
		func(l *Layout) { l.Code.K = 63 },
		func(l *Layout) { l.Code.Shard = 0 },
		func(l *Layout) { l.Code.Shard = 6000 },
		func(l *Layout) { l.HeapBytes = 5 * 4096 }, // not whole rows of 16 KiB
	}
	for i, f := range bad {
		l := good
		f(&l)
		if err := l.Check(); !errors.Is(err, ErrBadLayout) {
			t.Errorf("case %d: %+v: err %v, want ErrBadLayout", i, l, err)
		}
	}
	l := Layout{Shards: 3, Buckets: 1000, PageBytes: 4096, HeapBytes: 2 * 32 << 10, Owners: 2, Code: Coding{K: 4, M: 2, Shard: 8192}}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	row := l.Code.row()
	for s := range l.Shards {
		lo, hi := l.bucketAddr(s, 0), l.bucketAddr(s, l.Buckets-1)+BucketBytes
		if lo%row != 0 || lo < row || (s+1 < l.Shards && hi > l.bucketAddr(s+1, 0)) || hi > l.heapAddr(0) {
			t.Errorf("shard %d: buckets [%d, %d) not on rows of %d of their own (heaps from %d)", s, lo, hi, row, l.heapAddr(0))
		}
		if l.heapAddr(s)%row != 0 {
			t.Errorf("shard %d: heap at %d, not on a row of %d", s, l.heapAddr(s), row)
		}
	}
	if l.Size() != l.heapAddr(l.Shards-1)+l.HeapBytes {
		t.Errorf("size %d, last heap ends at %d", l.Size(), l.heapAddr(l.Shards-1)+l.HeapBytes)
	}
	// A region shape that contradicts the coding is refused before
	// anything is allocated.
	for _, o := range []pool.AllocOptions{{Replicas: 2}, {Stripe: 4096}, {Columns: 5}} {
		if _, err := Create(context.Background(), nil, l, o); !errors.Is(err, ErrBadLayout) {
			t.Errorf("coded key space in a region shaped %+v: %v, want ErrBadLayout", o, err)
		}
	}
}

// TestLayoutDisjoint checks that headers, buckets and heaps do not
// overlap and that every shard has exactly one owner.
func TestLayoutDisjoint(t *testing.T) {
	l := Layout{Shards: 7, Buckets: 100, PageBytes: 1024, HeapBytes: 3 * 1024, Owners: 3}
	if l.bucketAddr(0, 0) < HeaderBytes {
		t.Fatal("buckets overlap the header")
	}
	if end := l.bucketAddr(l.Shards-1, l.Buckets-1) + BucketBytes; end > l.heapAddr(0) {
		t.Fatalf("buckets end at %d, heap starts at %d", end, l.heapAddr(0))
	}
	if l.heapAddr(l.Shards-1)+l.HeapBytes != l.Size() {
		t.Fatalf("last heap ends at %d, size %d", l.heapAddr(l.Shards-1)+l.HeapBytes, l.Size())
	}
	owned := make([]int, l.Shards)
	for r := range l.Owners {
		lo, hi := l.shardsOf(r)
		for s := lo; s < hi; s++ {
			owned[s]++
			if l.owner(s) != r {
				t.Errorf("shard %d: owner %d, listed under %d", s, l.owner(s), r)
			}
		}
	}
	for s, n := range owned {
		if n != 1 {
			t.Errorf("shard %d owned %d times", s, n)
		}
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, l := range []Layout{testLayout(), codedLayout()} {
		h := appendHeader(nil, l)
		got, err := parseHeader(h)
		if err != nil || got != l {
			t.Fatalf("got %+v, %v", got, err)
		}
		for _, i := range []int{7, 20, len(h) - 6} {
			h[i] ^= 1
			if _, err := parseHeader(h); !errors.Is(err, ErrBadLayout) {
				t.Fatalf("%+v: bit flipped in byte %d: %v", l, i, err)
			}
			h[i] ^= 1
		}
	}
	if _, err := parseHeader(make([]byte, headerLen)); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("zeros: %v", err)
	}
}

// TestBucketAndRecordCheck flips every bit of an encoded bucket and
// record and expects each flip to be caught.
func TestBucketAndRecordCheck(t *testing.T) {
	var p [BucketBytes]byte
	b := bucket{hash: 0x1234, ver: 9, addr: 4096, len: 77}
	b.put(p[:])
	if got, err := parseBucket(p[:]); err != nil || got != b {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got, err := parseBucket(make([]byte, BucketBytes)); err != nil || !got.empty() {
		t.Fatalf("zero bucket: %+v, %v", got, err)
	}
	for bit := range BucketBytes * 8 {
		q := p
		q[bit/8] ^= 1 << (bit % 8)
		if _, err := parseBucket(q[:]); err == nil {
			t.Fatalf("bucket bit %d flipped, not caught", bit)
		}
	}
	rec := appendRecord(nil, 5, meta{exp: 1_800_000_000_000_000_000, flags: 0xdeadbeef}, []byte("key"), []byte("value"))
	r, err := parseRecord(rec)
	if err != nil || r.ver != 5 || r.m.exp != 1_800_000_000_000_000_000 || r.m.flags != 0xdeadbeef || string(r.key) != "key" || string(r.val) != "value" {
		t.Fatalf("record: %+v %v", r, err)
	}
	for bit := range len(rec) * 8 {
		q := bytes.Clone(rec)
		q[bit/8] ^= 1 << (bit % 8)
		if _, err := parseRecord(q); err == nil {
			t.Fatalf("record bit %d flipped, not caught", bit)
		}
	}
}

// TestSlabsChurn allocates and frees values of random sizes until the
// heap is full many times over, checking that no two live slots overlap,
// that freed space is reused (the heap never runs out while the live
// bytes fit with rounding) and that rebuild from the live set gives the
// same use.
func TestSlabsChurn(t *testing.T) {
	const page, heap = 4096, 64 * 4096
	s := newSlabs(1<<20, heap, page)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64]int{}
	var liveBytes uint64
	for i := range 20000 {
		if len(live) > 0 && (rng.IntN(2) == 0 || liveBytes > heap/4) {
			for a, n := range live {
				s.free(a, n)
				delete(live, a)
				liveBytes -= uint64(n)
				break
			}
			continue
		}
		n := 1 + rng.IntN(page)
		a, ok := s.alloc(n)
		if !ok {
			t.Fatalf("step %d: no slot for %d bytes with %d live bytes in a %d byte heap", i, n, liveBytes, heap)
		}
		if a < 1<<20 || a+uint64(n) > 1<<20+heap {
			t.Fatalf("slot %#x of %d bytes outside the heap", a, n)
		}
		for b, m := range live {
			if a < b+uint64(m) && b < a+uint64(n) {
				t.Fatalf("slot %#x+%d overlaps live %#x+%d", a, n, b, m)
			}
		}
		live[a] = n
		liveBytes += uint64(n)
	}
	before := s.stats()
	if err := s.rebuild(live); err != nil {
		t.Fatal(err)
	}
	after := s.stats()
	if before.UsedBytes != after.UsedBytes || before.UsedSlots != after.UsedSlots || after.UsedSlots != len(live) {
		t.Fatalf("before rebuild %+v, after %+v, live %d", before, after, len(live))
	}
	// Allocations after the rebuild never land on a live slot.
	for range 200 {
		n := 1 + rng.IntN(page)
		a, ok := s.alloc(n)
		if !ok {
			break
		}
		for b, m := range live {
			if a < b+uint64(m) && b < a+uint64(n) {
				t.Fatalf("after rebuild: slot %#x+%d overlaps live %#x+%d", a, n, b, m)
			}
		}
		live[a] = n
	}
	if err := s.rebuild(map[uint64]int{1<<20 + 3: 10}); !errors.Is(err, ErrBadLayout) {
		t.Fatalf("a value off its slot: %v", err)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	r := request{op: opCAS, ver: 7, delta: -3, ttl: 5e9, flags: 9, key: []byte("k"), val: []byte("v")}
	got, err := parseRequest(r.append(nil))
	if err != nil || got.op != r.op || got.ver != 7 || got.delta != -3 || got.ttl != 5e9 || got.flags != 9 || string(got.key) != "k" || string(got.val) != "v" {
		t.Fatalf("%+v %v", got, err)
	}
	b := r.append(nil)
	for n := range reqFixed + 1 {
		if _, err := parseRequest(b[:n]); err == nil {
			t.Fatalf("a request cut to %d bytes parsed", n)
		}
	}
}
