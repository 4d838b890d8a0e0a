package mq

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSimRebuild loses the memory node holding a topic's control region
// (its data keeps two copies) while one partition has acknowledged
// batches, a hole (a reservation never written) and a whole batch
// behind it not yet published. Rebuild makes a new control region from
// the log: every batch is read back in order, the hole is sealed and
// counted, producing goes on after the last batch, and a new group
// starts from the partitions' start.
func TestSimRebuild(t *testing.T) {
	o := CreateOptions{Replicas: 2, ControlColumns: 1, Stripe: 4096}
	simTopic(t, 10, 3, testLayout(), o, func(t *testing.T, s *simMQ) {
		ctx := s.Ctx()
		cat, err := CreateCatalog(ctx, s.PoolClient(s.Endpoint()), CatalogOptions{Slots: 4})
		if err != nil {
			t.Fatal(err)
		}
		tp, err := cat.Create(ctx, "r", testLayout(), o)
		if err != nil {
			t.Fatal(err)
		}
		p := NewProducer(tp, ProducerConfig{})
		for _, v := range []string{"a", "b"} {
			if _, err := p.Produce(ctx, 0, recs(v)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Produce(ctx, 1, recs("c")); err != nil {
			t.Fatal(err)
		}
		dead := NewProducer(tp, ProducerConfig{})
		interrupted(t, s, dead, 0, recs("never written"), false, false)
		interrupted(t, s, dead, 0, recs("e"), true, false)
		s.CrashMem(s.controlNode(tp))
		time.Sleep(DefaultSealTimeout)
		if _, err := tp.State(ctx, 0); err == nil {
			t.Fatal("the lost control region still answers")
		}
		if _, err := cat.Rebuild(ctx, "r", 1); err != nil {
			t.Fatal(err)
		}
		// Another client finds the new control region in the catalog.
		cat2, err := OpenCatalogRef(ctx, s.PoolClient(s.Endpoint()), cat.Ref())
		if err != nil {
			t.Fatal(err)
		}
		t2, err := cat2.Open(ctx, "r")
		if err != nil || t2.Ref().Control == tp.Ref().Control || t2.Ref().Data != tp.Ref().Data {
			t.Fatalf("open after the rebuild: %+v (was %+v), %v", t2.Ref(), tp.Ref(), err)
		}
		c, err := NewConsumer(ctx, t2, ConsumerConfig{Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, c, 0); !slices.Equal(got, []string{"a", "b", "e"}) {
			t.Fatalf("partition 0 after the rebuild: %v", got)
		}
		if got := drain(t, s, c, 1); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("partition 1 after the rebuild: %v", got)
		}
		st, err := t2.State(ctx, 0)
		if err != nil || st.Holes != 1 || st.Committed != st.Tail || st.Start != 0 {
			t.Fatalf("partition 0: %+v %v", st, err)
		}
		if _, err := NewProducer(t2, ProducerConfig{Acks: AcksOne}).Produce(ctx, 0, recs("f")); err != nil { // a data copy is down too
			t.Fatal(err)
		}
		if got := drain(t, s, c, 0); !slices.Equal(got, []string{"f"}) {
			t.Fatalf("produced after the rebuild: %v", got)
		}
		if cs := c.Stats(); cs.Corrupt != 0 {
			t.Fatalf("consumer %+v", cs)
		}
	})
}

// TestSimRebuildWrapped rebuilds a partition whose ring was filled
// several times over: the rebuilt log is the newest ring's worth of
// batches, whole and in order, up to the last one produced.
func TestSimRebuildWrapped(t *testing.T) {
	o := CreateOptions{Replicas: 2, ControlColumns: 1, Stripe: 4096}
	simTopic(t, 11, 3, testLayout(), o, func(t *testing.T, s *simMQ) {
		tp, ep := s.open()
		ctx := s.Ctx()
		p := NewProducer(tp, ProducerConfig{})
		val := make([]byte, 900)
		for i := range 200 {
			if _, err := p.Produce(ctx, 0, []Record{{Key: fmt.Appendf(nil, "%05d", i), Value: val}}); err != nil {
				t.Fatal(err)
			}
		}
		s.CrashMem(s.controlNode(tp))
		time.Sleep(DefaultSealTimeout)
		t2, err := Rebuild(ctx, s.PoolClient(ep), tp.Ref(), 1)
		if err != nil {
			t.Fatal(err)
		}
		c, err := NewConsumer(ctx, t2, ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for {
			rs, err := c.Fetch(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				break
			}
			for _, r := range rs {
				keys = append(keys, string(r.Key))
			}
		}
		if len(keys) < 20 || len(keys) > 40 || keys[len(keys)-1] != "00199" {
			t.Fatalf("%d batches read from a ring of 32 KiB: %v", len(keys), keys)
		}
		for i := 1; i < len(keys); i++ {
			if want := fmt.Sprintf("%05d", 200-len(keys)+i); keys[i] != want {
				t.Fatalf("batch %d read is %s, want %s", i, keys[i], want)
			}
		}
		st, err := t2.State(ctx, 0)
		if err != nil || st.Start == 0 || st.Holes != 0 || st.Committed-st.Start > t2.Layout().ring() {
			t.Fatalf("partition 0: %+v %v", st, err)
		}
		if cs := c.Stats(); cs.Corrupt != 0 {
			t.Fatalf("consumer %+v", cs)
		}
	})
}
