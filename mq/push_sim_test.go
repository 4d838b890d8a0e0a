package mq

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
)

// pushCfg is a push through endpoint ep at the test's switch; idle is
// the subscriber's Idle (zero: the default).
func (s *simMQ) pushCfg(ep *endpoint.Endpoint, idle time.Duration) Push {
	return Push{Endpoint: ep, Switch: s.Switch.String(), Fabric: s.Fab, Refresh: 50 * time.Millisecond, Idle: idle}
}

// subscriber opens the topic on an endpoint of its own and subscribes
// from the consumer's positions, after seek (if not nil) set them.
func (s *simMQ) subscriber(idle time.Duration, seek func(*Consumer)) *Subscription {
	s.t.Helper()
	tp, ep := s.open()
	c, err := NewConsumer(s.Ctx(), tp, ConsumerConfig{})
	if err != nil {
		s.t.Fatal(err)
	}
	if seek != nil {
		seek(c)
	}
	sub, err := c.Subscribe(s.Ctx(), s.pushCfg(ep, idle))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(sub.Close)
	return sub
}

// pushProducer is a producer pushing through an endpoint of its own
// (so that its datagrams are counted apart from its pool traffic).
func (s *simMQ) pushProducer() (*Producer, *endpoint.Endpoint) {
	tp, _ := s.open()
	ep := s.Endpoint()
	cfg := s.pushCfg(ep, 0)
	p := NewProducer(tp, ProducerConfig{Push: &cfg})
	s.t.Cleanup(p.Close)
	return p, ep
}

// sent is what the producer stored: per partition, the values in
// offset order.
type sent map[int][]string

func (w sent) produce(t *testing.T, s *simMQ, p *Producer, part int, vals ...string) {
	t.Helper()
	if _, err := p.Produce(s.Ctx(), part, recs(vals...)); err != nil {
		t.Fatal(err)
	}
	w[part] = append(w[part], vals...)
}

func (w sent) total() int {
	n := 0
	for _, v := range w {
		n += len(v)
	}
	return n
}

// receive takes records from sub until it has want's, and checks that
// each partition's are want's, in order, none twice.
func receive(t *testing.T, s *simMQ, sub *Subscription, want sent) {
	t.Helper()
	got := make(sent)
	deadline := time.Now().Add(20 * time.Second)
	for got.total() < want.total() {
		rs, err := sub.Next(s.Ctx(), 100*time.Millisecond)
		if err != nil {
			t.Fatalf("seed %d: next: %v", s.seed, err)
		}
		for _, r := range rs {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
		}
		if time.Now().After(deadline) {
			break
		}
	}
	for p := range max(len(got), len(want)) {
		if !slices.Equal(got[p], want[p]) {
			t.Fatalf("seed %d: partition %d: received %v, want %v (%+v)", s.seed, p, got[p], want[p], sub.Stats())
		}
	}
	if rs, err := sub.Next(s.Ctx(), 0); err != nil || len(rs) != 0 {
		t.Fatalf("seed %d: then %d more records, %v", s.seed, len(rs), err)
	}
}

// waitGroups waits until p formed n push groups.
func waitGroups(t *testing.T, p *Producer, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); p.Stats().PushGroups < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d push groups formed, want %d: %+v", p.Stats().PushGroups, n, p.Stats())
		}
	}
}

// TestSimPush: three subscribers receive every record stored, in order,
// while the producer sends each batch once: the bytes and datagrams it
// sends are those of the batches, not three times them. The batch stored
// before the push group formed is read from the log.
func TestSimPush(t *testing.T) {
	simTopic(t, 21, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		var subs []*Subscription
		for range 3 {
			subs = append(subs, s.subscriber(time.Hour, nil))
		}
		p, ep := s.pushProducer()
		w := make(sent)
		w.produce(t, s, p, 0, "before the group")
		waitGroups(t, p, 1)
		before := ep.Stats().Transport
		bytes, n := 0, 30
		for i := range n {
			vals := []string{fmt.Sprint("r", i), fmt.Sprint("s", i)}
			w.produce(t, s, p, i%3, vals...)
			bytes += pushPrefix + batchHeaderLen + bodyLen(recs(vals...)) + pushTagLen
		}
		for _, sub := range subs {
			receive(t, s, sub, w)
			if st := sub.Stats(); st.Pushed != 2*uint64(n) || st.Repaired != 1 || st.Groups != 1 || st.Overflow != 0 {
				t.Fatalf("subscriber %+v", st)
			}
		}
		after := ep.Stats().Transport
		ps := p.Stats()
		if ps.Pushed != uint64(n) || ps.PushDropped != 0 || ps.PushGroups != 1 {
			t.Fatalf("producer %+v", ps)
		}
		// The push endpoint sent the batches once (and its heartbeats:
		// one a second, of less than 100 bytes).
		db, dp := after.BytesSent-before.BytesSent, after.PacketsSent-before.PacketsSent
		t.Logf("pushed %d batches of %d bytes in all: %d datagrams, %d bytes sent", n, bytes, dp, db)
		if db < uint64(bytes) || db > uint64(bytes)+400 || dp < uint64(n) || dp > uint64(n)+4 || after.PacketsRetransmitted != before.PacketsRetransmitted {
			t.Fatalf("sent %d datagrams, %d bytes (%d retransmitted) for %d batches of %d bytes", dp, db,
				after.PacketsRetransmitted-before.PacketsRetransmitted, n, bytes)
		}
	})
}

// TestSimPushNoSubscribers: a producer with Push and no subscriber
// pushes nothing: it only asks the switch who subscribes, once a
// refresh while it produces.
func TestSimPushNoSubscribers(t *testing.T) {
	simTopic(t, 22, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		p, ep := s.pushProducer()
		w := make(sent)
		for i := range 20 {
			w.produce(t, s, p, i%3, fmt.Sprint(i))
		}
		time.Sleep(10 * time.Millisecond)
		st := ep.Stats().Transport
		if ps := p.Stats(); ps.Pushed != 0 || ps.PushDropped != 0 || ps.PushGroups != 0 {
			t.Fatalf("producer %+v", ps)
		}
		if st.PacketsSent > 2 {
			t.Fatalf("the push endpoint sent %d datagrams (%d bytes)", st.PacketsSent, st.BytesSent)
		}
	})
}

// TestSimPushCutRepaired cuts one subscriber's link while the producer
// stores batches quickly: the push group's acknowledgements stop, the
// producer's push window fills and it pushes no more until the link is
// back (PushDropped). Every subscriber reads the batches not pushed
// from the log (Repaired) and receives every record in order, the cut
// one included once its link is back.
func TestSimPushCutRepaired(t *testing.T) {
	simTopic(t, 23, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		var subs []*Subscription
		for range 3 {
			subs = append(subs, s.subscriber(0, nil))
		}
		p, _ := s.pushProducer()
		w := make(sent)
		w.produce(t, s, p, 0, "first")
		waitGroups(t, p, 1)
		cut := subs[2].cfg.Endpoint.LocalAddr()
		s.SetLoss(cut, 1)
		for i := range 200 {
			w.produce(t, s, p, i%3, fmt.Sprint(i))
		}
		s.SetLoss(cut, 0)
		for i := range 20 {
			w.produce(t, s, p, i%3, fmt.Sprint("after ", i))
		}
		ps := p.Stats()
		if ps.PushDropped == 0 || ps.Pushed == 0 {
			t.Fatalf("producer %+v: want batches pushed and batches dropped", ps)
		}
		for i, sub := range subs {
			receive(t, s, sub, w)
			st := sub.Stats()
			t.Logf("subscriber %d: %+v", i, st)
			if st.Repaired == 0 || st.Pushed == 0 || st.Pushed+st.Repaired != uint64(w.total()) {
				t.Fatalf("subscriber %d: %+v, %d records", i, st, w.total())
			}
		}
	})
}

// TestSimPushLateJoin: a subscriber that joins after records were
// pushed starts at its own position (a batch's offset): it reads the
// log from there to the first batch pushed to it, then takes pushes.
// The producer notices it when it next produces, and notices the other
// one leave.
func TestSimPushLateJoin(t *testing.T) {
	simTopic(t, 24, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		early := s.subscriber(time.Hour, nil)
		p, _ := s.pushProducer()
		w := make(sent)
		w.produce(t, s, p, 1, "a")
		waitGroups(t, p, 1)
		var from uint64
		for i, v := range []string{"b", "c", "d", "e"} {
			ack, err := p.Produce(s.Ctx(), 1, recs(v))
			if err != nil {
				t.Fatal(err)
			}
			w[1] = append(w[1], v)
			if i == 2 {
				from = ack.Offset
			}
		}
		late := s.subscriber(time.Hour, func(c *Consumer) {
			if err := c.Seek(1, from); err != nil {
				t.Fatal(err)
			}
		})
		w.produce(t, s, p, 1, "f") // the producer looks again
		waitGroups(t, p, 2)
		for _, v := range []string{"g", "h"} {
			w.produce(t, s, p, 1, v)
		}
		receive(t, s, early, w)
		receive(t, s, late, sent{1: {"d", "e", "f", "g", "h"}})
		if st := late.Stats(); st.Pushed != 2 || st.Repaired != 3 {
			t.Fatalf("late subscriber %+v", st)
		}
		// The early one leaves: once the switch no longer lists it, the
		// producer forms a group of the late one alone, and goes on
		// pushing to it.
		early.Close()
		time.Sleep(3 * time.Second)
		w.produce(t, s, p, 1, "i")
		waitGroups(t, p, 3)
		w.produce(t, s, p, 1, "j")
		receive(t, s, late, sent{1: {"i", "j"}})
		if st := late.Stats(); st.Pushed != 4 || st.Repaired != 3 || st.Groups != 2 {
			t.Fatalf("late subscriber %+v", st)
		}
	})
}

// TestSimPushHole: a producer killed between reserve and publish leaves
// a hole; the pushing producer's next batch is published once the hole
// is sealed and pushed. The subscriber sees its offset jump, reads the
// skip marker from the log, and delivers the batches around the hole
// in order, both pushed.
func TestSimPushHole(t *testing.T) {
	simTopic(t, 25, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		sub := s.subscriber(time.Hour, nil)
		p, _ := s.pushProducer()
		w := make(sent)
		w.produce(t, s, p, 0, "first")
		waitGroups(t, p, 1)
		w.produce(t, s, p, 0, "before")
		tp, _ := s.open()
		interrupted(t, s, NewProducer(tp, ProducerConfig{}), 0, recs("never written"), false, false)
		w.produce(t, s, p, 0, "after")
		receive(t, s, sub, w)
		st, err := tp.State(s.Ctx(), 0)
		if err != nil || st.Holes != 1 {
			t.Fatalf("state %+v %v", st, err)
		}
		if ss := sub.Stats(); ss.Pushed != 2 || ss.Repaired != 1 {
			t.Fatalf("subscriber %+v", ss)
		}
	})
}

// TestSimPushManySubscribers: a push group of more subscribers than a
// service's 64 of old: each of them receives every record pushed, in
// order, from one group, and the producer sends each batch once.
func TestSimPushManySubscribers(t *testing.T) {
	const n = 100
	simTopic(t, 22, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		var subs []*Subscription
		for range n {
			subs = append(subs, s.subscriber(time.Hour, nil))
		}
		p, _ := s.pushProducer()
		w := make(sent)
		w.produce(t, s, p, 0, "before the group")
		waitGroups(t, p, 1)
		for i := range 6 {
			w.produce(t, s, p, i%3, fmt.Sprint("r", i))
		}
		for _, sub := range subs {
			receive(t, s, sub, w)
			if st := sub.Stats(); st.Pushed != 6 || st.Repaired != 1 || st.Groups != 1 || st.Overflow != 0 {
				t.Fatalf("subscriber %+v", st)
			}
		}
		if ps := p.Stats(); ps.Pushed != 6 || ps.PushDropped != 0 || ps.PushGroups != 1 {
			t.Fatalf("producer %+v", ps)
		}
	})
}
