package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// TestKgoRecordTimes: records produced with CreateTime timestamps (out
// of order, an hour ago) are stored with them (mq reads them back), a
// Kafka consumer gets them back, and ListOffsets by each time answers
// the first record at or after it in the first batch whose newest
// record is, as a walk over the records finds.
func TestKgoRecordTimes(t *testing.T) {
	cat := startCatalog(t)
	_, addr := startServer(t, Config{Catalog: cat})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ConsumeTopics("times"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200e6))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	createTopic(t, cl, "times", 1)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const n = 40
	want := map[string]time.Time{}
	for round := range 2 { // two produce requests: two batches at least
		var recs []*kgo.Record
		for i := range n / 2 {
			v := fmt.Sprint("r", round, "-", i)
			want[v] = base.Add(time.Duration((i*17+round*5)%50) * time.Millisecond)
			recs = append(recs, &kgo.Record{Topic: "times", Value: []byte(v), Timestamp: want[v]})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	for _, r := range got {
		if !r.Timestamp.Equal(want[string(r.Value)]) || r.Attrs.TimestampType() != 0 {
			t.Fatalf("record %q at %d: %v (type %d), want %v", r.Value, r.Offset, r.Timestamp, r.Attrs.TimestampType(), want[string(r.Value)])
		}
	}
	top, err := cat.Open(ctx, "times")
	if err != nil {
		t.Fatal(err)
	}
	c, err := mq.NewConsumer(ctx, top, mq.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ms []mq.Record
	for len(ms) < n {
		rs, err := c.Fetch(ctx, 0, time.Second)
		if err != nil || len(rs) == 0 {
			t.Fatalf("mq fetched %d records: %v", len(ms), err)
		}
		ms = append(ms, rs...)
	}
	newest := map[uint64]int64{}
	for _, r := range ms {
		if r.Timestamp != want[string(r.Value)].UnixNano() {
			t.Fatalf("mq record %q at %d: %d, want %v", r.Value, r.Timestamp, r.Timestamp, want[string(r.Value)])
		}
		newest[r.Offset] = max(newest[r.Offset], r.Timestamp)
	}
	for _, r := range ms {
		at := r.Timestamp / int64(time.Millisecond)
		wantOff, wantTS := int64(-1), int64(-1)
		for _, q := range ms {
			if newest[q.Offset] >= at*1e6 && q.Timestamp >= at*1e6 {
				wantOff, wantTS = int64(q.Offset)+int64(q.Index), q.Timestamp/1e6
				break
			}
		}
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "times"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = at
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("list offsets %d: %+v %v", at, resp, err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != wantOff || p.Timestamp != wantTS {
			t.Fatalf("list offsets %d: %d at %d (code %d), want %d at %d", at, p.Offset, p.Timestamp, p.ErrorCode, wantOff, wantTS)
		}
	}
	if len(newest) < 2 {
		t.Fatalf("%d batches", len(newest))
	}
}

// TestDecodeRecordTimes: a record's time is its batch's first timestamp
// plus its delta (before the first too), in nanoseconds; no timestamp
// (-1) is none, and a time past what nanoseconds hold is refused.
func TestDecodeRecordTimes(t *testing.T) {
	var b []byte
	for _, d := range []int64{7, -3, 0} {
		r := kmsg.NewRecord()
		r.TimestampDelta64, r.Value = d, []byte("v")
		enc := r.AppendTo(nil)
		r.Length = int32(len(enc) - 1)
		b = r.AppendTo(b)
	}
	rs, err := decodeRecords(b, 3, 5000)
	if err != nil || len(rs) != 3 || rs[0].Timestamp != 5007e6 || rs[1].Timestamp != 4997e6 || rs[2].Timestamp != 5000e6 {
		t.Fatalf("CreateTime: %+v %v", rs, err)
	}
	if rs, err := decodeRecords(b, 3, -1); err != nil || rs[0].Timestamp != 0 || rs[1].Timestamp != 0 {
		t.Fatalf("no timestamp: %+v %v", rs, err)
	}
	if _, err := decodeRecords(b, 3, maxMillis); err == nil {
		t.Fatal("a time past what nanoseconds hold was taken")
	}
}
