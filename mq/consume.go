package mq

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultFetchBytes is the log bytes a fetch reads at once when
// ConsumerConfig.FetchBytes is zero.
const DefaultFetchBytes = 256 << 10

// ConsumerConfig configures a consumer.
type ConsumerConfig struct {
	// Group names the consumer group whose offsets the consumer starts
	// from and commits; empty: none (the consumer starts at each
	// partition's start).
	Group string
	// FetchBytes is the log bytes one fetch reads at most (a batch
	// larger than it is read whole); zero means DefaultFetchBytes.
	FetchBytes int
	Timing
}

// Consumer reads a topic's partitions one-sidedly, each from its own
// position. Not safe for concurrent use.
type Consumer struct {
	handle
	cfg   ConsumerConfig
	pos   []uint64
	lost  []bool // per partition: looking for the next batch header
	group int    // the group's slot, or -1
	// Counts.
	corrupt, truncated, batches, records atomic.Uint64
}

// ConsumerStats count what a consumer met.
type ConsumerStats struct {
	Batches, Records uint64
	// Corrupt counts batches skipped because their header or body did
	// not check (or the position sought was not a batch's).
	Corrupt uint64
	// Truncated counts jumps to a partition's start because the log at
	// the consumer's position had been dropped (retention).
	Truncated uint64
	// Published and Sealed count other producers' batches this consumer
	// published and holes it sealed while it waited.
	Published, Sealed uint64
}

// NewConsumer returns a consumer of topic t, positioned at its group's
// committed offsets (claiming a group slot for a new group) or, without
// a group or where the group committed nothing, at each partition's
// start.
func NewConsumer(ctx context.Context, t *Topic, cfg ConsumerConfig) (*Consumer, error) {
	if cfg.FetchBytes != 0 && cfg.FetchBytes < batchHeaderLen {
		return nil, fmt.Errorf("%w: fetch of %d bytes (want at least %d)", ErrBadRequest, cfg.FetchBytes, batchHeaderLen)
	}
	if cfg.FetchBytes == 0 {
		cfg.FetchBytes = DefaultFetchBytes
	}
	c := &Consumer{handle: newHandle(t, cfg.Timing), cfg: cfg, group: -1,
		pos: make([]uint64, t.l.Partitions), lost: make([]bool, t.l.Partitions)}
	if cfg.Group != "" {
		g, err := t.group(ctx, cfg.Group)
		if err != nil {
			return nil, err
		}
		c.group = g
	}
	for p := range t.l.Partitions {
		var off uint64
		var err error
		if c.group >= 0 {
			off, err = t.groupOffset(ctx, c.group, p)
			if err == nil && off != 0 {
				// A Kafka client commits inside batches.
				off, err = t.BatchStart(ctx, p, off)
			}
		}
		if err == nil && off == 0 {
			var st PartitionState
			st, err = t.State(ctx, p)
			off = st.Start
		}
		if err != nil {
			return nil, err
		}
		c.pos[p] = off
	}
	return c, nil
}

// Position is the offset of partition p the next fetch reads from.
func (c *Consumer) Position(p int) uint64 { return c.pos[p] }

// Seek sets the offset of partition p the next fetch reads from: a
// batch's offset (a Record's Offset, a partition's Start or Committed).
// An offset inside a batch counts as corrupt: the consumer goes on at
// the next batch.
func (c *Consumer) Seek(p int, off uint64) error {
	if err := c.t.checkPartition(p); err != nil {
		return err
	}
	if off%Align != 0 {
		return fmt.Errorf("%w: offset %d is not a multiple of %d", ErrBadRequest, off, Align)
	}
	c.pos[p], c.lost[p] = off, false
	return nil
}

// Commit commits the consumer's position in partition p for its group
// (forward only: an older offset leaves the group's as it is).
func (c *Consumer) Commit(ctx context.Context, p int) error {
	if c.group < 0 {
		return fmt.Errorf("%w: the consumer has no group", ErrBadRequest)
	}
	if err := c.t.checkPartition(p); err != nil {
		return err
	}
	_, err := c.t.commitGroup(ctx, c.group, p, c.pos[p])
	return err
}

// GroupOffset reads the group's committed offset of partition p.
func (c *Consumer) GroupOffset(ctx context.Context, p int) (uint64, error) {
	if c.group < 0 {
		return 0, fmt.Errorf("%w: the consumer has no group", ErrBadRequest)
	}
	if err := c.t.checkPartition(p); err != nil {
		return 0, err
	}
	return c.t.groupOffset(ctx, c.group, p)
}

// Stats returns the consumer's counts.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{Batches: c.batches.Load(), Records: c.records.Load(), Corrupt: c.corrupt.Load(),
		Truncated: c.truncated.Load(), Published: c.published.Load(), Sealed: c.sealed.Load()}
}

// Fetch returns the records of partition p from the consumer's position
// on, in order, and moves the position past them. With none committed
// there, it waits up to wait for some (long poll: it reads the
// committed offset again, helping producers publish and sealing holes
// meanwhile), and returns none if none came.
func (c *Consumer) Fetch(ctx context.Context, p int, wait time.Duration) ([]Record, error) {
	if err := c.t.checkPartition(p); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for pause := 10 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		st, moved, err := c.advance(ctx, p)
		if err != nil {
			return nil, err
		}
		if c.pos[p] < st.Start {
			c.pos[p], c.lost[p] = st.Start, true
			c.truncated.Add(1)
		}
		if c.pos[p] < c.limit(st) {
			recs, err := c.read(ctx, p, c.limit(st))
			if err != nil || len(recs) > 0 {
				return recs, err
			}
			continue // only skip markers, or a corrupt batch skipped
		}
		if moved {
			continue
		}
		if !time.Now().Before(deadline) {
			return nil, nil
		}
		if err := sleep(ctx, min(pause, time.Until(deadline))); err != nil {
			return nil, err
		}
	}
}

// limit is how far a consumer may read: the committed offset.
func (c *Consumer) limit(st PartitionState) uint64 {
	if bugTrustTail {
		return st.Tail
	}
	return st.Committed
}

// bugTrustTail makes consumers read up to the tail, not the committed
// offset: a bug the tests inject to show their checker catches it.
var bugTrustTail = false

// read reads batches of partition p from the consumer's position up to
// end (the committed offset) and returns their records.
func (c *Consumer) read(ctx context.Context, p int, end uint64) ([]Record, error) {
	pos := c.pos[p]
	n := min(end-pos, uint64(c.cfg.FetchBytes))
	buf := make([]byte, n)
	if err := c.t.readLog(ctx, p, buf, pos); err != nil {
		return nil, err
	}
	var recs []Record
	q := pos
	for q+batchHeaderLen <= pos+n {
		m, err := parseBatchHeader(buf[q-pos:q-pos+batchHeaderLen], q, c.t.l.MaxBatch)
		if err != nil || q+m.span > end {
			if !c.lost[p] {
				c.lost[p] = true
				c.corrupt.Add(1)
			}
			q += Align // look for the next batch's header
			continue
		}
		c.lost[p] = false
		if m.skip() {
			q += m.span
			continue
		}
		body := buf[min(q-pos+batchHeaderLen, n):min(q-pos+m.span, n)]
		if uint64(len(body)) < uint64(m.bodyLen) {
			if q > pos {
				break // read it whole next time
			}
			body = make([]byte, m.bodyLen)
			if err := c.t.readLog(ctx, p, body, q+batchHeaderLen); err != nil {
				return nil, err
			}
		}
		rs, err := parseBody(m, body[:m.bodyLen])
		if err != nil {
			c.corrupt.Add(1)
			q += m.span
			continue
		}
		for i := range rs {
			rs[i].Partition = p
		}
		recs = append(recs, rs...)
		c.batches.Add(1)
		q += m.span
	}
	// The log read may have been dropped and reused meanwhile: keep only
	// what lies at or past the start read after it.
	s, err := c.t.word(ctx, p, wordStart)
	if err != nil {
		return nil, err
	}
	if s > pos {
		c.truncated.Add(1)
		kept := recs[:0]
		for _, r := range recs {
			if r.Offset >= s {
				kept = append(kept, r)
			}
		}
		recs = kept
		if q < s {
			q, c.lost[p] = s, true
		}
	}
	c.pos[p] = q
	c.records.Add(uint64(len(recs)))
	return recs, nil
}

// BatchStart returns the offset of the batch of partition p that holds
// offset off, for an offset inside a batch (as a Kafka client commits):
// off rounded down to Align when a batch starts there, else the nearest
// batch header before it, within the largest batch, whose span covers
// off. It returns off rounded down when it finds none, or when that is
// not between the log's start and its committed offset.
func (t *Topic) BatchStart(ctx context.Context, p int, off uint64) (uint64, error) {
	st, err := t.State(ctx, p)
	if err != nil {
		return 0, err
	}
	a := off / Align * Align
	if a <= st.Start || a >= st.Committed {
		return a, nil
	}
	var h [batchHeaderLen]byte
	if err := t.readLog(ctx, p, h[:], a); err != nil {
		return 0, err
	}
	if _, err := parseBatchHeader(h[:], a, t.l.MaxBatch); err == nil {
		return a, nil // the common case: a batch starts there
	}
	lo := st.Start
	if a > t.l.MaxBatch && a-t.l.MaxBatch+Align > lo {
		lo = a - t.l.MaxBatch + Align
	}
	end := min(a+Align, st.Committed)
	buf := make([]byte, end-lo)
	if err := t.readLog(ctx, p, buf, lo); err != nil {
		return 0, err
	}
	for q := a; q >= lo && q+batchHeaderLen <= end; q -= Align {
		m, err := parseBatchHeader(buf[q-lo:q-lo+batchHeaderLen], q, t.l.MaxBatch)
		if err == nil && (q == a || q+m.span > off) {
			return q, nil
		}
		if err == nil || q == lo {
			break // a whole batch before off ends before it
		}
	}
	return a, nil
}
