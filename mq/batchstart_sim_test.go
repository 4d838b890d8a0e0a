package mq

import (
	"fmt"
	"testing"
)

// TestSimBatchStart: BatchStart finds the batch that holds an offset
// inside it (a batch of 100 records: offsets past its 64th record lie
// beyond its first 64 bytes), and a consumer group whose offset was
// committed inside a batch (as a Kafka client commits) resumes at that
// batch; GroupOffset reports a group that never committed as such.
func TestSimBatchStart(t *testing.T) {
	simTopic(t, 1, 1, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		ctx := s.Ctx()
		p := NewProducer(s.topic, ProducerConfig{})
		var offs []uint64
		for _, n := range []int{10, 100, 5} {
			var recs []Record
			for i := range n {
				recs = append(recs, Record{Value: fmt.Appendf(nil, "v%d", i)})
			}
			ack, err := p.Produce(ctx, 0, recs)
			if err != nil {
				t.Fatal(err)
			}
			offs = append(offs, ack.Offset)
		}
		st, err := s.topic.State(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ off, want uint64 }{
			{offs[0], offs[0]}, {offs[0] + 3, offs[0]}, {offs[1], offs[1]}, {offs[1] + 63, offs[1]},
			{offs[1] + 70, offs[1]}, {offs[1] + 100, offs[1]}, {offs[2] + 4, offs[2]}, {st.Committed, st.Committed},
		} {
			if got, err := s.topic.BatchStart(ctx, 0, c.off); err != nil || got != c.want {
				t.Errorf("BatchStart(%d) = %d %v, want %d", c.off, got, err, c.want)
			}
		}
		if _, ok, err := s.topic.GroupOffset(ctx, "kafka", 0); ok || err != nil {
			t.Fatalf("a group never committed: %v %v", ok, err)
		}
		if _, err := s.topic.CommitGroup(ctx, "kafka", 0, offs[1]+70); err != nil {
			t.Fatal(err)
		}
		if off, ok, err := s.topic.GroupOffset(ctx, "kafka", 0); !ok || err != nil || off != offs[1]+70 {
			t.Fatalf("group offset %d %v %v", off, ok, err)
		}
		c, err := NewConsumer(ctx, s.topic, ConsumerConfig{Group: "kafka"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Position(0) != offs[1] {
			t.Fatalf("resumed at %d, want the batch at %d", c.Position(0), offs[1])
		}
		recs, err := c.Fetch(ctx, 0, 0)
		if err != nil || len(recs) != 105 || c.Stats().Corrupt != 0 {
			t.Fatalf("read %d records (%v), %d corrupt", len(recs), err, c.Stats().Corrupt)
		}
	})
}
