package mq

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestSimCatalog creates topics through a catalog, lists and opens them
// by name from another client, refuses a second topic of one name and a
// full catalog, and deletes one (its regions freed).
func TestSimCatalog(t *testing.T) {
	simTopic(t, 7, 2, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		ctx := s.Ctx()
		pc := s.PoolClient(s.Endpoint())
		cat, err := CreateCatalog(ctx, pc, CatalogOptions{Slots: 2})
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

// TestSimCatalogMirror loses the memory node of a catalog's region, with
// the catalog mirrored: first the node is down (a topic deleted
// meanwhile: written around it, its column reported lost), then back
// empty. Clients that open the catalog read it from the mirror
// throughout (opened without the mirror it is lost); the first open
// after the node is back rebuilds the region from the mirror
// (Catalog.Repair), and the region serves again.
func TestSimCatalogMirror(t *testing.T) {
	simTopic(t, 9, 3, testLayout(), CreateOptions{}, func(t *testing.T, s *simMQ) {
		ctx := s.Ctx()
		cat, err := CreateCatalog(ctx, s.PoolClient(s.Endpoint()), CatalogOptions{Slots: 4})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			if _, err := cat.Create(ctx, name, testLayout(), CreateOptions{Replicas: 2}); err != nil {
				t.Fatal(err)
			}
		}
		names := func(what string, want ...string) {
			t.Helper()
			c, err := OpenCatalogRef(ctx, s.PoolClient(s.Endpoint()), cat.Ref())
			if err != nil {
				t.Fatalf("%s: open: %v", what, err)
			}
			refs, err := c.Topics(ctx)
			var got []string
			for _, r := range refs {
				got = append(got, r.Name)
			}
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: topics %v, %v; want %v", what, got, err, want)
			}
		}
		node := s.Holder(cat.Region(), 0)
		s.CrashMem(node)
		time.Sleep(5 * time.Second) // counted dead
		names("the region's node down", "a", "b")
		if err := cat.Delete(ctx, "b"); err != nil {
			t.Fatalf("delete with the region's node down: %v", err)
		}
		names("b deleted, the region's node down", "a")
		if err := s.StartMem(node, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenCatalog(ctx, s.PoolClient(s.Endpoint()), cat.Region().ID(), cat.Region().Key()); err == nil {
			t.Fatal("the region, its node back empty, opens without the mirror")
		}
		names("the region's node back empty", "a") // (repaired as it opens)
		if _, err := OpenCatalog(ctx, s.PoolClient(s.Endpoint()), cat.Region().ID(), cat.Region().Key()); err != nil {
			t.Fatalf("the region, repaired as the catalog was opened: %v", err)
		}
		if _, err := cat.Create(ctx, "c", testLayout(), CreateOptions{Replicas: 2}); err != nil {
			t.Fatalf("create after the region's node came back: %v", err)
		}
		names("repaired", "a", "c")
		plain, err := OpenCatalog(ctx, s.PoolClient(s.Endpoint()), cat.Region().ID(), cat.Region().Key())
		if err != nil {
			t.Fatalf("the region after its repair: %v", err)
		}
		if refs, err := plain.Topics(ctx); err != nil || len(refs) != 2 || refs[0].Name != "a" || refs[1].Name != "c" {
			t.Fatalf("the region after its repair: %+v, %v", refs, err)
		}
		if ok, err := cat.Repair(ctx); ok || err != nil {
			t.Fatalf("a second repair: %v, %v", ok, err)
		}
	})
}
