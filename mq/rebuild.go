package mq

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ndma/ndma/pool"
)

// Rebuild gives the topic ref names a new control region rebuilt from
// its data region, after the old one was lost (a memory node holding it
// restarted: the pool answers "data lost"). For each partition it scans
// the ring for batches: every whole batch found is kept and published,
// in offset order; what lies between them, and every batch found torn,
// is sealed with a skip marker and counted as a hole. The consumer
// groups' offsets are not in the log: they start again at zero (their
// consumers read from the partitions' start). Run it once no producer
// can still be writing: a Timing.Deadline after the old region was
// lost. Clients of the old control region open the topic again
// (Catalog.Rebuild records the new one in the catalog).
func Rebuild(ctx context.Context, pc *pool.Client, ref Ref, controlColumns int) (*Topic, error) {
	data, err := pc.Open(ctx, ref.Data, ref.DataKey)
	if err != nil {
		return nil, fmt.Errorf("mq: opening the data region of %q: %w", ref.Name, err)
	}
	b := make([]byte, headerLen)
	if _, err := data.ReadAtContext(ctx, b, 0); err != nil {
		return nil, fmt.Errorf("mq: reading the header of %q: %w", ref.Name, err)
	}
	l, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	ctl, err := pc.Alloc(ctx, l.ControlSize(), pool.AllocOptions{Stripe: partHeaderBytes, Replicas: 1, Columns: controlColumns})
	if err != nil {
		return nil, fmt.Errorf("mq: creating a control region for %q: %w", ref.Name, err)
	}
	ref.Control, ref.ControlKey = ctl.ID(), ctl.Key()
	t := &Topic{ref: ref, l: l, ctl: ctl, data: data}
	for p := range l.Partitions {
		if err := t.rebuildPartition(ctx, p); err != nil {
			_ = pc.Free(context.WithoutCancel(ctx), ctl)
			return nil, err
		}
	}
	return t, nil
}

// logEntry is a batch header found in a partition's ring.
type logEntry struct {
	off, span uint64
	whole     bool  // a skip marker, or a batch whose body checks
	skip      bool  // a skip marker
	ts        int64 // a batch's timestamp
}

// rebuildPartition scans partition p's ring, seals what lies between
// the batches found, and writes the partition's header.
func (t *Topic) rebuildPartition(ctx context.Context, p int) error {
	es, err := t.scanRing(ctx, p)
	if err != nil {
		return err
	}
	var st PartitionState
	times := make(map[uint64]uint64) // the time index: segment → word
	if len(es) > 0 {
		st.Start = es[0].off
		pos := st.Start
		for _, e := range es {
			if e.off < pos {
				continue // inside the batch before: not a batch of the log
			}
			if e.off > pos {
				if err := t.writeLog(ctx, p, skipMarker(pos, e.off-pos), pos); err != nil && !errors.Is(err, pool.ErrDegraded) {
					return err
				}
				st.Holes++
			}
			if !e.whole {
				if err := t.writeLog(ctx, p, skipMarker(e.off, e.span), e.off); err != nil && !errors.Is(err, pool.ErrDegraded) {
					return err
				}
				st.Holes++
			} else if !e.skip {
				seg := e.off / t.l.SegmentBytes
				times[seg] = max(times[seg], packTime(seg, e.ts))
			}
			pos = e.off + e.span
		}
		st.Committed, st.Tail = pos, pos
	}
	for _, seg := range slices.Sorted(maps.Keys(times)) { // in order: a simulated run replays
		w := times[seg]
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], w)
		if _, err := t.ctl.WriteAtContext(ctx, b[:], int64(t.l.timeAddr(p, seg))); err != nil {
			return fmt.Errorf("mq: writing the time index of partition %d of %q: %w", p, t.ref.Name, err)
		}
	}
	var w [wordClaim]byte
	binary.LittleEndian.PutUint64(w[wordTail:], st.Tail)
	binary.LittleEndian.PutUint64(w[wordCommitted:], st.Committed)
	binary.LittleEndian.PutUint64(w[wordStart:], st.Start)
	binary.LittleEndian.PutUint64(w[wordHoles:], st.Holes)
	if _, err := t.ctl.WriteAtContext(ctx, w[:], int64(t.l.partAddr(p))); err != nil {
		return fmt.Errorf("mq: writing the header of partition %d of %q: %w", p, t.ref.Name, err)
	}
	return nil
}

// scanRing returns the batch headers in partition p's ring that lie
// where their offset says, within one ring's length of the newest, in
// offset order.
func (t *Topic) scanRing(ctx context.Context, p int) ([]logEntry, error) {
	ring := t.l.ring()
	const chunk = 1 << 20
	buf := make([]byte, min(chunk, ring))
	var es []logEntry
	for at := uint64(0); at < ring; at += uint64(len(buf)) {
		n := min(uint64(len(buf)), ring-at)
		if err := t.readLog(ctx, p, buf[:n], at); err != nil {
			return nil, err
		}
		for i := uint64(0); i+batchHeaderLen <= n; i += Align {
			h := buf[i : i+batchHeaderLen]
			off := binary.LittleEndian.Uint64(h[8:])
			if off%ring != at+i {
				continue
			}
			m, err := parseBatchHeader(h, off, t.l.MaxBatch)
			if err != nil || m.span > ring {
				continue
			}
			es = append(es, logEntry{off: off, span: m.span, whole: m.skip(), skip: m.skip(), ts: m.timestamp})
		}
	}
	if len(es) == 0 {
		return nil, nil
	}
	newest := slices.MaxFunc(es, func(a, b logEntry) int { return cmp.Compare(a.off+a.span, b.off+b.span) })
	es = slices.DeleteFunc(es, func(e logEntry) bool { return e.off+ring < newest.off+newest.span })
	slices.SortFunc(es, func(a, b logEntry) int { return cmp.Compare(a.off, b.off) })
	for i := range es {
		if !es[i].whole {
			_, whole, err := t.inspect(ctx, p, es[i].off)
			if err != nil {
				return nil, err
			}
			es[i].whole = whole
		}
	}
	return es, nil
}

// Rebuild rebuilds topic name's control region (see Rebuild) and names
// the new one in the catalog.
func (c *Catalog) Rebuild(ctx context.Context, name string, controlColumns int) (*Topic, error) {
	slot, r, err := c.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	t, err := Rebuild(ctx, c.pc, r, controlColumns)
	if err != nil {
		return nil, err
	}
	var w [8]byte
	_, err = c.read(ctx, w[:], int64(slotAddr(slot)))
	if err == nil {
		err = c.writeSlot(ctx, slot, binary.LittleEndian.Uint64(w[:]), t.Ref())
	}
	if err != nil {
		_ = c.pc.Free(context.WithoutCancel(ctx), t.ctl)
		return nil, err
	}
	if old, err := c.pc.Open(ctx, r.Control, r.ControlKey); err == nil {
		_ = c.pc.Free(ctx, old)
	}
	return t, nil
}
