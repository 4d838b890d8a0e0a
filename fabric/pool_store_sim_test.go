package fabric_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/fabric/ctrlstore"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestSimPoolStoreRestart runs a switch that writes its pool map through
// to a store, restarts it with the same store, and checks that the new
// switch has the regions with their keys, epochs and fences before any
// memory node reported or any client came back; that the nodes' reports
// then settle every copy (the data reads back); that a forged key is
// still refused; and that freeing a region deletes its record.
func TestSimPoolStoreRestart(t *testing.T) {
	const seed = 71
	store := &ctrlstore.Mem{}
	f := newSimFabric(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond},
		fabric.Config{HeartbeatTimeout: time.Second, Store: store})
	f.addPoolNodes(3, 4<<20)
	cli := f.addMembers(1)[0]
	f.net.RunFor(500 * time.Millisecond)
	f.run(func() bool { return !f.sw.PoolRecovering(f.net.Now()) }, 5*time.Second, "the nodes' reports")

	rw := uint8(wire.PermRead | wire.PermWrite)
	rep := f.createPool(cli, ctrl.PoolSpec{Size: 256 << 10, Stripe: 16 << 10, Replicas: 2, Perm: rw})
	one := f.createPool(cli, ctrl.PoolSpec{Size: 64 << 10, Stripe: 16 << 10, Replicas: 1, Perm: rw | uint8(wire.PermAtomic)})
	rng := rand.New(rand.NewPCG(seed, 1))
	refRep, refOne := randomBytes(rng, int(rep.spec.Size)), randomBytes(rng, int(one.spec.Size))
	for _, x := range []struct {
		p   *simPool
		ref []byte
	}{{rep, refRep}, {one, refOne}} {
		if err, _ := x.p.access(endpoint.KindWrite, x.ref, 0, time.Minute); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	fence := wire.Fence{ID: 3, Token: 17}
	var ferr error
	done := false
	cli.post(&endpoint.Op{Kind: endpoint.KindFence, Peer: f.swAddr, Pool: one.spec.Region, Key: one.key, Fence: fence},
		func(op *endpoint.Op) { ferr, done = op.Err, true })
	f.run(func() bool { return done }, time.Minute, "fence raise")
	if ferr != nil {
		t.Fatalf("fence: %v", ferr)
	}
	f.net.RunFor(10 * time.Millisecond)
	for _, p := range []*simPool{rep, one} {
		rec := store.Record(p.spec.Region)
		if rec == nil || rec.Key != p.key || rec.Epoch != 1 || rec.Pool.Size != p.spec.Size || len(rec.Homes) != p.spec.Columns {
			t.Fatalf("region %d's record: %+v", p.spec.Region, rec)
		}
	}
	if fs := store.Record(one.spec.Region).Fences; len(fs) != 1 || fs[0] != fence {
		t.Fatalf("fences recorded: %+v, want %+v", fs, fence)
	}

	f.restartSwitch(300 * time.Millisecond)
	if st := f.sw.Stats(); st.PoolRegionsLoaded != 2 || st.PoolRecordsRefused != 0 {
		t.Fatalf("restarted: %d regions loaded, %d records refused; want 2, 0", st.PoolRegionsLoaded, st.PoolRecordsRefused)
	}
	for _, p := range []*simPool{rep, one} {
		if key, epoch, ok := fabric.RegionKeyEpoch(f.sw, p.spec.Region); !ok || key != p.key || epoch != 1 {
			t.Errorf("region %d before any report: key ok %v, epoch %d, known %v", p.spec.Region, key == p.key, epoch, ok)
		}
	}
	f.run(func() bool { return !f.sw.PoolRecovering(f.net.Now()) }, 5*time.Second, "the nodes' reports after the restart")
	for _, x := range []struct {
		p   *simPool
		ref []byte
	}{{rep, refRep}, {one, refOne}} {
		got := make([]byte, len(x.ref))
		if err, _ := x.p.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, x.ref) {
			t.Fatalf("region %d after the restart: %v, bytes equal %v", x.p.spec.Region, err, bytes.Equal(got, x.ref))
		}
	}
	forged := *rep
	forged.key ^= 1 << 33
	if err, _ := forged.access(endpoint.KindRead, make([]byte, 64), 0, time.Minute); !errors.Is(err, wire.StatusBadKey) {
		t.Errorf("read with a forged key after the restart: %v, want %v", err, wire.StatusBadKey)
	}
	// The fence came back from the store: a request under an older
	// token is refused.
	done = false
	cli.post(&endpoint.Op{Kind: endpoint.KindWrite, Peer: f.swAddr, Pool: one.spec.Region, Key: one.key, Buf: make([]byte, 8),
		Fence: wire.Fence{ID: 3, Token: 16}}, func(op *endpoint.Op) { ferr, done = op.Err, true })
	f.run(func() bool { return done }, time.Minute, "fenced write")
	if !errors.Is(ferr, wire.StatusFenced) {
		t.Errorf("write under an older token after the restart: %v, want %v", ferr, wire.StatusFenced)
	}
	if st := f.sw.Stats(); st.PoolRegionsRecovered != 0 {
		t.Errorf("%d regions rebuilt from reports alone; the store had them all", st.PoolRegionsRecovered)
	}

	done = false
	cli.control(&ctrl.Msg{Type: ctrl.PoolFree, Region: one.spec.Region, Key: one.key}, func(_ *ctrl.Msg, err error) { ferr, done = err, true })
	f.run(func() bool { return done }, time.Minute, "pool free")
	if ferr != nil {
		t.Fatalf("free: %v", ferr)
	}
	f.net.RunFor(10 * time.Millisecond)
	if rec := store.Record(one.spec.Region); rec != nil {
		t.Errorf("freed region %d still recorded: %+v", one.spec.Region, rec)
	}
	if store.Record(rep.spec.Region) == nil {
		t.Errorf("region %d's record gone", rep.spec.Region)
	}
}

// TestStoreRecordsRefused starts a switch on a store whose records
// contradict each other (two regions on one extent) or the switch's
// bounds (another region's id under a key that decodes): the first is
// taken, the others are refused and counted, and the switch serves.
func TestStoreRecordsRefused(t *testing.T) {
	home := netip.MustParseAddrPort("10.0.0.9:7000")
	rec := func(id uint32, base uint64) *ctrlstore.Record {
		key := uint64(id) * 0x9e3779b97f4a7c15
		return &ctrlstore.Record{Region: id, Key: key, Digest: ctrl.PoolKeyDigest(id, key), Epoch: 1,
			Pool:  ctrl.PoolSpec{Size: 8192, Stripe: 4096, Columns: 1, Replicas: 1, Perm: 1},
			Homes: []ctrl.PoolHome{{Addr: home, Base: base}}, Lost: []bool{false}, Rebuilding: []bool{false}}
	}
	store := &ctrlstore.Mem{}
	store.Put(rec(1, 0))
	store.Put(rec(2, 4096)) // overlaps region 1's extent
	store.Put(rec(3, 8192))
	sw, err := fabric.New(fabric.Config{Insecure: true, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	st := sw.Stats()
	if st.PoolRegionsLoaded != 2 || st.PoolRecordsRefused != 1 {
		t.Fatalf("%d regions loaded, %d records refused; want 2, 1", st.PoolRegionsLoaded, st.PoolRecordsRefused)
	}
	var refused []fabric.Event
	for _, e := range sw.Events(nil) {
		if e.Kind == fabric.EventRecordRefused {
			refused = append(refused, e)
		}
	}
	if len(refused) != 1 || refused[0].Region != 2 || !errors.Is(refused[0].Err, ctrl.ErrNoSpace) {
		t.Errorf("refusal events: %+v", refused)
	}
	if _, _, ok := fabric.RegionKeyEpoch(sw, 2); ok {
		t.Error("the refused region is in the map")
	}
}

// TestSimPoolStoreEpochAhead restarts a switch on a store whose record
// of a replicated region has an epoch the memory nodes never heard (the
// switch died between the raise and its POOLEPOCH) and says one copy is
// lost: the nodes' reports decide which copies are current (the region
// is not lost), the copy the store holds lost stays lost and is rebuilt
// from the other at once (the store gave the key: no client needs to
// come first), and the data reads back.
func TestSimPoolStoreEpochAhead(t *testing.T) {
	const seed = 73
	store := &ctrlstore.Mem{}
	f := newSimFabric(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond},
		fabric.Config{HeartbeatTimeout: time.Second, Store: store})
	f.addPoolNodes(3, 4<<20)
	cli := f.addMembers(1)[0]
	f.net.RunFor(500 * time.Millisecond)
	f.run(func() bool { return !f.sw.PoolRecovering(f.net.Now()) }, 5*time.Second, "the nodes' reports")
	rep := f.createPool(cli, ctrl.PoolSpec{Size: 192 << 10, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
	ref := randomBytes(rand.New(rand.NewPCG(seed, 1)), int(rep.spec.Size))
	if err, _ := rep.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
		t.Fatalf("write: %v", err)
	}
	f.net.RunFor(10 * time.Millisecond)
	rec := store.Record(rep.spec.Region)
	if rec == nil || rec.Epoch != 1 {
		t.Fatalf("record: %+v", rec)
	}
	rec.Epoch = 7 // the nodes hold epoch 1
	rec.Lost[1] = true
	store.Put(rec)

	f.restartSwitch(300 * time.Millisecond)
	f.run(func() bool {
		sp, ok := regionSpecs(f.sw)[rep.spec.Region]
		return !f.sw.PoolRecovering(f.net.Now()) && ok && sp.Health == ctrl.HealthOK && f.sw.Stats().PoolRebuilt > 0
	}, 10*time.Second, "the copy the store held lost to be rebuilt")
	if key, _, _ := fabric.RegionKeyEpoch(f.sw, rep.spec.Region); key != rep.key {
		t.Error("after the rebuild: the key is not the region's")
	}
	got := make([]byte, len(ref))
	if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
		t.Fatalf("read after the restart: %v, bytes equal %v", err, bytes.Equal(got, ref))
	}
	f.net.RunFor(10 * time.Millisecond)
	if rec := store.Record(rep.spec.Region); rec == nil || rec.Lost[1] || rec.Epoch == 7 {
		t.Errorf("record after the rebuild: %+v", rec)
	}
}
