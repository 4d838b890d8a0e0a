package kv

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
)

// DefaultCacheEntries is how many keys' bucket locations a client keeps
// when ClientConfig.CacheEntries is zero.
const DefaultCacheEntries = 1 << 14

// loc is where a GET last found a key: its bucket's position in the
// shard and what the bucket held then.
type loc struct {
	pos int
	b   bucket
	tag uint32 // the tag of the table it is in
}

// locCache is a client's bounded cache of key locations. When full, a
// put evicts an entry chosen at random (Go's map order).
type locCache struct {
	mu  sync.Mutex
	max int // 0: no cache
	m   map[string]loc
}

func (lc *locCache) init(n int) {
	switch {
	case n == 0:
		lc.max = DefaultCacheEntries
	case n > 0:
		lc.max = n
	}
}

func (lc *locCache) get(key []byte) (loc, bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	l, ok := lc.m[string(key)]
	return l, ok
}

func (lc *locCache) put(key []byte, l loc) {
	if lc.max == 0 {
		return
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.m == nil {
		lc.m = make(map[string]loc)
	}
	if _, ok := lc.m[string(key)]; !ok && len(lc.m) >= lc.max {
		for k := range lc.m {
			delete(lc.m, k)
			break
		}
	}
	lc.m[string(key)] = l
}

func (lc *locCache) del(key []byte) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	delete(lc.m, string(key))
}

func (lc *locCache) len() int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return len(lc.m)
}

// ClientStats counts a client's reads.
type ClientStats struct {
	// Reads counts the READs the client sent to the pool (a window of
	// buckets or a value each).
	Reads uint64
	// CacheHits counts GETs answered by one round trip: the cached
	// bucket still pointed at the value read with it.
	CacheHits uint64
	// CacheStale counts GETs whose cached bucket had moved on to a newer
	// value of the key, read with one more READ.
	CacheStale uint64
	// CacheMisses counts GETs that walked the probe path: the key was
	// not cached, or its cached bucket no longer held it.
	CacheMisses uint64
	// OneSided counts the values the client wrote one-sidedly into
	// space their owner reserved (ClientConfig.OneSidedFrom), and
	// Reservations the slots it asked for: the others were spares, the
	// next slot of a class each publish brings.
	OneSided, Reservations uint64
	// Corrupt counts the GETs that failed with ErrCorrupt.
	Corrupt uint64
	// Cached is the number of keys whose location is cached.
	Cached int
}

type clientCounters struct {
	reads, hits, stale, misses atomic.Uint64
	oneSided, reservations     atomic.Uint64
	corrupt                    atomic.Uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Reads:     c.st.reads.Load(),
		CacheHits: c.st.hits.Load(), CacheStale: c.st.stale.Load(), CacheMisses: c.st.misses.Load(),
		OneSided: c.st.oneSided.Load(), Reservations: c.st.reservations.Load(),
		Corrupt: c.st.corrupt.Load(),
		Cached:  c.loc.len(),
	}
}

// getCached reads key's record through the location cache. A cached
// key's bucket and the value it pointed at are read at once: when the
// bucket still holds that value (same version, address and length) the
// value read is the key's value at the moment the bucket was read, since
// a slot is freed only after a newer bucket is published and a reused
// slot holds another version. When the bucket moved on to a newer value
// of the key, one more READ fetches it; when it no longer holds the key,
// the probe path is walked.
func (c *Client) getCached(ctx context.Context, p place, key []byte) (record, error) {
	d := c.tabOf(p.shard)
	l, ok := c.loc.get(key)
	if !ok || l.tag != d.tag { // (a location in a table since grown)
		c.st.misses.Add(1)
		return c.get(ctx, p, key, d)
	}
	var w [BucketBytes]byte
	rec := make([]byte, l.b.len)
	errs := c.readTable(ctx, p.shard, d, [][]byte{w[:], rec}, []uint64{c.l.tableAddr(p.shard, d.gen, l.pos), l.b.addr})
	if err := errs[0]; err != nil {
		return record{}, err
	}
	var v struct {
		r   record
		err error
	}
	if v.err = errs[1]; v.err == nil {
		v.r, v.err = checkRecord(rec, l.b)
	}
	b, err := parseBucketTag(w[:], d.tag)
	if err != nil {
		return record{}, err
	}
	if b.live() && b.hash == p.hash {
		if b == l.b && v.err == nil && bytes.Equal(v.r.key, key) {
			c.st.hits.Add(1)
			return v.r, nil
		}
		r, err := c.readRecord(ctx, b)
		if err != nil {
			return record{}, err
		}
		if bytes.Equal(r.key, key) {
			c.st.stale.Add(1)
			c.loc.put(key, loc{pos: l.pos, b: b, tag: d.tag})
			return r, nil
		}
	}
	c.loc.del(key)
	c.st.misses.Add(1)
	return c.get(ctx, p, key, d)
}
