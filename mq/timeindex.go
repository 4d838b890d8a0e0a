package mq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The time index: a word per segment of each partition's ring, in the
// control region after the groups, holding the newest time of the
// batches that start in the segment (a batch's time is its newest
// record's), in milliseconds (rounded down),
// tagged with the segment's number, so that a word left from an earlier
// lap of the ring is told apart:
//
//	bits 63-42: segment number mod 2^22   bits 41-0: unix milliseconds
//
// A producer raises its segment's word (compare-and-swap, only ever up)
// before it publishes a batch, and so does whoever publishes a batch for
// its producer: every published batch's timestamp is at or below its
// segment's word. A lookup reads the words of the retained segments
// (the coarse level), skips every segment whose word is below the time
// sought, and reads the batch headers of the first segment that may
// hold it (the fine level, in nanoseconds). A word whose tag is not its
// segment's (a segment of holes only, or one whose producer died
// between its write and the index) says nothing: the segment is read.
const (
	timeBits = 42
	tagBits  = 64 - timeBits
	timeMask = 1<<timeBits - 1
	tagMask  = 1<<tagBits - 1
	// timeUnknown: a timestamp the word cannot hold; its segment is
	// always read.
	timeUnknown = timeMask
)

// packTime is the time index word saying that segment seg holds a
// batch of timestamp ts (unix ns).
func packTime(seg uint64, ts int64) uint64 {
	ms := uint64(0)
	if ts > 0 {
		ms = min(uint64(ts/int64(time.Millisecond)), timeUnknown)
	}
	return (seg&tagMask)<<timeBits | ms
}

// timeSkips reports whether index word w of segment seg says that
// every batch starting in the segment is older than t (unix ns).
func timeSkips(w, seg uint64, t int64) bool {
	ms := w & timeMask
	return w>>timeBits == seg&tagMask && ms != timeUnknown && int64(ms+1)*int64(time.Millisecond) <= t
}

// tagNewer reports whether tag a is a later segment than tag b (the
// tags wrap at 2^22).
func tagNewer(a, b uint64) bool {
	d := (a - b) & tagMask
	return d != 0 && d < 1<<(tagBits-1)
}

// timeKnown reports whether the handle knows that the time index word
// of the segment holding offset off of partition p is at ts or above.
func (h *handle) timeKnown(p int, off uint64, ts int64) bool {
	if h.t.noIndex {
		return true // nothing to raise
	}
	want := packTime(off/h.t.l.SegmentBytes, ts)
	old := h.times[p].Load()
	return old>>timeBits == want>>timeBits && old&timeMask >= want&timeMask
}

// indexTime raises the time index word of the segment holding offset
// off of partition p to timestamp ts, unless the handle knows it is
// there already.
func (h *handle) indexTime(ctx context.Context, p int, off uint64, ts int64) error {
	return h.startIndexTime(ctx, p, off, ts)()
}

// startIndexTime puts indexTime's first compare-and-swap on the wire and
// returns what finishes it: a producer starts the raise and then writes
// its batch, both in flight together and in the same order whatever the
// scheduler does (a simulated run replays).
func (h *handle) startIndexTime(ctx context.Context, p int, off uint64, ts int64) (finish func() error) {
	seg := off / h.t.l.SegmentBytes
	want := packTime(seg, ts)
	if h.timeKnown(p, off, ts) {
		return func() error { return nil }
	}
	old := h.times[p].Load()
	if old>>timeBits != want>>timeBits {
		old = 0 // a fresh word, as in a new topic
	}
	addr := h.t.l.timeAddr(p, seg)
	fail := func(err error) error {
		return fmt.Errorf("mq: the time index of partition %d of %q: %w", p, h.t.ref.Name, err)
	}
	first, err := h.t.ctl.StartCompareAndSwap(ctx, addr, old, want)
	if err != nil {
		return func() error { return fail(err) }
	}
	return func() error {
		got, err := first.Wait()
		for try := 1; ; try++ {
			if err != nil {
				return fail(err)
			}
			switch {
			case got == old:
				h.times[p].Store(want)
				return nil
			case got>>timeBits == want>>timeBits && got&timeMask >= want&timeMask:
				h.times[p].Store(got)
				return nil
			case tagNewer(got>>timeBits, want>>timeBits):
				return nil // the segment was dropped and reused meanwhile
			case try == 64:
				return fail(errors.New("contended"))
			}
			old = got
			got, err = h.t.ctl.CompareAndSwap(ctx, addr, old, want)
		}
	}
}

// readTimes reads the time index words of n successive segments of
// partition p from segment seg on (n at most the ring's segments).
func (t *Topic) readTimes(ctx context.Context, p int, seg uint64, n int) ([]uint64, error) {
	if t.noIndex {
		w := make([]uint64, n)
		for i := range w {
			w[i] = timeUnknown // says nothing: every segment is read
		}
		return w, nil
	}
	b := make([]byte, 8*n)
	segs := uint64(t.l.Segments)
	first := min(uint64(n), segs-seg%segs)
	if _, err := t.ctl.ReadAtContext(ctx, b[:8*first], int64(t.l.timeAddr(p, seg))); err != nil {
		return nil, fmt.Errorf("mq: reading the time index of partition %d of %q: %w", p, t.ref.Name, err)
	}
	if rest := uint64(n) - first; rest > 0 {
		if _, err := t.ctl.ReadAtContext(ctx, b[8*first:], int64(t.l.timeAddr(p, 0))); err != nil {
			return nil, fmt.Errorf("mq: reading the time index of partition %d of %q: %w", p, t.ref.Name, err)
		}
	}
	w := make([]uint64, n)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return w, nil
}

// TimeOffset is what a lookup by time found.
type TimeOffset struct {
	// Offset is the first batch whose time (its newest record's) is at
	// or after the time asked for; the committed offset when there is
	// none (yet). Index is the first of its records whose time is.
	Offset uint64
	Index  int
	// Timestamp is that record's time (unix ns); Found is false when no
	// retained batch is that new.
	Timestamp int64
	Found     bool
}

// timeChunk bounds the index words, and the log bytes, one read of a
// lookup takes.
const (
	timeWords    = 4096
	timeLogChunk = 64 << 10
)

// OffsetForTime finds, in partition p, the first batch (in offset
// order) whose time (its newest record's) is at or after t, among the
// batches retained and committed, and in it the first record whose time
// is.
func (t *Topic) OffsetForTime(ctx context.Context, p int, at time.Time) (TimeOffset, error) {
	if err := t.checkPartition(p); err != nil {
		return TimeOffset{}, err
	}
	ns := at.UnixNano()
	for range 8 {
		st, err := t.State(ctx, p)
		if err != nil {
			return TimeOffset{}, err
		}
		r, err := t.offsetForTime(ctx, p, st, ns)
		if err != nil {
			return TimeOffset{}, err
		}
		// Retention may have dropped what was read meanwhile.
		s, err := t.word(ctx, p, wordStart)
		if err != nil {
			return TimeOffset{}, err
		}
		if s <= st.Start || s <= r.Offset {
			return r, nil
		}
	}
	return TimeOffset{}, fmt.Errorf("mq: partition %d of %q: retention kept dropping the log being searched", p, t.ref.Name)
}

// offsetForTime is OffsetForTime over the log of state st.
func (t *Topic) offsetForTime(ctx context.Context, p int, st PartitionState, ns int64) (TimeOffset, error) {
	end := st.Committed
	none := TimeOffset{Offset: end}
	if st.Start >= end {
		return none, nil
	}
	sb := t.l.SegmentBytes
	first, last := st.Start/sb, (end-1)/sb
	sc := timeScan{t: t, p: p, q: st.Start, end: end, ns: ns}
	for seg := first; seg <= last; {
		ws, err := t.readTimes(ctx, p, seg, int(min(last-seg+1, timeWords)))
		if err != nil {
			return TimeOffset{}, err
		}
		for _, w := range ws {
			segEnd := min((seg+1)*sb, end)
			if timeSkips(w, seg, ns) {
				if sc.q < segEnd {
					sc.q, sc.known = segEnd, false
				}
			} else if r, err := sc.until(ctx, segEnd); err != nil || r.Found {
				return r, err
			}
			seg++
		}
	}
	return none, nil
}

// timeScan walks a partition's batch headers looking for the first
// whose timestamp is at or after ns.
type timeScan struct {
	t     *Topic
	p     int
	q     uint64 // the next offset to look at
	known bool   // a batch header lies at q
	end   uint64 // the committed offset
	ns    int64
	buf   []byte
	at    uint64 // the log offset of buf
}

// header returns the batch header bytes at q, reading a chunk of the
// log when buf does not hold them.
func (s *timeScan) header(ctx context.Context) ([]byte, error) {
	if s.buf == nil || s.q < s.at || s.q+batchHeaderLen > s.at+uint64(len(s.buf)) {
		n := min(timeLogChunk, s.end-s.q)
		if s.buf == nil {
			s.buf = make([]byte, timeLogChunk)
		}
		s.buf = s.buf[:n]
		if err := s.t.readLog(ctx, s.p, s.buf, s.q); err != nil {
			return nil, err
		}
		s.at = s.q
	}
	return s.buf[s.q-s.at : s.q-s.at+batchHeaderLen], nil
}

// until looks at the batches that start before segEnd.
func (s *timeScan) until(ctx context.Context, segEnd uint64) (TimeOffset, error) {
	for s.q < segEnd && s.q+batchHeaderLen <= s.end {
		h, err := s.header(ctx)
		if err != nil {
			return TimeOffset{}, err
		}
		m, err := parseBatchHeader(h, s.q, s.t.l.MaxBatch)
		if err != nil || s.q+m.span > s.end {
			// Not a header (a batch cut by retention, or corrupt):
			// look for the next one.
			s.q, s.known = s.q+Align, false
			continue
		}
		s.known = true
		if !m.skip() && m.timestamp >= s.ns {
			r, ok, err := s.record(ctx, m)
			if err != nil || ok {
				return r, err
			}
		}
		s.q += m.span
	}
	return TimeOffset{}, nil
}

// record finds the first record at or after the time sought in the
// batch of m at q, whose time is; false when its body does not check.
func (s *timeScan) record(ctx context.Context, m batchMeta) (TimeOffset, bool, error) {
	r := TimeOffset{Offset: s.q, Timestamp: m.timestamp, Found: true}
	if m.flags&flagTimes == 0 {
		return r, true, nil // every record's time is the batch's
	}
	body := make([]byte, m.bodyLen)
	if err := s.t.readLog(ctx, s.p, body, s.q+batchHeaderLen); err != nil {
		return TimeOffset{}, false, err
	}
	recs, err := parseBody(m, body)
	if err != nil {
		return TimeOffset{}, false, nil
	}
	for _, rec := range recs {
		if rec.Timestamp >= s.ns {
			r.Index, r.Timestamp = rec.Index, rec.Timestamp
			return r, true, nil
		}
	}
	return TimeOffset{}, false, nil
}

// SeekTime sets partition p's position to the first batch whose time
// (its newest record's) is at or after t (OffsetForTime), or to the
// committed offset when there is none, and returns it: the records of
// that batch before the returned Index may be older than t.
func (c *Consumer) SeekTime(ctx context.Context, p int, t time.Time) (TimeOffset, error) {
	r, err := c.t.OffsetForTime(ctx, p, t)
	if err != nil {
		return TimeOffset{}, err
	}
	c.pos[p], c.lost[p] = r.Offset, false
	return r, nil
}

// Expire drops the oldest segments of partition p whose batches are all
// older than before (by the time index), up to the committed offset,
// and returns the partition's start after. It stops at the first
// segment that holds a newer batch, or whose index word says nothing.
func (t *Topic) Expire(ctx context.Context, p int, before time.Time) (uint64, error) {
	if err := t.checkPartition(p); err != nil {
		return 0, err
	}
	ns, sb := before.UnixNano(), t.l.SegmentBytes
	for {
		st, err := t.State(ctx, p)
		if err != nil {
			return 0, err
		}
		to := st.Start
		for seg := to / sb; (seg+1)*sb <= st.Committed; seg++ {
			ws, err := t.readTimes(ctx, p, seg, 1)
			if err != nil {
				return 0, err
			}
			if !timeSkips(ws[0], seg, ns) {
				break
			}
			to = (seg + 1) * sb
		}
		if to == st.Start {
			return to, nil
		}
		if _, ok, err := t.cas(ctx, p, wordStart, st.Start, to); err != nil || ok {
			return to, err
		}
	}
}
