package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// createTopic makes topic name through CreateTopics and fails the test
// on an error code.
func createTopic(t *testing.T, cl *kgo.Client, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %+v %v", name, resp, err)
	}
}

// consumed is what a group member read of one partition.
type consumed struct {
	offsets []int64
	values  []string
}

// consumeGroup reads topic as a member of group until it has want
// records in all, commits the first commit of them (all when commit is
// negative) and leaves.
func consumeGroup(t *testing.T, addr, topic, group string, want, commit int) map[int32]*consumed {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(200e6))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	got := make(map[int32]*consumed)
	var recs []*kgo.Record
	for len(recs) < want {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll after %d records: %v", len(recs), err)
		}
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	if commit < 0 {
		commit = len(recs)
	}
	for _, r := range recs[:commit] {
		c := got[r.Partition]
		if c == nil {
			c = &consumed{}
			got[r.Partition] = c
		}
		c.offsets = append(c.offsets, r.Offset)
		c.values = append(c.values, string(r.Value))
		if len(r.Headers) != 1 || r.Headers[0].Key != "n" || string(r.Headers[0].Value) != string(r.Value) {
			t.Errorf("record %q: headers %+v", r.Value, r.Headers)
		}
	}
	if err := cl.CommitRecords(ctx, recs[:commit]...); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestKgoProduceConsumeGroup: franz-go's client, unmodified (but for no
// compression), creates a topic of 2 partitions, produces records with
// keys and headers to both, and a consumer group reads them back in
// order: a first member commits part of what it read and leaves, a
// second resumes at the committed offsets; together they read every
// record once, in order per partition.
func TestKgoProduceConsumeGroup(t *testing.T) {
	cat := startCatalog(t)
	s, addr := startServer(t, Config{Catalog: cat})
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	createTopic(t, prod, "orders", 2)
	const n = 300
	sent := map[int32][]string{}
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Sprint("order-", i)
		p := int32(i % 2)
		if i%7 == 0 {
			p = 0 // uneven partitions
		}
		sent[p] = append(sent[p], v)
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: p, Key: []byte(fmt.Sprint("k", i)), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(v)}}})
	}
	if err := prod.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	first := consumeGroup(t, addr, "orders", "billing", 100, 100)
	second := consumeGroup(t, addr, "orders", "billing", n-100, -1)
	for p, want := range sent {
		var got []string
		var offs []int64
		for _, c := range []*consumed{first[p], second[p]} {
			if c != nil {
				got, offs = append(got, c.values...), append(offs, c.offsets...)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("partition %d: read %d records %v\nwant %d %v", p, len(got), got, len(want), want)
		}
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Errorf("partition %d: offset %d after %d", p, offs[i], offs[i-1])
			}
		}
	}
	if st := s.Stats(); st.Produced != n || st.Malformed != 0 {
		t.Errorf("stats %+v: want %d produced, none malformed", st, n)
	}
	ctx := testCtx(t)
	top, err := cat.Open(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		st, err := top.State(ctx, int(p))
		off, ok, gerr := top.GroupOffset(ctx, "billing", int(p))
		last := second[p].offsets[len(second[p].offsets)-1]
		if err != nil || gerr != nil || !ok || off != uint64(last)+1 || off > st.Committed {
			t.Errorf("partition %d: group offset %d %v %v, want the last record's %d + 1, log committed to %d (%v)", p, off, ok, gerr, last, st.Committed, err)
		}
	}
	checkListOffsets(t, prod, ctx, top)
	checkFetchMaxBytes(t, prod, ctx)
}

// checkFetchMaxBytes fetches both partitions of orders from their start
// with MaxBytes 1: the first partition's batches come whole, the
// second's none, with its high watermark.
func checkFetchMaxBytes(t *testing.T, cl *kgo.Client, ctx context.Context) {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes, req.MaxWaitMillis, req.MinBytes = 1, 100, 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "orders"
	for p := range int32(2) {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
		t.Fatalf("fetch: %+v %v", resp, err)
	}
	p0, p1 := resp.Topics[0].Partitions[0], resp.Topics[0].Partitions[1]
	if p0.ErrorCode != 0 || len(p0.RecordBatches) == 0 || p1.ErrorCode != 0 || len(p1.RecordBatches) != 0 || p1.HighWatermark <= 0 {
		t.Fatalf("fetch with MaxBytes 1: partition 0 %d bytes (code %d), partition 1 %d bytes (code %d, high watermark %d)",
			len(p0.RecordBatches), p0.ErrorCode, len(p1.RecordBatches), p1.ErrorCode, p1.HighWatermark)
	}
}

// checkListOffsets asks for the earliest and latest offsets of both
// partitions of orders (mq's start and committed offsets), and by time:
// the epoch finds the first batch, with its timestamp; an hour from now
// finds none (-1).
func checkListOffsets(t *testing.T, cl *kgo.Client, ctx context.Context, top *mq.Topic) {
	t.Helper()
	future := time.Now().Add(time.Hour).UnixMilli()
	for _, ts := range []int64{-2, -1, 0, future} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version = 1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "orders"
		for p := range int32(2) {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
			t.Fatalf("list offsets %d: %+v %v", ts, resp, err)
		}
		for _, rp := range resp.Topics[0].Partitions {
			st, err := top.State(ctx, int(rp.Partition))
			want, wantTS := int64(st.Committed), int64(-1)
			switch ts {
			case -2, 0:
				want = int64(st.Start)
			case future:
				want = -1
			}
			if ts == 0 {
				c, cerr := mq.NewConsumer(ctx, top, mq.ConsumerConfig{})
				var rs []mq.Record
				if cerr == nil {
					rs, cerr = c.Fetch(ctx, int(rp.Partition), 0)
				}
				if cerr != nil || len(rs) == 0 {
					t.Fatalf("partition %d: reading the first batch: %v", rp.Partition, cerr)
				}
				wantTS = rs[0].Timestamp / int64(time.Millisecond)
			}
			if err != nil || rp.ErrorCode != 0 || rp.Offset != want || st.Committed == st.Start || ts >= 0 && rp.Timestamp != wantTS {
				t.Errorf("list offsets %d, partition %d: %d at %d (code %d), want %d at %d (%v)", ts, rp.Partition, rp.Offset, rp.Timestamp, rp.ErrorCode, want, wantTS, err)
			}
		}
	}
}

// TestKgoResumeInsideLargeBatch: a batch of 100 records written by an
// mq producer (more than the front end writes in one) is read by a Kafka
// group member that commits inside it, past its 64th record; the next
// member resumes at the record after the committed one.
func TestKgoResumeInsideLargeBatch(t *testing.T) {
	cat := startCatalog(t)
	_, addr := startServer(t, Config{Catalog: cat})
	ctx := testCtx(t)
	l := testLayout
	l.Partitions = 1
	top, err := cat.Create(ctx, "big", l, mq.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var batch []mq.Record
	for i := range 100 {
		v := fmt.Sprint("r", i)
		batch = append(batch, mq.Record{Value: []byte(v), Headers: []mq.Header{{Key: "n", Value: []byte(v)}}})
	}
	prod := mq.NewProducer(top, mq.ProducerConfig{})
	for range 2 {
		if _, err := prod.Produce(ctx, 0, batch[:10]); err != nil { // a small batch before and after
			t.Fatal(err)
		}
		if _, err := prod.Produce(ctx, 0, batch); err != nil {
			t.Fatal(err)
		}
	}
	first := consumeGroup(t, addr, "big", "g", 90, 90) // 10 + 80 of the first large batch
	second := consumeGroup(t, addr, "big", "g", 120, -1)
	got := append(first[0].values, second[0].values...)
	var want []string
	for range 2 {
		for _, r := range append(batch[:10:10], batch...) {
			want = append(want, string(r.Value))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %d records %v\nwant %d %v", len(got), got, len(want), want)
	}
	if c := first[0].offsets; c[len(c)-1]%mq.Align < 64 && c[len(c)-1]-c[10] < 64 {
		t.Fatalf("the first member's last offset %d is not past the 64th record of its batch (at %d)", c[len(c)-1], c[10])
	}
}

// TestKgoTwoMembers: two franz-go members of one group (its default
// cooperative-sticky balancer) join at once and share a topic of 2
// partitions: between them they read every record, each partition in
// order, and the group's membership settles with one partition each.
func TestKgoTwoMembers(t *testing.T) {
	cat := startCatalog(t)
	_, addr := startServer(t, Config{Catalog: cat})
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	createTopic(t, prod, "pairs", 2)
	ctx := testCtx(t)
	want := map[string]bool{}
	for i := range 80 {
		v := fmt.Sprintf("%02d", i)
		want[v] = true
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "pairs", Partition: int32(i % 2), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	type seen struct {
		member int
		r      *kgo.Record
	}
	out := make(chan seen, 1000)
	var mu sync.Mutex
	held := [2]int{} // partitions each member holds now
	for m := range 2 {
		move := func(d int) func(context.Context, *kgo.Client, map[string][]int32) {
			return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				mu.Lock()
				held[m] += d * len(ps["pairs"])
				mu.Unlock()
			}
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("pairs-g"), kgo.ConsumeTopics("pairs"),
			kgo.FetchMaxWait(100e6), kgo.OnPartitionsAssigned(move(1)), kgo.OnPartitionsRevoked(move(-1)), kgo.OnPartitionsLost(move(-1)))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		go func() {
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) { out <- seen{m, r} })
			}
		}()
	}
	last := map[int32]int64{0: -1, 1: -1}
	for len(want) > 0 {
		select {
		case s := <-out:
			delete(want, string(s.r.Value))
			if s.r.Offset <= last[s.r.Partition] {
				t.Errorf("partition %d: offset %d after %d", s.r.Partition, s.r.Offset, last[s.r.Partition])
			}
			last[s.r.Partition] = s.r.Offset
		case <-ctx.Done():
			t.Fatalf("%d records never read", len(want))
		}
	}
	for {
		mu.Lock()
		h := held
		mu.Unlock()
		if h == [2]int{1, 1} {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the members hold %v partitions, not one each", h)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
