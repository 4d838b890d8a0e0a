package mq

import (
	"fmt"
	"testing"
	"time"
)

// TestSimRecordTimes: records produced with times of their own (out of
// order within a batch, before the batch's write time, some without
// one) come back with them, and a lookup by time finds the first batch
// whose newest record is at or after the time, and in it the first
// record that is: a walk over every record agrees, for every time
// around every record's.
func TestSimRecordTimes(t *testing.T) {
	simTopic(t, 12, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		p := NewProducer(tp, ProducerConfig{})
		base := time.Now().Add(-time.Hour).UnixNano()
		type sentRec struct {
			val string
			ts  int64 // zero: the write time
		}
		var sent []sentRec
		for i := range 12 {
			var batch []Record
			for j := range 3 {
				ts := base + int64((i*7+(2-j)*5)%40)*int64(time.Millisecond) // out of order
				if (i+j)%5 == 0 {
					ts = 0
				}
				v := fmt.Sprint(i, ".", j)
				batch = append(batch, Record{Value: []byte(v), Timestamp: ts})
				sent = append(sent, sentRec{v, ts})
			}
			if _, err := p.Produce(ctx, 0, batch); err != nil {
				t.Fatal(err)
			}
		}
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var got []Record
		for len(got) < len(sent) {
			rs, err := c.Fetch(ctx, 0, time.Second)
			if err != nil || len(rs) == 0 {
				t.Fatalf("fetched %d records of %d: %v", len(got), len(sent), err)
			}
			got = append(got, rs...)
		}
		batchTime := map[uint64]int64{}
		for i, r := range got {
			w := sent[i]
			if string(r.Value) != w.val || w.ts != 0 && r.Timestamp != w.ts || w.ts == 0 && r.Timestamp < base+int64(time.Hour)-int64(time.Minute) {
				t.Fatalf("record %d: %q at %d, want %q at %d", i, r.Value, r.Timestamp, w.val, w.ts)
			}
			batchTime[r.Offset] = max(batchTime[r.Offset], r.Timestamp)
		}
		// The walk: the first batch whose newest record is at or after
		// ns, and its first record that is.
		walk := func(ns int64) TimeOffset {
			for _, r := range got {
				if batchTime[r.Offset] >= ns && r.Timestamp >= ns {
					return TimeOffset{Offset: r.Offset, Index: r.Index, Timestamp: r.Timestamp, Found: true}
				}
			}
			st, _ := tp.State(ctx, 0)
			return TimeOffset{Offset: st.Committed}
		}
		asked := 0
		for _, r := range got {
			for _, ns := range []int64{r.Timestamp - 1, r.Timestamp, r.Timestamp + 1} {
				res, err := tp.OffsetForTime(ctx, 0, time.Unix(0, ns))
				if want := walk(ns); err != nil || res != want {
					t.Fatalf("time %d: %+v %v, want %+v", ns, res, err, want)
				}
				asked++
			}
		}
		// A seek to a time within a batch's records: the batch, and
		// the index of its first record at or after the time.
		var at int64
		for _, r := range got {
			if w := walk(r.Timestamp); w.Index > 0 {
				at = r.Timestamp
				break
			}
		}
		res, err := c.SeekTime(ctx, 0, time.Unix(0, at))
		if err != nil || at == 0 || res != walk(at) {
			t.Fatalf("seek to %d: %+v %v, want %+v", at, res, err, walk(at))
		}
		if rs, err := c.Fetch(ctx, 0, 0); err != nil || len(rs) <= res.Index || rs[0].Offset != res.Offset || rs[res.Index].Timestamp != res.Timestamp {
			t.Fatalf("fetch after the seek to %+v: %d records %v", res, len(rs), err)
		}
		t.Logf("%d records in %d batches, %d lookups", len(got), len(batchTime), asked)
	})
}
