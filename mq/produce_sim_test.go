package mq

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

func recs(vals ...string) []Record {
	var rs []Record
	for _, v := range vals {
		rs = append(rs, Record{Key: []byte("k"), Value: []byte(v)})
	}
	return rs
}

// drain reads partition p from c's position until the committed offset
// and returns the values read.
func drain(t *testing.T, s *simMQ, c *Consumer, p int) []string {
	t.Helper()
	var got []string
	for {
		rs, err := c.Fetch(s.Ctx(), p, 0)
		if err != nil {
			t.Fatalf("seed %d: fetch %d: %v", s.seed, p, err)
		}
		if len(rs) == 0 {
			return got
		}
		for _, r := range rs {
			got = append(got, string(r.Value))
		}
	}
}

// TestSimProduceConsume produces batches to every partition and reads
// them back in order, with their offsets, producers and sequences; a
// long poll returns what is produced while it waits; a group commits
// and a new consumer of the group starts there; seek reads again.
func TestSimProduceConsume(t *testing.T) {
	simTopic(t, 1, 3, testLayout(), CreateOptions{Replicas: 2}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		pr := NewProducer(tp, ProducerConfig{})
		ctx := s.Ctx()
		var acks []Ack
		for i := range 12 {
			a, err := pr.Produce(ctx, i%3, recs(fmt.Sprint("v", i), fmt.Sprint("w", i)))
			if err != nil {
				t.Fatal(err)
			}
			if a.Sequence != uint64(i/3+1) {
				t.Fatalf("produce %d: sequence %d", i, a.Sequence)
			}
			acks = append(acks, a)
		}
		c, err := NewConsumer(ctx, tp, ConsumerConfig{Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		for p := range 3 {
			rs, err := c.Fetch(ctx, p, 0)
			if err != nil || len(rs) != 8 {
				t.Fatalf("partition %d: %d records, %v", p, len(rs), err)
			}
			for j, r := range rs {
				i := p + 3*(j/2)
				want := fmt.Sprint([]string{"v", "w"}[j%2], i)
				if string(r.Value) != want || r.Offset != acks[i].Offset || r.Index != j%2 || r.Producer != pr.ID() || r.Partition != p {
					t.Fatalf("partition %d record %d: %+v, want %s at %d", p, j, r, want, acks[i].Offset)
				}
			}
		}
		if err := c.Commit(ctx, 1); err != nil {
			t.Fatal(err)
		}
		// A long poll: nothing now, a record a moment later.
		go func() {
			time.Sleep(100 * time.Millisecond)
			if _, err := pr.Produce(ctx, 1, recs("late")); err != nil {
				t.Error(err)
			}
		}()
		start := time.Now()
		rs, err := c.Fetch(ctx, 1, time.Second)
		if err != nil || len(rs) != 1 || string(rs[0].Value) != "late" || time.Since(start) < 100*time.Millisecond {
			t.Fatalf("long poll: %v %v after %v", rs, err, time.Since(start))
		}
		if rs, err := c.Fetch(ctx, 1, 50*time.Millisecond); err != nil || len(rs) != 0 {
			t.Fatalf("long poll with nothing: %v %v", rs, err)
		}
		// A new consumer of the group starts where the group committed.
		c2, err := NewConsumer(ctx, tp, ConsumerConfig{Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c2, 1); len(got) != 1 || got[0] != "late" {
			t.Fatalf("group consumer: %v", got)
		}
		if got := drain(t, s, c2, 0); len(got) != 8 {
			t.Fatalf("group consumer, partition 0 (nothing committed): %v", got)
		}
		if err := c2.Seek(1, acks[4].Offset); err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c2, 1); len(got) != 7 || got[0] != "v4" || got[6] != "late" {
			t.Fatalf("after seek: %v", got)
		}
		st, err := tp.State(ctx, 1)
		if err != nil || st.Committed != st.Tail || st.Holes != 0 {
			t.Fatalf("state: %+v %v", st, err)
		}
	})
}

// TestSimRetention fills a partition's ring several times over: the
// oldest segments are dropped, a consumer that fell behind jumps to the
// start (counted), and what it reads is whole and in order.
func TestSimRetention(t *testing.T) {
	simTopic(t, 2, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		pr := NewProducer(tp, ProducerConfig{})
		ctx := s.Ctx()
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		val := bytes.Repeat([]byte("x"), 900)
		for i := range 200 { // 200 KiB into a ring of 32 KiB
			if _, err := pr.Produce(ctx, 0, []Record{{Key: fmt.Appendf(nil, "%05d", i), Value: val}}); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
		st, err := tp.State(ctx, 0)
		if err != nil || st.Start == 0 || st.Committed-st.Start > tp.Layout().ring() {
			t.Fatalf("state after filling the ring: %+v %v", st, err)
		}
		prev := -1
		for {
			rs, err := c.Fetch(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				break
			}
			for _, r := range rs {
				var i int
				fmt.Sscanf(string(r.Key), "%d", &i)
				if prev >= 0 && i != prev+1 || !bytes.Equal(r.Value, val) {
					t.Fatalf("after %d read %d", prev, i)
				}
				prev = i
			}
		}
		if cs := c.Stats(); prev != 199 || cs.Truncated == 0 || cs.Corrupt != 0 {
			t.Fatalf("read up to %d, stats %+v", prev, cs)
		}
	})
}

// TestSimDegradedAcks crashes a memory node holding only data copies of
// a two-copy topic: a produce with AcksAll stores the batch but reports
// ErrNotAllCopies, one with AcksOne acknowledges it; both are read back.
func TestSimDegradedAcks(t *testing.T) {
	o := CreateOptions{Replicas: 2, ControlColumns: 1, Stripe: 4096} // data on every node
	simTopic(t, 9, 3, testLayout(), o, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		s.CrashMem(s.dataOnlyNodes()[0])
		time.Sleep(3 * time.Second) // the switch counts it dead
		all := NewProducer(tp, ProducerConfig{})
		a, err := all.Produce(ctx, 0, recs("all"))
		if !errors.Is(err, ErrNotAllCopies) || !a.Degraded {
			t.Fatalf("AcksAll with a copy down: %+v %v", a, err)
		}
		one := NewProducer(tp, ProducerConfig{Acks: AcksOne})
		if a, err := one.Produce(ctx, 0, recs("one")); err != nil || !a.Degraded {
			t.Fatalf("AcksOne with a copy down: %+v %v", a, err)
		}
		c, err := NewConsumer(ctx, tp, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c, 0); len(got) != 2 || got[0] != "all" || got[1] != "one" {
			t.Fatalf("read %v", got)
		}
	})
}
