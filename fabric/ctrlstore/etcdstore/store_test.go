package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ndma/ndma/fabric/ctrlstore"
	"github.com/ndma/ndma/wire/ctrl"
)

// record is a valid record of region id at epoch.
func record(id uint32, epoch uint64) *ctrlstore.Record {
	key := uint64(id)<<32 | 0xabcdef
	return &ctrlstore.Record{Region: id, Key: key, Digest: ctrl.PoolKeyDigest(id, key), Epoch: epoch,
		Pool:  ctrl.PoolSpec{Region: id, Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 3},
		Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("127.0.0.1:9000"), Base: uint64(id) * 4096}},
		Lost:  []bool{false}, Rebuilding: []bool{false}}
}

// client is a plain etcd client of te, closed when the test ends.
func client(t *testing.T, te *testEtcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{te.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func open(t *testing.T, te *testEtcd, cfg Config) *Store {
	t.Helper()
	cfg.Endpoints = []string{te.Endpoint()}
	if cfg.Name == "" {
		cfg.Name = "127.0.0.1:7471"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitFor polls cond every 20 ms until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// get is the value at key ("" if none).
func get(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return ""
	}
	return string(r.Kvs[0].Value)
}

func put(t *testing.T, cli *clientv3.Client, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, val); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRoundTrip writes records through one store and reads them
// back with another on the same prefix (not another prefix's); a freed
// region's record is deleted.
func TestStoreRoundTrip(t *testing.T) {
	te := startEtcd(t)
	s := open(t, te, Config{Prefix: "/a"})
	for id := range uint32(3) {
		s.Put(record(id+1, 1))
	}
	s.Put(record(2, 5))
	s.Delete(3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Backlog != 0 || st.Conflicts != 0 || st.Foreign != 0 {
		t.Fatalf("after close: %+v", st)
	}
	s2 := open(t, te, Config{Prefix: "/a/"})
	defer s2.Close()
	got := s2.Regions()
	if len(got) != 2 || got[0].Region != 1 || got[1].Region != 2 || got[1].Epoch != 5 || got[0].Key != record(1, 1).Key {
		t.Fatalf("read back: %+v", got)
	}
	other := open(t, te, Config{Prefix: "/b/", Name: "other"})
	defer other.Close()
	if n := len(other.Regions()); n != 0 {
		t.Errorf("another prefix holds %d regions", n)
	}
}

// TestLivenessLeaseExpires checks the switch's liveness key: there while
// the store runs, gone once its lease expires after the switch stopped
// without closing the store (a crash), and gone at once after a Close.
func TestLivenessLeaseExpires(t *testing.T) {
	te := startEtcd(t)
	cli := client(t, te)
	s := open(t, te, Config{Name: "sw1", LeaseTTL: 2 * time.Second})
	key := s.LivenessKey()
	if got := get(t, cli, key); got != "sw1" {
		t.Fatalf("liveness key %s = %q while the switch runs", key, got)
	}
	time.Sleep(2500 * time.Millisecond) // past the TTL: kept alive
	if got := get(t, cli, key); got != "sw1" {
		t.Fatalf("liveness key %s = %q past its TTL while the switch runs", key, got)
	}
	s.crash()
	waitFor(t, 10*time.Second, "the crashed switch's liveness key to expire", func() bool { return get(t, cli, key) == "" })

	s2 := open(t, te, Config{Name: "sw2", LeaseTTL: time.Minute})
	if get(t, cli, s2.LivenessKey()) == "" {
		t.Fatal("no liveness key")
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, cli, s2.LivenessKey()); got != "" {
		t.Errorf("liveness key after Close: %q", got)
	}
}

// crash stops the store as a killed switch would: no more keep-alives or
// writes, the lease not revoked.
func (s *Store) crash() {
	s.cancel()
	s.wg.Wait()
	s.cli.Close()
}

// TestHostileRecords puts values under the prefix that are not a
// region's record, before a store opens and while it runs: each is
// refused with an error and counted; the valid record is read.
func TestHostileRecords(t *testing.T) {
	te := startEtcd(t)
	cli := client(t, te)
	good := record(4, 2)
	put(t, cli, "/ndma/region/0000000004", string(ctrlstore.AppendRecord(nil, good)))
	put(t, cli, "/ndma/region/0000000005", "not a record")
	put(t, cli, "/ndma/region/0000000006", string(ctrlstore.AppendRecord(nil, record(7, 1)))) // another region's
	put(t, cli, "/ndma/region/x", string(ctrlstore.AppendRecord(nil, record(8, 1))))
	bad := ctrlstore.AppendRecord(nil, record(9, 1))
	bad[30] ^= 0xff
	put(t, cli, "/ndma/region/0000000009", string(bad))
	s := open(t, te, Config{})
	defer s.Close()
	if got := s.Regions(); len(got) != 1 || got[0].Region != 4 || got[0].Epoch != 2 {
		t.Fatalf("regions read: %+v", got)
	}
	if st := s.Stats(); st.Refused != 4 {
		t.Fatalf("%d records refused, want 4", st.Refused)
	}
	put(t, cli, "/ndma/region/0000000010", "\x00\xff garbage")
	waitFor(t, 5*time.Second, "the watch to refuse a record", func() bool { st := s.Stats(); return st.Refused == 5 && st.Foreign == 1 })
	// A region another writer changed is not written over.
	put(t, cli, "/ndma/region/0000000004", string(ctrlstore.AppendRecord(nil, record(4, 9))))
	waitFor(t, 5*time.Second, "the watch to see the change", func() bool { return s.Stats().Foreign == 2 })
	s.Put(record(4, 3))
	waitFor(t, 5*time.Second, "the write to be settled", func() bool { return s.Stats().Backlog == 0 })
	r, err := ctrlstore.ParseRecord([]byte(get(t, cli, "/ndma/region/0000000004")))
	if err != nil || r.Epoch != 9 {
		t.Errorf("region 4 after another writer's change: %+v, %v; want its epoch 9", r, err)
	}
}

// TestConflict has two stores write the same region: the second one's
// transaction finds the key changed since it read it and does not
// overwrite it.
func TestConflict(t *testing.T) {
	te := startEtcd(t)
	cli := client(t, te)
	a := open(t, te, Config{Name: "a"})
	defer a.Close()
	a.Put(record(1, 1))
	waitFor(t, 5*time.Second, "a's write", func() bool { return a.Stats().Written == 1 })
	b := open(t, te, Config{Name: "b"}) // reads region 1 at a's revision
	defer b.Close()
	a.Put(record(1, 2))
	waitFor(t, 5*time.Second, "a's second write", func() bool { return a.Stats().Written == 2 })
	b.Put(record(1, 7))
	waitFor(t, 5*time.Second, "b's conflict", func() bool { return b.Stats().Conflicts+b.Stats().Foreign > 0 && b.Stats().Backlog == 0 })
	r, err := ctrlstore.ParseRecord([]byte(get(t, cli, "/ndma/region/0000000001")))
	if err != nil || r.Epoch != 2 {
		t.Fatalf("region 1: %+v, %v; want a's epoch 2", r, err)
	}
}

// TestBacklogEtcdDown stops etcd under a running store: the switch's
// changes queue, one entry per region however many changes it makes,
// and are written once etcd is back, the latest of each region.
func TestBacklogEtcdDown(t *testing.T) {
	te := startEtcd(t)
	px := newCutProxy(t, te.Endpoint())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Endpoints: []string{px.addr}, Name: "sw", DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Put(record(1, 1))
	waitFor(t, 5*time.Second, "the first write", func() bool { return s.Stats().Written == 1 })
	px.cut()
	const regions, changes = 5, 200
	for e := range uint64(changes) {
		for id := range uint32(regions) {
			s.Put(record(id+1, e+2))
		}
	}
	// One change per region queued, and one being written.
	if st := s.Stats(); st.Backlog > regions+1 || st.Backlog < regions {
		t.Fatalf("backlog %d after %d changes of %d regions with etcd cut off", st.Backlog, regions*changes, regions)
	}
	waitFor(t, 5*time.Second, "a write to fail", func() bool { return s.Stats().Failed > 0 })
	if st := s.Stats(); st.Backlog < regions {
		t.Fatalf("with etcd cut off: %+v", st)
	}
	px.mend()
	waitFor(t, 15*time.Second, "the backlog to drain", func() bool { return s.Stats().Backlog == 0 })
	cli := client(t, te)
	for id := range uint32(regions) {
		r, err := ctrlstore.ParseRecord([]byte(get(t, cli, fmt.Sprintf("/ndma/region/%010d", id+1))))
		if err != nil || r.Epoch != changes+1 {
			t.Errorf("region %d after etcd came back: %+v, %v; want epoch %d", id+1, r, err, changes+1)
		}
	}
	if st := s.Stats(); st.Conflicts != 0 || st.Foreign != 0 || st.Dropped != 0 {
		t.Errorf("after the backlog drained: %+v", st)
	}
}

// TestQueueBound fills a queue past its bound: a new region is refused,
// a queued one still takes its newer change; a change that could not be
// written goes back in front unless a newer one is queued.
func TestQueueBound(t *testing.T) {
	var q queue
	q.init(2)
	if !q.push(1, []byte("a")) || !q.push(2, []byte("b")) || q.push(3, []byte("c")) {
		t.Fatal("bound of 2 not kept")
	}
	if !q.push(1, []byte("a2")) || q.len() != 2 {
		t.Fatal("a queued region's newer change refused")
	}
	id, val, _ := q.pop()
	if id != 1 || string(val) != "a2" {
		t.Fatalf("popped %d %q", id, val)
	}
	q.retry(1, val)
	if id, _, _ := q.pop(); id != 1 {
		t.Fatalf("retried change not first: %d", id)
	}
	q.push(2, nil)
	q.retry(2, []byte("b"))
	if id, val, _ := q.pop(); id != 2 || val != nil {
		t.Fatalf("retry replaced a newer change: %d %q", id, val)
	}
	if _, _, ok := q.pop(); ok {
		t.Fatal("queue not empty")
	}
}

// TestConfig refuses configurations without endpoints or a name.
func TestConfig(t *testing.T) {
	for _, c := range []Config{{Name: "x"}, {Endpoints: []string{"127.0.0.1:1"}}, {Endpoints: []string{"127.0.0.1:1"}, Name: "a/b"},
		{Endpoints: []string{"127.0.0.1:1"}, Name: "x", LeaseTTL: -1}} {
		if _, err := Open(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("Open(%+v): %v, want ErrConfig", c, err)
		}
	}
}
