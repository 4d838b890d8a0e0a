package kv

import (
	"context"
	"fmt"
)

// TableStats is one shard's hash table as the client read it.
type TableStats struct {
	Shard int
	// Buckets is the table's buckets; MaxBuckets the most it grows to
	// (the layout's, or Buckets when it does not grow).
	Buckets, MaxBuckets int
	// Generation counts the times the table grew.
	Generation int
	// Keys counts its buckets holding a value (expired ones not yet
	// freed included); Deleted those of deleted keys, which probes pass
	// and new keys reuse.
	Keys, Deleted int
}

// Load is the share of the table's buckets holding a value.
func (t TableStats) Load() float64 { return float64(t.Keys) / float64(t.Buckets) }

// Tables reads every shard's table one-sidedly (its descriptor, then all
// its buckets: Buckets × 32 bytes each) and counts what it holds. The
// counts are a scan, not a snapshot: a write during it may be counted
// or not.
func (c *Client) Tables(ctx context.Context) ([]TableStats, error) {
	out := make([]TableStats, c.l.Shards)
	buf := make([]byte, loadChunk*BucketBytes)
	for s := range out {
		st := TableStats{Shard: s, MaxBuckets: max(c.l.MaxBuckets, c.l.Buckets)}
		var d tableDesc
		if c.l.growable() {
			var p [BucketBytes]byte
			err := c.mem.readAt(ctx, p[:], c.l.descAddr(s))
			if err == nil {
				d, err = c.l.parseDesc(p[:])
			}
			if err != nil {
				return nil, fmt.Errorf("kv: reading shard %d's table descriptor: %w", s, err)
			}
		}
		st.Generation, st.Buckets = d.gen, c.l.tableBuckets(d.gen)
		for i := 0; i < st.Buckets; i += loadChunk {
			n := min(loadChunk, st.Buckets-i)
			p := buf[:n*BucketBytes]
			if err := c.mem.readAt(ctx, p, c.l.tableAddr(s, d.gen, i)); err != nil {
				return nil, fmt.Errorf("kv: reading shard %d's table: %w", s, err)
			}
			for j := range n {
				b, err := parseBucketTag(p[j*BucketBytes:], d.tag)
				switch {
				case err != nil:
					return nil, fmt.Errorf("kv: shard %d's table changed while read (it grew): read it again", s)
				case b.live():
					st.Keys++
				case !b.empty():
					st.Deleted++
				}
			}
		}
		out[s] = st
	}
	return out, nil
}
