package kv

import (
	"testing"
)

// FuzzDecoders feeds arbitrary bytes to every decoder of what crosses
// the network or is read from pool memory (requests, replies, the
// header, buckets, table descriptors, value records, a batch's
// entries): none may panic, and what decodes must encode back to the
// same bytes.
func FuzzDecoders(f *testing.F) {
	f.Add((&request{op: opSet, key: []byte("k"), val: []byte("v")}).append(nil))
	f.Add(appendHeader(nil, testLayout()))
	f.Add(appendHeader(nil, codedLayout()))
	grown := testLayout()
	grown.MaxBuckets = 4 * grown.Buckets
	f.Add(appendHeader(nil, grown))
	f.Add(grown.appendDesc(nil, tableDesc{gen: 1, tag: 9, floor: 40}))
	f.Add(appendRecord(nil, 3, meta{exp: 1e18, flags: 7}, []byte("key"), []byte("value")))
	var b [BucketBytes]byte
	bucket{hash: 5, ver: 2, addr: 4096, len: 30}.put(b[:])
	f.Add(b[:])
	f.Add(appendBatchEntry(appendBatchEntry(nil, []byte("a"), []byte("1")), []byte("bb"), nil))
	f.Add(appendRebuild(5, 1<<20, 64<<10))
	coded := codedLayout()
	f.Fuzz(func(t *testing.T, p []byte) {
		if col, off, n, ok := parseRebuild(p); ok {
			if got := appendRebuild(col, off, n); string(got) != string(p) {
				t.Fatalf("rebuild request %x re-encodes as %x", p, got)
			}
			// A range a shard owns lies inside the key space, in rows
			// no other shard owns.
			for s := range coded.Shards {
				if coded.inShard(s, off, n) {
					if off+n > coded.Size() || off < coded.headerSpan() {
						t.Fatalf("shard %d owns [%d, +%d) outside its spans", s, off, n)
					}
					for o := range coded.Shards {
						if o != s && coded.inShard(o, off, n) {
							t.Fatalf("shards %d and %d both own [%d, +%d)", s, o, off, n)
						}
					}
				}
			}
		}
		if r, err := parseRequest(p); err == nil {
			if got := r.append(nil); string(got) != string(p) {
				t.Fatalf("request %x re-encodes as %x", p, got)
			}
		}
		_, _, _, _ = parseReply(p)
		if l, err := parseHeader(p); err == nil {
			if got := appendHeader(nil, l); string(got) != string(p[:len(got)]) {
				t.Fatalf("header %x re-encodes as %x", p[:len(got)], got)
			}
		}
		if len(p) >= BucketBytes {
			if bk, err := parseBucket(p); err == nil && !bk.empty() {
				var q [BucketBytes]byte
				bk.put(q[:])
				if string(q[:]) != string(p[:BucketBytes]) {
					t.Fatalf("bucket %x re-encodes as %x", p[:BucketBytes], q)
				}
			}
		}
		if len(p) >= BucketBytes {
			if d, err := grown.parseDesc(p); err == nil && d != (tableDesc{}) {
				if got := grown.appendDesc(nil, d); string(got) != string(p[:BucketBytes]) {
					t.Fatalf("descriptor %x re-encodes as %x", p[:BucketBytes], got)
				}
			}
			if bk, err := parseBucketTag(p, 9); err == nil && !bk.empty() {
				var q [BucketBytes]byte
				bk.putTag(q[:], 9)
				if string(q[:]) != string(p[:BucketBytes]) {
					t.Fatalf("bucket of tag 9 %x re-encodes as %x", p[:BucketBytes], q)
				}
			}
		}
		if keys, vals, err := parseBatch(p); err == nil {
			var got []byte
			for i := range keys {
				got = appendBatchEntry(got, keys[i], vals[i])
			}
			if string(got) != string(p) {
				t.Fatalf("batch %x re-encodes as %x", p, got)
			}
		}
		if r, err := parseRecord(p); err == nil {
			if got := appendRecord(nil, r.ver, r.m, r.key, r.val); string(got) != string(p[:len(got)]) {
				t.Fatalf("record %x re-encodes as %x", p[:len(got)], got)
			}
		}
	})
}
