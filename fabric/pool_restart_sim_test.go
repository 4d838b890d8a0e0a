package fabric_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// randomBytes is n bytes from rng.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// regionSpecs is the switch's list of regions, by id.
func regionSpecs(sw *fabric.Switch) map[uint32]ctrl.PoolSpec {
	out := map[uint32]ctrl.PoolSpec{}
	for _, sp := range sw.PoolRegions() {
		out[sp.Region] = sp
	}
	return out
}

// TestSimPoolSwitchRestart restarts the switch while a client reads and
// writes a single-copy and a replicated region: the memory nodes report
// what they hold, the new switch rebuilds both regions under their ids
// (new ones get higher ids), every access in flight completes, and every
// byte reads back as written.
func TestSimPoolSwitchRestart(t *testing.T) {
	for _, seed := range []int64{41, 42, 43, 44, 45, 46} {
		link := simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}
		if seed%2 == 0 {
			link.Loss, link.Dup, link.Reorder, link.ReorderDelay = 0.02, 0.02, 0.05, 200*time.Microsecond
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { poolSwitchRestart(t, seed, link) })
	}
}

func poolSwitchRestart(t *testing.T, seed int64, link simnet.LinkConfig) {
	f, _, cli := poolSimSetup(t, seed, link, 3)
	rw := uint8(wire.PermRead | wire.PermWrite)
	rep := f.createPool(cli, ctrl.PoolSpec{Size: 768 << 10, Stripe: 16 << 10, Replicas: 2, Perm: rw})
	one := f.createPool(cli, ctrl.PoolSpec{Size: 192 << 10, Stripe: 16 << 10, Replicas: 1, Perm: rw})
	rng := rand.New(rand.NewPCG(uint64(seed), 9))
	refRep, refOne := randomBytes(rng, int(rep.spec.Size)), randomBytes(rng, int(one.spec.Size))
	for _, x := range []struct {
		p   *simPool
		ref []byte
	}{{rep, refRep}, {one, refOne}} {
		if err, _ := x.p.access(endpoint.KindWrite, x.ref, 0, time.Minute); err != nil {
			t.Fatalf("seed %d: write: %v", seed, err)
		}
	}
	before := regionSpecs(f.sw)

	// Accesses in flight across the restart: writes of fresh bytes to
	// the first half of each region, reads of the second half.
	pending := 0
	var failed []error
	inflight := func(p *simPool, ref []byte) {
		half := uint64(len(ref) / 2)
		exts, err := p.lay.Extents(0, uint64(len(ref)), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range exts {
			op := &endpoint.Op{Peer: f.swAddr, Pool: p.spec.Region, Key: p.key, Addr: e.Off, Lane: uint16(e.Column)}
			want := ref[e.Off : e.Off+e.Len]
			if e.Off < half {
				op.Kind, op.Buf = endpoint.KindWrite, randomBytes(rng, int(e.Len))
				copy(want, op.Buf)
			} else {
				op.Kind, op.Buf = endpoint.KindRead, make([]byte, e.Len)
			}
			pending++
			p.cli.post(op, func(op *endpoint.Op) {
				pending--
				switch {
				case op.Err != nil:
					failed = append(failed, fmt.Errorf("%v at %d: %w", op.Kind, op.Addr, op.Err))
				case op.Kind == endpoint.KindRead && !bytes.Equal(op.Buf, want):
					failed = append(failed, fmt.Errorf("read at %d: wrong bytes", op.Addr))
				}
			})
		}
	}
	inflight(rep, refRep)
	inflight(one, refOne)
	f.net.RunFor(20 * time.Microsecond) // some of them reach the switch
	f.restartSwitch(300 * time.Millisecond)
	f.run(func() bool { return pending == 0 }, time.Minute, "accesses across the switch restart")
	if len(failed) > 0 {
		t.Fatalf("seed %d: %d accesses failed across the restart, first: %v", seed, len(failed), failed[0])
	}

	// The same regions, under the same ids, complete.
	after := regionSpecs(f.sw)
	if len(after) != len(before) {
		t.Fatalf("seed %d: %d regions after the restart, want %d", seed, len(after), len(before))
	}
	for id, sp := range before {
		got, ok := after[id]
		if !ok || got.Size != sp.Size || got.Stripe != sp.Stripe || got.Columns != sp.Columns || got.Replicas != sp.Replicas || got.Perm != sp.Perm {
			t.Fatalf("seed %d: region %d after the restart: %+v, want %+v", seed, id, got, sp)
		}
		if got.Health != ctrl.HealthOK || got.Lost != 0 || got.Down != 0 {
			t.Errorf("seed %d: region %d after the restart: health %v, %d lost, %d down", seed, id, got.Health, got.Lost, got.Down)
		}
	}
	for _, x := range []struct {
		p   *simPool
		ref []byte
	}{{rep, refRep}, {one, refOne}} {
		got := make([]byte, len(x.ref))
		if err, _ := x.p.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, x.ref) {
			t.Fatalf("seed %d: region %d after the restart: err %v, bytes equal %v", seed, x.p.spec.Region, err, bytes.Equal(got, x.ref))
		}
	}
	st := f.sw.Stats()
	if st.PoolRegionsRecovered != 2 || st.PoolDeferred == 0 && st.PoolIn == 0 {
		t.Errorf("seed %d: switch stats after the restart: %d regions recovered (want 2), %d requests in, %d deferred", seed, st.PoolRegionsRecovered, st.PoolIn, st.PoolDeferred)
	}

	// New regions get new ids; a recovered region frees with its key.
	nu := f.createPool(cli, ctrl.PoolSpec{Size: 64 << 10, Stripe: 16 << 10, Replicas: 1, Perm: rw})
	if nu.spec.Region <= max(rep.spec.Region, one.spec.Region) {
		t.Errorf("seed %d: new region got id %d, not above the recovered %d and %d", seed, nu.spec.Region, rep.spec.Region, one.spec.Region)
	}
	var ferr error
	done := false
	cli.control(&ctrl.Msg{Type: ctrl.PoolFree, Region: one.spec.Region, Key: one.key}, func(_ *ctrl.Msg, err error) { ferr, done = err, true })
	f.run(func() bool { return done }, time.Minute, "free")
	if ferr != nil {
		t.Fatalf("seed %d: free of a recovered region: %v", seed, ferr)
	}
	if op := one.one(&endpoint.Op{Kind: endpoint.KindRead, Buf: make([]byte, 64)}); !errors.Is(op.Err, wire.StatusBadKey) {
		t.Errorf("seed %d: read of the freed region: %v, want bad key", seed, op.Err)
	}
	// A wrong key never opens a recovered region.
	if op := rep.oneKey(&endpoint.Op{Kind: endpoint.KindRead, Buf: make([]byte, 64)}, rep.key^1); !errors.Is(op.Err, wire.StatusBadKey) {
		t.Errorf("seed %d: read with a wrong key: %v, want bad key", seed, op.Err)
	}
}

// regionHealth is region id's health as the switch lists it.
func regionHealth(sw *fabric.Switch, id uint32) ctrl.PoolSpec {
	return regionSpecs(sw)[id]
}

// TestSimPoolSwitchRestartStaleCopy: a memory node is away while a
// replicated region is rewritten, so its copy is stale; the switch
// restarts as the node comes back. The reports' epochs tell the stale
// copy from the current one: reads return the new bytes, the stale copy
// is rebuilt, and it then serves reads that match.
func TestSimPoolSwitchRestartStaleCopy(t *testing.T) {
	for _, seed := range []int64{51, 52, 53} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			link := simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}
			if seed != 51 {
				link.Loss, link.Dup, link.Reorder, link.ReorderDelay = 0.01, 0.01, 0.05, 200*time.Microsecond
			}
			f, ns, cli := poolSimSetup(t, seed, link, 3)
			rep := f.createPool(cli, ctrl.PoolSpec{Size: 384 << 10, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
			rng := rand.New(rand.NewPCG(uint64(seed), 3))
			old := randomBytes(rng, int(rep.spec.Size))
			if err, _ := rep.access(endpoint.KindWrite, old, 0, time.Minute); err != nil {
				t.Fatal(err)
			}
			// Node 1 goes away; the region is rewritten without it.
			f.net.Detach(ns[1].addr)
			f.run(func() bool { return regionHealth(f.sw, rep.spec.Region).Down > 0 }, 10*time.Second, "node 1 counted dead")
			cur := randomBytes(rng, int(rep.spec.Size))
			if err, deg := rep.access(endpoint.KindWrite, cur, 0, time.Minute); err != nil || !deg {
				t.Fatalf("seed %d: write without node 1: err %v, degraded %v", seed, err, deg)
			}
			// Node 1 comes back (same process, stale copy) as the
			// switch restarts.
			f.net.Attach(ns[1].addr, ns[1], f.link, f.link)
			f.restartSwitch(200 * time.Millisecond)
			got := make([]byte, len(cur))
			if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, cur) {
				t.Fatalf("seed %d: read after the restart: err %v, current bytes %v, stale bytes %v", seed, err, bytes.Equal(got, cur), bytes.Equal(got, old))
			}
			if h := regionHealth(f.sw, rep.spec.Region); h.Lost == 0 && f.sw.Stats().PoolRebuilt == 0 {
				t.Fatalf("seed %d: node 1's stale copy taken for current: %+v", seed, h)
			}
			f.run(func() bool { return regionHealth(f.sw, rep.spec.Region).Health == ctrl.HealthOK }, time.Minute, "the stale copy rebuilt")
			// Without node 0, the stripes whose other copy is on node 1
			// are read from the rebuilt copy.
			f.net.Detach(ns[0].addr)
			f.run(func() bool { return regionHealth(f.sw, rep.spec.Region).Down > 0 }, 10*time.Second, "node 0 counted dead")
			clear(got)
			if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, cur) {
				t.Fatalf("seed %d: read from the rebuilt copy: err %v, equal %v", seed, err, bytes.Equal(got, cur))
			}
		})
	}
}

// TestSimPoolSwitchRestartLostRegion: a single-copy region's memory node
// is away when the switch restarts: the region is listed unavailable
// (its node named by the other nodes' reports); the node then comes back
// restarted, its memory gone, and the region is listed lost and reported
// lost by name, never silently forgotten. The other columns still serve.
func TestSimPoolSwitchRestartLostRegion(t *testing.T) {
	const seed = 61
	f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 3)
	one := f.createPool(cli, ctrl.PoolSpec{Size: 192 << 10, Stripe: 16 << 10, Replicas: 1, Perm: uint8(wire.PermRead | wire.PermWrite)})
	rng := rand.New(rand.NewPCG(seed, 3))
	ref := randomBytes(rng, int(one.spec.Size))
	if err, _ := one.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	f.net.Detach(ns[2].addr)
	f.restartSwitch(100 * time.Millisecond)
	f.net.RunFor(3 * time.Second) // past the recovery window
	h := regionHealth(f.sw, one.spec.Region)
	if h.Region != one.spec.Region || h.Health != ctrl.HealthUnavailable || h.Down != 1 {
		t.Fatalf("seed %d: region with its node away after the restart: %+v, want unavailable with 1 column down", seed, h)
	}
	// Column 0 is on node 0: still served.
	got := make([]byte, 16<<10)
	if op := one.one(&endpoint.Op{Kind: endpoint.KindRead, Addr: 0, Buf: got}); op.Err != nil || !bytes.Equal(got, ref[:16<<10]) {
		t.Fatalf("seed %d: read of a column whose node reported: %v", seed, op.Err)
	}
	ns[2].restart()
	f.net.Attach(ns[2].addr, ns[2], f.link, f.link)
	f.run(func() bool { return regionHealth(f.sw, one.spec.Region).Health == ctrl.HealthLost }, 10*time.Second, "the region listed lost")
	lost := false
	for _, e := range f.sw.Events(nil) {
		lost = lost || e.Kind == fabric.EventRegionLost && e.Region == one.spec.Region
	}
	if !lost {
		t.Errorf("seed %d: no region-lost event for region %d", seed, one.spec.Region)
	}
	if op := one.one(&endpoint.Op{Kind: endpoint.KindRead, Addr: 2 * 16 << 10, Buf: got}); !errors.Is(op.Err, wire.StatusLost) {
		t.Errorf("seed %d: read of the lost column: %v, want lost", seed, op.Err)
	}
}

// TestSimLentRegionOnlyThroughPool: the region a memory node lends to the
// pool is reachable only through the switch's pool path, region by region
// with each region's key: a one-sided request straight to the node with
// the lent region's key (which its registration carries) is refused and
// changes nothing.
func TestSimLentRegionOnlyThroughPool(t *testing.T) {
	const seed = 71
	f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 1)
	p := f.createPool(cli, ctrl.PoolSpec{Size: 4096, Stripe: 4096, Replicas: 1, Perm: uint8(wire.PermRead | wire.PermWrite)})
	ref := bytes.Repeat([]byte{0x5a}, 4096)
	if err, _ := p.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, k := range []endpoint.Kind{endpoint.KindRead, endpoint.KindWrite} {
		op := &endpoint.Op{Kind: k, Peer: ns[0].addr, Key: ns[0].key, Addr: 0, Buf: make([]byte, 4096)}
		done := false
		cli.post(op, func(*endpoint.Op) { done = true })
		f.run(func() bool { return done }, time.Minute, "direct access to the lent region")
		if !errors.Is(op.Err, wire.StatusBadKey) {
			t.Fatalf("seed %d: direct %v of the lent region: %v, want bad key", seed, k, op.Err)
		}
	}
	if n := ns[0].core.Stats().Server.LentRefused; n != 2 {
		t.Errorf("seed %d: %d direct requests counted refused, want 2", seed, n)
	}
	got := make([]byte, 4096)
	if err, _ := p.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
		t.Fatalf("seed %d: the region after the refused direct write: err %v, unchanged %v", seed, err, bytes.Equal(got, ref))
	}
}

// TestSimPoolGrantsOnlyFromSwitchRole: a memory node that knows its
// peers' certified identities takes grants only from a peer certified as
// a switch: while the switch's address is certified as something else,
// no region can be created on the node.
func TestSimPoolGrantsOnlyFromSwitchRole(t *testing.T) {
	const seed = 81
	f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 1)
	role := secure.RoleClient
	ns[0].core.Server().SetIdentities(func(a netip.AddrPort) (secure.Cert, bool) {
		return secure.Cert{Role: role, Name: "at the switch's address"}, a == f.swAddr
	})
	var gerr error
	done := false
	cli.control(&ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 4096, Stripe: 4096, Replicas: 1, Perm: 3}}, func(_ *ctrl.Msg, err error) { gerr, done = err, true })
	f.run(func() bool { return done }, time.Minute, "create with grants refused")
	if gerr == nil {
		t.Fatalf("seed %d: a region was created although the node refused the grant", seed)
	}
	role = secure.RoleSwitch
	p := f.createPool(cli, ctrl.PoolSpec{Size: 4096, Stripe: 4096, Replicas: 1, Perm: 3})
	buf := bytes.Repeat([]byte{7}, 4096)
	if err, _ := p.access(endpoint.KindWrite, buf, 0, time.Minute); err != nil {
		t.Fatalf("seed %d: write once the switch is certified as one: %v", seed, err)
	}
}

// TestSimPoolRebuildWithoutClient: a replicated region's memory node
// restarts (its copy gone) while the switch restarts too, and no client
// touches the region afterwards. On a fabric whose nodes verified the
// switch's credential, the nodes' reports carry the region's key and the
// new switch rebuilds the lost copy on its own; on one that does not
// seal they carry only its digest, and the rebuild waits for the first
// client request that brings the key.
func TestSimPoolRebuildWithoutClient(t *testing.T) {
	for _, sealed := range []bool{true, false} {
		t.Run(fmt.Sprint("sealed=", sealed), func(t *testing.T) {
			const seed = 91
			f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 3)
			roles := func(sw *fabric.Switch) {
				if !sealed {
					return
				}
				sw.SetIdentities(func(a netip.AddrPort) (secure.Cert, bool) {
					for _, n := range ns {
						if a == n.addr {
							return secure.Cert{Role: secure.RoleMemoryNode, Name: "memory"}, true
						}
					}
					return secure.Cert{Role: secure.RoleClient, Name: "client"}, true
				})
				for _, n := range ns {
					n.core.Server().SetIdentities(func(a netip.AddrPort) (secure.Cert, bool) {
						return secure.Cert{Role: secure.RoleSwitch, Name: "switch"}, a == f.swAddr
					})
				}
			}
			roles(f.sw)
			rep := f.createPool(cli, ctrl.PoolSpec{Size: 384 << 10, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
			ref := randomBytes(rand.New(rand.NewPCG(seed, 3)), int(rep.spec.Size))
			if err, _ := rep.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
				t.Fatal(err)
			}
			// Node 1 restarts, its memory gone, while the switch does.
			f.net.Detach(ns[1].addr)
			f.restartSwitch(200 * time.Millisecond)
			ns[1].restart()
			roles(f.sw)
			f.net.Attach(ns[1].addr, ns[1], f.link, f.link)
			healthy := func() bool {
				h := regionHealth(f.sw, rep.spec.Region)
				return h.Region == rep.spec.Region && h.Health == ctrl.HealthOK && h.Lost == 0
			}
			f.net.RunFor(10 * time.Second)
			if got := healthy(); got != sealed {
				t.Fatalf("seed %d: 10 s after the restarts, no client request: healthy %v, want %v (%+v; %d rebuilt)",
					seed, got, sealed, regionHealth(f.sw, rep.spec.Region), f.sw.Stats().PoolRebuilt)
			}
			got := make([]byte, len(ref))
			if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
				t.Fatalf("seed %d: read after the restarts: %v, equal %v", seed, err, bytes.Equal(got, ref))
			}
			f.run(healthy, time.Minute, "the lost copy rebuilt")
			// Node 0 away: the stripes whose other copy is on node 1
			// come from the rebuilt copy.
			f.net.Detach(ns[0].addr)
			f.run(func() bool { return regionHealth(f.sw, rep.spec.Region).Down > 0 }, 10*time.Second, "node 0 counted dead")
			clear(got)
			if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
				t.Fatalf("seed %d: read from the rebuilt copy: %v, equal %v", seed, err, bytes.Equal(got, ref))
			}
		})
	}
}
