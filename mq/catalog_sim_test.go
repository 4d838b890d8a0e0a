package mq

import (
	"errors"
	"testing"
)

// TestSimCatalog creates topics through a catalog, lists and opens them
// by name from another client, refuses a second topic of one name and a
// full catalog, and deletes one (its regions freed).
func TestSimCatalog(t *testing.T) {
	simTopic(t, 7, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		ctx := s.Ctx()
		pc := s.PoolClient(s.Endpoint())
		cat, err := CreateCatalog(ctx, pc, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Create(ctx, "orders", testLayout(), CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Create(ctx, "orders", testLayout(), CreateOptions{}); !errors.Is(err, ErrExists) {
			t.Fatalf("a second topic named orders: %v", err)
		}
		if _, err := cat.Create(ctx, "bad name", testLayout(), CreateOptions{}); !errors.Is(err, ErrBadName) {
			t.Fatalf("a bad name: %v", err)
		}
		if _, err := cat.Create(ctx, "events", testLayout(), CreateOptions{Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Create(ctx, "more", testLayout(), CreateOptions{}); !errors.Is(err, ErrFull) {
			t.Fatalf("a full catalog: %v", err)
		}
		pc2 := s.PoolClient(s.Endpoint())
		cat2, err := OpenCatalog(ctx, pc2, cat.Region().ID(), cat.Region().Key())
		if err != nil {
			t.Fatal(err)
		}
		refs, err := cat2.Topics(ctx)
		if err != nil || len(refs) != 2 || refs[0].Name != "orders" || refs[1].Name != "events" {
			t.Fatalf("topics: %+v %v", refs, err)
		}
		tp, err := cat2.Open(ctx, "events")
		if err != nil || tp.Replicas() != 2 || tp.Layout() != testLayout() {
			t.Fatalf("open events: %v", err)
		}
		if _, err := NewProducer(tp, ProducerConfig{}).Produce(ctx, 0, recs("x")); err != nil {
			t.Fatal(err)
		}
		if err := cat2.Delete(ctx, "events"); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Open(ctx, "events"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("open a deleted topic: %v", err)
		}
		if _, err := tp.State(ctx, 0); err == nil {
			t.Fatal("a deleted topic's control region still answers")
		}
		if _, err := cat.Create(ctx, "more", testLayout(), CreateOptions{}); err != nil {
			t.Fatalf("create in the freed slot: %v", err)
		}
		if _, err := OpenCatalog(ctx, pc2, s.topic.ctl.ID(), s.topic.ctl.Key()); !errors.Is(err, ErrBadLayout) {
			t.Fatalf("open a region that is not a catalog: %v", err)
		}
	})
}

// TestSimGroupOffsets: a group's committed offsets move forward only,
// are shared by the group's consumers and not by another group's, and
// a topic's group slots run out.
func TestSimGroupOffsets(t *testing.T) {
	l := testLayout()
	l.Groups = 2
	simTopic(t, 8, 2, l, CreateOptions{}, func(t *testing.T, s *simMQ) {
		tp, _ := s.open()
		ctx := s.Ctx()
		p := NewProducer(tp, ProducerConfig{})
		for i := range 3 {
			if _, err := p.Produce(ctx, 0, recs(string(rune('a'+i)))); err != nil {
				t.Fatal(err)
			}
		}
		a, err := NewConsumer(ctx, tp, ConsumerConfig{Group: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if got := drain(t, s, a, 0); len(got) != 3 {
			t.Fatalf("read %v", got)
		}
		end := a.Position(0)
		if err := a.Commit(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := a.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := a.Commit(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if off, err := a.GroupOffset(ctx, 0); err != nil || off != end {
			t.Fatalf("group offset after committing an older one: %d %v, want %d", off, err, end)
		}
		a2, err := NewConsumer(ctx, tp, ConsumerConfig{Group: "a"})
		if err != nil || a2.Position(0) != end {
			t.Fatalf("second consumer of group a at %d (%v), want %d", a2.Position(0), err, end)
		}
		b, err := NewConsumer(ctx, tp, ConsumerConfig{Group: "b"})
		if err != nil || b.Position(0) != 0 {
			t.Fatalf("group b at %d (%v)", b.Position(0), err)
		}
		if _, err := NewConsumer(ctx, tp, ConsumerConfig{Group: "c"}); !errors.Is(err, ErrFull) {
			t.Fatalf("a third group of two slots: %v", err)
		}
		if err := b.Seek(0, 3); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("seek to an unaligned offset: %v", err)
		}
	})
}
