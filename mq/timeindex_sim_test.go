package mq

import (
	"strings"
	"testing"
	"time"
)

// batchTime is a retained batch's offset and timestamp.
type batchTime struct {
	off uint64
	ts  int64
}

// batchTimes reads partition p of tp from its start and returns its
// batches in offset order, and the committed offset.
func batchTimes(t *testing.T, s *simMQ, tp *Topic, p int) ([]batchTime, uint64) {
	t.Helper()
	c, err := NewConsumer(s.Ctx(), tp, ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var bs []batchTime
	for {
		rs, err := c.Fetch(s.Ctx(), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 {
			break
		}
		for _, r := range rs {
			if r.Index == 0 {
				bs = append(bs, batchTime{r.Offset, r.Timestamp})
			}
		}
	}
	st, err := tp.State(s.Ctx(), p)
	if err != nil {
		t.Fatal(err)
	}
	return bs, st.Committed
}

// checkTimeLookups asks for the times before, at, just around, between
// and after every batch of partition p and compares each answer with a
// walk over the batches (the first whose timestamp is at or after the
// time), and checks the time index word of every retained segment.
func checkTimeLookups(t *testing.T, s *simMQ, tp *Topic, p int) []batchTime {
	t.Helper()
	bs, committed := batchTimes(t, s, tp, p)
	if len(bs) < 2 {
		t.Fatalf("%d batches retained", len(bs))
	}
	ask := []int64{bs[0].ts - int64(time.Second), bs[len(bs)-1].ts + int64(time.Second)}
	for i, b := range bs {
		ask = append(ask, b.ts-1, b.ts, b.ts+1)
		if i > 0 {
			ask = append(ask, (bs[i-1].ts+b.ts)/2)
		}
	}
	for _, ns := range ask {
		want := TimeOffset{Offset: committed}
		for _, b := range bs {
			if b.ts >= ns {
				want = TimeOffset{Offset: b.off, Timestamp: b.ts, Found: true}
				break
			}
		}
		got, err := tp.OffsetForTime(s.Ctx(), p, time.Unix(0, ns))
		if err != nil || got != want {
			t.Fatalf("partition %d, time %d: %+v %v, want %+v", p, ns, got, err, want)
		}
	}
	if tp.noIndex {
		return bs
	}
	// The index: per segment, the newest timestamp (ms) of the batches
	// starting in it.
	sb := tp.l.SegmentBytes
	newest := make(map[uint64]int64)
	for _, b := range bs {
		newest[b.off/sb] = max(newest[b.off/sb], b.ts)
	}
	for seg, ts := range newest {
		ws, err := tp.readTimes(s.Ctx(), p, seg, 1)
		if err != nil || ws[0] != packTime(seg, ts) {
			t.Fatalf("partition %d segment %d: index word %#x %v, want %#x", p, seg, ws, err, packTime(seg, ts))
		}
	}
	return bs
}

// TestSimTimeIndex produces batches some milliseconds apart (and some
// in the same millisecond) until partition 0's ring has wrapped, and
// finds the exact offset for times before, between, at and after its
// batches; then drops the segments older than a time (Expire), finds
// them again, once more from a control region rebuilt from the log,
// and as a topic without an index.
func TestSimTimeIndex(t *testing.T) {
	simTopic(t, 11, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		p := NewProducer(tp, ProducerConfig{})
		val := strings.Repeat("v", 900)
		for i := range 80 {
			if i%3 != 0 {
				time.Sleep(time.Duration(1+i%7) * time.Millisecond)
			}
			if _, err := p.Produce(ctx, 0, recs(val, val[:i%5*100])); err != nil {
				t.Fatal(err)
			}
		}
		st, err := tp.State(ctx, 0)
		if err != nil || st.Start == 0 || st.Committed < 2*tp.l.ring() {
			t.Fatalf("the ring did not wrap twice: %+v %v", st, err)
		}
		bs := checkTimeLookups(t, s, tp, 0)

		// Retention by age: the segments whose batches are all older
		// than the middle batch (by the index's milliseconds) go.
		mid := bs[len(bs)/2]
		sb := tp.l.SegmentBytes
		newest := make(map[uint64]int64)
		for _, b := range bs {
			newest[b.off/sb] = max(newest[b.off/sb], b.ts)
		}
		want := st.Start
		for seg := st.Start / sb; (seg+1)*sb <= st.Committed && (newest[seg]/1e6+1)*1e6 <= mid.ts; seg++ {
			want = (seg + 1) * sb
		}
		if want == st.Start {
			t.Fatalf("nothing to expire before %d: %v", mid.ts, bs)
		}
		start, err := tp.Expire(ctx, 0, time.Unix(0, mid.ts))
		if err != nil || start != want {
			t.Fatalf("expired to %d %v, want %d", start, err, want)
		}
		left := checkTimeLookups(t, s, tp, 0)
		for _, b := range left {
			if b.off < start {
				t.Fatalf("batch at %d kept below the start %d", b.off, start)
			}
		}
		if again, err := tp.Expire(ctx, 0, time.Unix(0, mid.ts)); err != nil || again != start {
			t.Fatalf("expire again: %d %v, want %d", again, err, start)
		}
		// An empty partition: nothing found, the committed offset.
		if r, err := tp.OffsetForTime(ctx, 1, time.Unix(0, 0)); err != nil || r != (TimeOffset{}) {
			t.Fatalf("empty partition: %+v %v", r, err)
		}

		// The index rebuilt from the log.
		rt, err := Rebuild(ctx, s.PoolClient(s.Endpoint()), tp.Ref(), 0)
		if err != nil {
			t.Fatal(err)
		}
		checkTimeLookups(t, s, rt, 0)

		// A topic made before the time index (its control region ends
		// before it): lookups read the batch headers, still exact, and
		// nothing expires by age.
		old := *rt
		old.noIndex = true
		checkTimeLookups(t, s, &old, 0)
		before, err := rt.State(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := old.Expire(ctx, 0, time.Now()); err != nil || st != before.Start {
			t.Fatalf("expire without an index: %d %v, want %d", st, err, before.Start)
		}

		// A consumer seeks by time and reads from there.
		c, err := NewConsumer(ctx, rt, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		last := left[len(left)-1]
		if r, err := c.SeekTime(ctx, 0, time.Unix(0, last.ts)); err != nil || r.Offset != last.off {
			t.Fatalf("seek: %+v %v, want %d", r, err, last.off)
		}
		rs, err := c.Fetch(ctx, 0, 0)
		if err != nil || len(rs) == 0 || rs[0].Offset != last.off {
			t.Fatalf("read after the seek: %d records %v", len(rs), err)
		}
	})
}
