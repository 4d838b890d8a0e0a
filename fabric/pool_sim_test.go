package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
	"github.com/ndma/ndma/wire/poolmap"
)

// simPoolNode is a memory node on simnet (internal/memtest's SimNode: a
// memnode/node Core serving the switch's pool requests from a lent
// region, offering it again every heartbeat).
type simPoolNode struct {
	*memtest.SimNode
	f    *simFabric
	core *node.Core
	addr netip.AddrPort
	key  uint64
	size int
	inc  uint64 // incarnation
}

func (f *simFabric) addPoolNodes(k, size int) []*simPoolNode {
	var ns []*simPoolNode
	for i := range k {
		n := &simPoolNode{f: f, size: size, inc: uint64(i + 1),
			addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, 0, byte(i)}), 4791)}
		n.boot(uint64(f.seed)*7000 + uint64(i) + 1)
		f.net.Attach(n.addr, n, f.link, f.link)
		ns = append(ns, n)
	}
	return ns
}

// boot gives the node a fresh store and core (a process start): the
// region keeps its key, as a key file would, but its memory is new.
func (n *simPoolNode) boot(seed uint64) {
	f := n.f
	sn, err := memtest.NewSimNode(memtest.SimConfig{Switch: f.swAddr, Token: f.token, Size: n.size, Key: n.key,
		Incarnation: n.inc, Every: f.hb, Transport: transport.Config{MTU: 9000, Seed: seed}})
	if err != nil {
		f.t.Fatal(err)
	}
	n.SimNode, n.core, n.key = sn, sn.Core, sn.Key
}

// restart starts the node again in a new incarnation: its memory is gone.
func (n *simPoolNode) restart() {
	n.inc += 1000
	n.boot(n.inc)
	n.f.net.Wake(n.addr)
}

// simPool drives pool accesses from one client member.
type simPool struct {
	f    *simFabric
	cli  *simMember
	spec ctrl.PoolSpec
	key  uint64
	lay  poolmap.Layout
}

func (f *simFabric) createPool(cli *simMember, spec ctrl.PoolSpec) *simPool {
	f.t.Helper()
	var got *ctrl.Msg
	var gerr error
	cli.control(&ctrl.Msg{Type: ctrl.PoolCreate, Pool: spec}, func(r *ctrl.Msg, err error) { got, gerr = r, err })
	f.run(func() bool { return got != nil || gerr != nil }, time.Minute, "pool create")
	if gerr != nil {
		f.t.Fatalf("seed %d: create: %v", f.seed, gerr)
	}
	p := got.Pool
	p.Region = got.Region
	lay, err := poolmap.NewLayout(p.Size, p.Stripe, p.Columns, p.Replicas)
	if err != nil {
		f.t.Fatal(err)
	}
	// As Endpoint.PoolCreate does: the open that proves the client's
	// address again to a switch that forgot it.
	proof, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolOpen, Region: p.Region, Key: got.Key}, f.token)
	if err != nil {
		f.t.Fatal(err)
	}
	cli.core.SetPoolProof(f.swAddr, proof)
	return &simPool{f: f, cli: cli, spec: p, key: got.Key, lay: lay}
}

// access runs op kind k over buf at off, split at stripes, and waits for
// every piece; it returns the first error and whether a write degraded.
func (p *simPool) access(k endpoint.Kind, buf []byte, off uint64, limit time.Duration) (error, bool) {
	exts, err := p.lay.Extents(off, uint64(len(buf)), 0, nil)
	if err != nil {
		p.f.t.Fatal(err)
	}
	left := len(exts)
	var first error
	degraded := false
	for _, e := range exts {
		op := &endpoint.Op{Kind: k, Peer: p.f.swAddr, Pool: p.spec.Region, Key: p.key, Addr: e.Off,
			Lane: uint16(e.Column), Buf: buf[e.Off-off : e.Off-off+e.Len]}
		p.cli.post(op, func(op *endpoint.Op) {
			left--
			if op.Err != nil && first == nil {
				first = op.Err
			}
			degraded = degraded || op.Degraded
		})
	}
	if err := p.f.net.RunUntil(func() bool { return left == 0 }, limit); err != nil {
		p.f.t.Fatalf("seed %d: pool access: %v\nclient %+v, %d ops outstanding\nswitch %+v", p.f.seed, err, p.cli.core.PoolStats(), p.cli.core.Outstanding(), p.f.sw.Stats())
	}
	return first, degraded
}

func (p *simPool) one(op *endpoint.Op) *endpoint.Op { return p.oneKey(op, 0) }

// oneKey runs op with key (0: the region's) and waits for it.
func (p *simPool) oneKey(op *endpoint.Op, key uint64) *endpoint.Op {
	if key == 0 {
		key = p.key
	}
	op.Peer, op.Pool, op.Key = p.f.swAddr, p.spec.Region, key
	done := false
	p.cli.post(op, func(*endpoint.Op) { done = true })
	p.f.run(func() bool { return done }, time.Minute, "pool op")
	return op
}

func poolSimSetup(t *testing.T, seed int64, link simnet.LinkConfig, nodes int) (*simFabric, []*simPoolNode, *simMember) {
	return poolSimSetupSize(t, seed, link, nodes, 4<<20)
}

func poolSimSetupSize(t *testing.T, seed int64, link simnet.LinkConfig, nodes, size int) (*simFabric, []*simPoolNode, *simMember) {
	f := newSimFabric(t, seed, link, fabric.Config{HeartbeatTimeout: time.Second})
	ns := f.addPoolNodes(nodes, size)
	cli := f.addMembers(1)[0]
	f.net.RunFor(500 * time.Millisecond) // the nodes lend their memory
	f.run(func() bool { return !f.sw.PoolRecovering(f.net.Now()) }, 5*time.Second, "the nodes' reports")
	return f, ns, cli
}

// TestSimPoolLossDup runs pool reads, writes, atomics and vector ops over
// links that lose, duplicate and reorder datagrams: the data must come
// back exact and no mutating request may be applied twice.
func TestSimPoolLossDup(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		link := simnet.LinkConfig{Rate: 1e9, Latency: 20 * time.Microsecond, Loss: 0.05, Dup: 0.03, Reorder: 0.05, ReorderDelay: 200 * time.Microsecond}
		f, ns, cli := poolSimSetup(t, seed, link, 4)
		p := f.createPool(cli, ctrl.PoolSpec{Size: 2 << 20, Stripe: 32 << 10, Replicas: 1, Perm: uint8(wire.PermAll)})
		rng := rand.New(rand.NewPCG(uint64(seed), 9))
		data := make([]byte, p.spec.Size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if err, _ := p.access(endpoint.KindWrite, data, 0, time.Minute); err != nil {
			t.Fatalf("seed %d: write: %v", seed, err)
		}
		got := make([]byte, len(data))
		if err, _ := p.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("seed %d: read back: %v, equal %v", seed, err, bytes.Equal(got, data))
		}
		// Fetch-adds: each applied exactly once despite loss and duplicates.
		const adds = 200
		left := adds
		for range adds {
			op := &endpoint.Op{Kind: endpoint.KindFetchAdd, Peer: f.swAddr, Pool: p.spec.Region, Key: p.key, Addr: 64 << 10, Add: 1}
			cli.post(op, func(op *endpoint.Op) {
				if op.Err != nil {
					t.Errorf("seed %d: fetch-add: %v", seed, op.Err)
				}
				left--
			})
		}
		f.run(func() bool { return left == 0 }, time.Minute, "fetch-adds")
		// Vector adds of ones over 3 stripes, 10 times.
		ones := make([]byte, 96<<10)
		for i := 0; i < len(ones); i += 8 {
			binary.LittleEndian.PutUint64(ones[i:], 1)
		}
		vecOff := uint64(1 << 20)
		want := make([]byte, len(ones))
		copy(want, data[vecOff:])
		for range 10 {
			exts, _ := p.lay.Extents(vecOff, uint64(len(ones)), 0, nil)
			n := len(exts)
			for _, e := range exts {
				op := &endpoint.Op{Kind: endpoint.KindVector, Peer: f.swAddr, Pool: p.spec.Region, Key: p.key, Addr: e.Off,
					Lane: uint16(e.Column), Dtype: wire.DtypeI64, Alu: wire.AluAdd, Buf: ones[e.Off-vecOff : e.Off-vecOff+e.Len]}
				cli.post(op, func(op *endpoint.Op) {
					if op.Err != nil {
						t.Errorf("seed %d: vector: %v", seed, op.Err)
					}
					n--
				})
			}
			f.run(func() bool { return n == 0 }, time.Minute, "vector adds")
		}
		for i := 0; i < len(want); i += 8 {
			binary.LittleEndian.PutUint64(want[i:], binary.LittleEndian.Uint64(want[i:])+10)
		}
		check := make([]byte, 8)
		if err, _ := p.access(endpoint.KindRead, check, 64<<10, time.Minute); err != nil {
			t.Fatal(err)
		}
		wantCount := binary.LittleEndian.Uint64(data[64<<10:]) + adds
		if c := binary.LittleEndian.Uint64(check); c != wantCount {
			t.Errorf("seed %d: counter %d after %d fetch-adds, want %d", seed, c, adds, wantCount)
		}
		vec := make([]byte, len(ones))
		if err, _ := p.access(endpoint.KindRead, vec, vecOff, time.Minute); err != nil || !bytes.Equal(vec, want) {
			t.Errorf("seed %d: vector adds applied wrongly (err %v)", seed, err)
		}
		var dups uint64
		for _, n := range ns {
			dups += n.core.Stats().Server.Pool.Duplicates
		}
		st := cli.core.PoolStats()
		t.Logf("seed %d: client %+v; duplicates answered from the nodes' caches: %d; net %+v", seed, st, dups, f.net.Stats())
		if st.Retransmits == 0 || dups == 0 {
			t.Errorf("seed %d: no retransmission or duplicate happened: the test did not test loss", seed)
		}
	}
}

// TestSimPoolReplicaFailover kills a memory node in the middle of a
// read/write workload on a replicated region: reads fail over to the
// surviving copies, writes report degraded, and every byte matches the
// reference at the end. A region with one copy on the dead node reports a
// clear error for the ranges it held.
func TestSimPoolReplicaFailover(t *testing.T) {
	const seed = 7
	link := simnet.LinkConfig{Rate: 1e9, Latency: 20 * time.Microsecond}
	f, ns, cli := poolSimSetup(t, seed, link, 3)
	p := f.createPool(cli, ctrl.PoolSpec{Size: 1 << 20, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
	single := f.createPool(cli, ctrl.PoolSpec{Size: 256 << 10, Stripe: 16 << 10, Replicas: 1, Perm: uint8(wire.PermRead | wire.PermWrite)})
	if p.spec.Columns != 3 {
		t.Fatalf("columns %d", p.spec.Columns)
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	ref := make([]byte, p.spec.Size)
	for i := range ref {
		ref[i] = byte(rng.Uint32())
	}
	if err, _ := p.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	degraded := 0
	for step := range 60 {
		if step == 20 {
			f.net.Detach(ns[1].addr) // node 1 dies mid-workload
			t.Logf("seed %d: node 1 killed at %v", seed, f.net.Elapsed())
		}
		off := uint64(rng.IntN(int(p.spec.Size) - 40<<10))
		n := 1 + rng.IntN(40<<10)
		if rng.IntN(2) == 0 {
			chunk := make([]byte, n)
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
			err, deg := p.access(endpoint.KindWrite, chunk, off, time.Minute)
			if err != nil {
				t.Fatalf("seed %d step %d: write: %v", seed, step, err)
			}
			if deg {
				degraded++
			}
			copy(ref[off:], chunk)
		} else {
			got := make([]byte, n)
			if err, _ := p.access(endpoint.KindRead, got, off, time.Minute); err != nil || !bytes.Equal(got, ref[off:off+uint64(n)]) {
				t.Fatalf("seed %d step %d: read [%d,+%d): %v, equal %v", seed, step, off, n, err, bytes.Equal(got, ref[off:off+uint64(n)]))
			}
		}
	}
	all := make([]byte, len(ref))
	if err, _ := p.access(endpoint.KindRead, all, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if crc32.ChecksumIEEE(all) != crc32.ChecksumIEEE(ref) {
		t.Fatalf("seed %d: region checksum differs from the reference after the failover", seed)
	}
	if degraded == 0 {
		t.Errorf("seed %d: no write reported degraded after a replica died", seed)
	}
	// One copy: the stripes on node 1 fail clearly, the others work.
	deadStripe, liveStripe := -1, -1
	homes := f.sw.PoolHomes(single.spec.Region)
	for s := range int(single.lay.Stripes()) {
		exts, _ := single.lay.Extents(uint64(s)*single.spec.Stripe, 1, 0, nil)
		dead := homes[exts[0].Column] == ns[1].addr
		if dead && deadStripe < 0 {
			deadStripe = s
		}
		if !dead && liveStripe < 0 {
			liveStripe = s
		}
	}
	b := make([]byte, 100)
	if err, _ := single.access(endpoint.KindRead, b, uint64(deadStripe)*single.spec.Stripe, time.Minute); !errors.Is(err, wire.StatusMemberDead) {
		t.Errorf("seed %d: read of a single-copy stripe on the dead node: %v, want member dead", seed, err)
	}
	if err, _ := single.access(endpoint.KindRead, b, uint64(liveStripe)*single.spec.Stripe, time.Minute); err != nil {
		t.Errorf("seed %d: read of a live stripe: %v", seed, err)
	}
}

// TestSimPoolKeyChecks: a wrong key, a freed region, an address out of
// range, a missing permission and a request crossing a stripe are refused
// at the switch; requests forged to look forwarded are refused again at
// the memory node (wrong key, outside the grant, revoked grant), and ones
// not from the switch are dropped.
func TestSimPoolKeyChecks(t *testing.T) {
	f, ns, cli := poolSimSetup(t, 11, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 2)
	p := f.createPool(cli, ctrl.PoolSpec{Size: 256 << 10, Stripe: 64 << 10, Replicas: 1, Perm: uint8(wire.PermAll)})
	ro := f.createPool(cli, ctrl.PoolSpec{Size: 64 << 10, Stripe: 64 << 10, Replicas: 1, Perm: uint8(wire.PermRead)})
	served := func() (n uint64) {
		for _, nd := range ns {
			n += nd.core.Stats().Server.Pool.Served
		}
		return n
	}
	before, refusedBefore := served(), f.sw.Stats().PoolRefused
	cases := []struct {
		name string
		pool *simPool
		op   *endpoint.Op
		want wire.Status
	}{
		{"wrong key", p, &endpoint.Op{Kind: endpoint.KindRead, Buf: make([]byte, 8), Key: p.key ^ 1}, wire.StatusBadKey},
		{"out of range", p, &endpoint.Op{Kind: endpoint.KindRead, Buf: make([]byte, 8), Addr: 256<<10 - 4}, wire.StatusOutOfBounds},
		{"far out of range", p, &endpoint.Op{Kind: endpoint.KindWrite, Buf: make([]byte, 8), Addr: ^uint64(0) - 3}, wire.StatusOutOfBounds},
		{"crosses a stripe", p, &endpoint.Op{Kind: endpoint.KindRead, Buf: make([]byte, 16), Addr: 64<<10 - 8}, wire.StatusBadOperand},
		{"read-only", ro, &endpoint.Op{Kind: endpoint.KindWrite, Buf: make([]byte, 8)}, wire.StatusPermission},
		{"no atomics", ro, &endpoint.Op{Kind: endpoint.KindFetchAdd, Add: 1}, wire.StatusPermission},
	}
	for _, c := range cases {
		if op := c.pool.oneKey(c.op, c.op.Key); !errors.Is(op.Err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, op.Err, c.want)
		}
	}
	if served() != before {
		t.Errorf("memory nodes served %d refused requests", served()-before)
	}
	if d := f.sw.Stats().PoolRefused - refusedBefore; d != uint64(len(cases)) {
		t.Errorf("switch refused %d, want %d", d, len(cases))
	}

	// Forged "forwarded" requests straight to a node, once its startup
	// grace (requests for regions it has no grant of go unanswered) is over.
	f.net.RunFor(2 * time.Second)
	node := ns[0]
	homes := f.sw.PoolHomes(p.spec.Region)
	if homes[0] != node.addr {
		node = ns[1]
	}
	forge := func(from netip.AddrPort, region uint32, key, addr uint64) (wire.Status, bool) {
		h := wire.Header{Version: wire.Version, Op: wire.OpRead, Mode: wire.ModePool, Flags: wire.FlagReplyTo,
			Group: region, MsgID: 1, Key: key, Addr: addr, Operand1: 8, MsgLen: wire.ReplyToLen}
		pkt, err := wire.AppendPacket(nil, &h, wire.AppendReplyTo(nil, cli.addr))
		if err != nil {
			t.Fatal(err)
		}
		now := f.net.Now()
		node.core.Receive(now, netio.Datagram{Addr: from, Buf: pkt})
		out, _ := node.core.Poll(now, nil)
		for _, d := range out {
			var rh wire.Header
			if _, _, err := wire.Parse(d.Buf, &rh); err == nil && rh.Mode == wire.ModePool && d.Addr == cli.addr {
				return rh.Status, true
			}
		}
		return 0, false
	}
	if st, ok := forge(f.swAddr, p.spec.Region, p.key^1, 0); !ok || st != wire.StatusBadKey {
		t.Errorf("node, wrong key: %v %v", st, ok)
	}
	if st, ok := forge(f.swAddr, p.spec.Region, p.key, 1<<40); !ok || st != wire.StatusOutOfBounds {
		t.Errorf("node, outside the grant: %v %v", st, ok)
	}
	dropped := node.core.Stats().Server.Pool.Dropped
	if _, ok := forge(cli.addr, p.spec.Region, p.key, 0); ok || node.core.Stats().Server.Pool.Dropped != dropped+1 {
		t.Errorf("node answered a pool request that did not come from its switch")
	}
	// Free: the switch revokes the grants; the node refuses the region.
	var freed bool
	cli.control(&ctrl.Msg{Type: ctrl.PoolFree, Region: p.spec.Region, Key: p.key}, func(_ *ctrl.Msg, err error) {
		if err != nil {
			t.Errorf("free: %v", err)
		}
		freed = true
	})
	f.run(func() bool { return freed }, time.Minute, "free")
	f.net.RunFor(10 * time.Millisecond) // the revokes arrive
	if op := p.one(&endpoint.Op{Kind: endpoint.KindRead, Buf: make([]byte, 8)}); !errors.Is(op.Err, wire.StatusBadKey) {
		t.Errorf("switch, freed region: %v", op.Err)
	}
	if st, ok := forge(f.swAddr, p.spec.Region, p.key, 0); !ok || st != wire.StatusBadKey {
		t.Errorf("node, freed region: %v %v", st, ok)
	}
}

// chain runs hops over n bytes chunk by chunk (cut as the pool client
// cuts them) and waits for every chunk.
func (p *simPool) chain(hops []wire.ChainHop, n int, dt wire.Dtype, alu wire.Alu, in, out []byte, limit time.Duration) error {
	addrs := make([]uint64, len(hops))
	for i, h := range hops {
		addrs[i] = h.Addr
	}
	chunks, err := pool.ChainChunks(p.lay, addrs, n, p.cli.core.PoolSegment()-len(hops)*wire.ChainHopLen, max(dt.Size(), 1))
	if err != nil {
		p.f.t.Fatal(err)
	}
	left := len(chunks)
	var first error
	off := 0
	for _, c := range chunks {
		hs := make([]wire.ChainHop, len(hops))
		for i, h := range hops {
			hs[i] = wire.ChainHop{Addr: h.Addr + uint64(off), Op: h.Op}
		}
		exts, _ := p.lay.Extents(hs[0].Addr, 1, 0, nil)
		op := &endpoint.Op{Kind: endpoint.KindChain, Peer: p.f.swAddr, Pool: p.spec.Region, Key: p.key,
			Lane: uint16(exts[0].Column), Chain: hs, ChainLen: c, Dtype: dt, Alu: alu}
		if in != nil {
			op.Buf = in[off : off+c]
		}
		if out != nil {
			op.Recv = out[off : off+c]
		}
		p.cli.post(op, func(op *endpoint.Op) {
			left--
			if op.Err != nil && first == nil {
				first = op.Err
			}
		})
		off += c
	}
	if err := p.f.net.RunUntil(func() bool { return left == 0 }, limit); err != nil {
		p.f.t.Fatalf("seed %d: chain: %v\nclient %+v", p.f.seed, err, p.cli.core.PoolStats())
	}
	return first
}

// reduceSetup makes a region with one n-byte vector per stripe on each of
// four nodes (source k on node k) and a fifth stripe for the result, fills
// the sources with random i64 and returns the expected sum.
func reduceSetup(t *testing.T, f *simFabric, cli *simMember, n int, seed uint64) (*simPool, []uint64, []byte) {
	p := f.createPool(cli, ctrl.PoolSpec{Size: uint64(5 * n), Stripe: uint64(n), Columns: 4, Replicas: 1, Perm: uint8(wire.PermAll)})
	rng := rand.New(rand.NewPCG(seed, 1))
	want := make([]byte, n)
	var srcs []uint64
	for k := range 4 {
		v := make([]byte, n)
		for i := 0; i < n; i += 8 {
			x := rng.Uint64()
			binary.LittleEndian.PutUint64(v[i:], x)
			binary.LittleEndian.PutUint64(want[i:], binary.LittleEndian.Uint64(want[i:])+x)
		}
		if err, _ := p.access(endpoint.KindWrite, v, uint64(k*n), time.Hour); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, uint64(k*n))
	}
	return p, srcs, want
}

func reduceHops(srcs []uint64, dst uint64) []wire.ChainHop {
	hops := []wire.ChainHop{{Addr: srcs[0], Op: wire.ChainLoad}}
	for _, s := range srcs[1:] {
		hops = append(hops, wire.ChainHop{Addr: s, Op: wire.ChainApply})
	}
	return append(hops, wire.ChainHop{Addr: dst, Op: wire.ChainStore})
}

// TestSimChainLossDup runs chained reduces and an accumulating chain over
// links that lose, duplicate and reorder datagrams: the sums are exact and
// no accumulation is applied twice.
func TestSimChainLossDup(t *testing.T) {
	for _, seed := range []int64{1, 2} {
		link := simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond, Loss: 0.05, Dup: 0.05, Reorder: 0.05, ReorderDelay: 100 * time.Microsecond}
		f, ns, cli := poolSimSetup(t, seed, link, 4)
		const n = 512 << 10
		p, srcs, want := reduceSetup(t, f, cli, n, uint64(seed))
		if err := p.chain(reduceHops(srcs, 4*n), n, wire.DtypeI64, wire.AluAdd, nil, nil, time.Hour); err != nil {
			t.Fatalf("seed %d: reduce: %v", seed, err)
		}
		got := make([]byte, n)
		if err, _ := p.access(endpoint.KindRead, got, 4*n, time.Hour); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: reduced vector wrong (err %v)", seed, err)
		}
		// The same sum returned to the client instead of stored.
		ret := reduceHops(srcs, 0)[:4]
		if err := p.chain(ret, n, wire.DtypeI64, wire.AluAdd, nil, got, time.Hour); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: returned sum wrong (err %v)", seed, err)
		}
		// Accumulate the sources into the result, hop by hop through all
		// four nodes, ten times: each exactly once per chain.
		acc := []wire.ChainHop{{Addr: srcs[0], Op: wire.ChainLoad}, {Addr: 4 * n, Op: wire.ChainAccumulate}}
		for range 10 {
			if err := p.chain(acc, n, wire.DtypeI64, wire.AluAdd, nil, nil, time.Hour); err != nil {
				t.Fatalf("seed %d: accumulate: %v", seed, err)
			}
		}
		src0 := make([]byte, n)
		p.access(endpoint.KindRead, src0, srcs[0], time.Hour)
		p.access(endpoint.KindRead, got, 4*n, time.Hour)
		for i := 0; i < n; i += 8 {
			w := binary.LittleEndian.Uint64(want[i:]) + 10*binary.LittleEndian.Uint64(src0[i:])
			if g := binary.LittleEndian.Uint64(got[i:]); g != w {
				t.Fatalf("seed %d: element %d after 10 accumulations: %d, want %d (applied twice?)", seed, i/8, g, w)
			}
		}
		var dups uint64
		for _, nd := range ns {
			dups += nd.core.Stats().Server.Pool.Duplicates
		}
		st := cli.core.PoolStats()
		t.Logf("seed %d: client %+v, duplicates the nodes answered from their caches %d", seed, st, dups)
		if st.Retransmits == 0 || dups == 0 {
			t.Errorf("seed %d: no retransmission or duplicate: loss was not exercised", seed)
		}
	}
}

// TestSimChainFigure: a chained reduce of 16 MiB across 4 memory nodes
// (load on node 0, add on nodes 1-3, store on node 0) on 100 Mbit/s links
// with 5 µs latency must finish within 1.1x (S/B + hops x latency), where
// a hop crosses two links (node to switch, switch to node).
func TestSimChainFigure(t *testing.T) {
	link := simnet.LinkConfig{Rate: 100e6, Latency: 5 * time.Microsecond}
	const n = 16 << 20
	f, _, cli := poolSimSetupSize(t, 1, link, 4, 2*n+1<<20)
	p, srcs, want := reduceSetup(t, f, cli, n, 1)
	hops := reduceHops(srcs, 4*n)
	start := f.net.Elapsed()
	before := cli.core.PoolStats()
	if err := p.chain(hops, n, wire.DtypeI64, wire.AluAdd, nil, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	took := f.net.Elapsed() - start
	after := cli.core.PoolStats()
	t.Logf("chain: %d requests, %d retransmitted", after.Requests-before.Requests, after.Retransmits-before.Retransmits)
	got := make([]byte, n)
	if err, _ := p.access(endpoint.KindRead, got, 4*n, time.Hour); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("reduced vector wrong (err %v)", err)
	}
	// S/B counts payload bytes: framing overheads are part of the ratio.
	bound := time.Duration(float64(n)*8/link.Rate*float64(time.Second)) + time.Duration(len(hops))*2*link.Latency
	ratio := float64(took) / float64(bound)
	t.Logf("16 MiB chained reduce over %d hops: %v virtual, bound %v, %.3fx; client %+v; net %+v", len(hops), took, bound, ratio, cli.core.PoolStats(), f.net.Stats())
	if ratio > 1.1 {
		t.Errorf("%.3fx the bound, want <= 1.1x", ratio)
	}
}

// TestSimPoolHostile throws well-formed pool datagrams with random fields
// (opcodes, hop lists, operands, flags, payloads) at the switch, from the
// client's address and from a memory node's, and straight at the memory
// nodes as if from the switch: nothing panics, no region's data changes
// except through requests the checks allowed, and the pool still serves.
func TestSimPoolHostile(t *testing.T) {
	const seed = 13
	f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 3)
	p := f.createPool(cli, ctrl.PoolSpec{Size: 512 << 10, Stripe: 16 << 10, Replicas: 1, Perm: uint8(wire.PermRead)})
	ref := make([]byte, p.spec.Size)
	// The region is read-only: no hostile request may change it.
	rng := rand.New(rand.NewPCG(seed, 77))
	ops := []wire.Opcode{wire.OpRead, wire.OpWrite, wire.OpCAS, wire.OpFetchAdd, wire.OpVector, wire.OpChain, wire.OpOptim, wire.OpNop, wire.OpData}
	for i := range 20000 {
		h := wire.Header{Version: wire.Version, Op: ops[rng.IntN(len(ops))], Mode: wire.ModePool, Group: p.spec.Region,
			MsgID: rng.Uint64(), Key: p.key, Addr: rng.Uint64() % (1 << 21), Operand1: rng.Uint64() % (1 << 17),
			Operand2: uint64(rng.IntN(20)), Dtype: wire.Dtype(rng.IntN(6)), Alu: wire.Alu(rng.IntN(6))}
		if rng.IntN(4) == 0 {
			h.Key = rng.Uint64()
		}
		if rng.IntN(8) == 0 {
			h.Group = rng.Uint32()
		}
		if h.Op == wire.OpChain {
			h.Hop = uint8(rng.IntN(int(h.Operand2) + 1))
		}
		if rng.IntN(3) == 0 {
			h.Flags |= wire.FlagReplyTo
		}
		payload := make([]byte, rng.IntN(3000))
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		if h.Op == wire.OpChain && rng.IntN(2) == 0 {
			var hops []wire.ChainHop
			for range max(1, int(h.Operand2)) {
				hops = append(hops, wire.ChainHop{Addr: rng.Uint64() % (1 << 20), Op: wire.ChainOp(1 + rng.IntN(4))})
			}
			payload = append(wire.AppendChain(nil, hops), payload[:rng.IntN(len(payload)+1)]...)
		}
		if h.Flags&wire.FlagReplyTo != 0 {
			payload = wire.AppendReplyTo(payload, cli.addr)
		}
		h.MsgLen = uint32(len(payload))
		pkt, err := wire.AppendPacket(nil, &h, payload)
		if err != nil {
			t.Fatal(err)
		}
		now := f.net.Now()
		switch i % 3 {
		case 0:
			f.sw.Receive(now, netio.Datagram{Addr: cli.addr, Buf: pkt})
		case 1:
			f.sw.Receive(now, netio.Datagram{Addr: ns[rng.IntN(len(ns))].addr, Buf: pkt})
		default:
			nd := ns[rng.IntN(len(ns))]
			nd.core.Receive(now, netio.Datagram{Addr: f.swAddr, Buf: pkt})
			nd.core.Poll(now, nil)
		}
		if i%500 == 0 {
			f.sw.Poll(now, nil)
		}
	}
	f.net.RunFor(100 * time.Millisecond)
	got := make([]byte, len(ref))
	if err, _ := p.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
		t.Fatalf("seed %d: the read-only region changed or cannot be read (err %v)", seed, err)
	}
	st := f.sw.Stats()
	t.Logf("seed %d: switch pool in %d, forwarded %d, refused %d, malformed %d, spoofed %d", seed, st.PoolIn, st.PoolOut, st.PoolRefused, st.Malformed, st.Spoofed)
	if st.PoolRefused == 0 || st.Malformed == 0 {
		t.Errorf("seed %d: hostile input was neither refused nor dropped", seed)
	}
}

// TestSimPoolNodeRestart restarts a memory node (same address and region
// key, new memory, new incarnation) under a write workload. A replicated
// region keeps serving every byte from the other copies, reports its
// writes degraded, and rebuilds the lost copy — writes made during the
// rebuild included — so that after another node dies the region still
// reads back exactly. A single-copy region answers StatusLost for the
// stripes the node held and serves the rest; no access reads the
// restarted node's zeroes.
func TestSimPoolNodeRestart(t *testing.T) {
	for _, seed := range []int64{21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32} {
		link := simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}
		if seed != 21 {
			// Loss, duplicates and reordering on every link too.
			link.Loss, link.Dup, link.Reorder, link.ReorderDelay = 0.02, 0.02, 0.05, 200*time.Microsecond
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { poolNodeRestart(t, seed, link) })
	}
}

func poolNodeRestart(t *testing.T, seed int64, link simnet.LinkConfig) {
	f, ns, cli := poolSimSetup(t, seed, link, 3)
	rep := f.createPool(cli, ctrl.PoolSpec{Size: 768 << 10, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
	one := f.createPool(cli, ctrl.PoolSpec{Size: 192 << 10, Stripe: 16 << 10, Replicas: 1, Perm: uint8(wire.PermRead | wire.PermWrite)})
	rng := rand.New(rand.NewPCG(uint64(seed), 5))
	refRep, refOne := make([]byte, rep.spec.Size), make([]byte, one.spec.Size)
	for _, b := range [][]byte{refRep, refOne} {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	if err, _ := rep.access(endpoint.KindWrite, refRep, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err, _ := one.access(endpoint.KindWrite, refOne, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	ns[1].restart()
	// Its first offer in the new incarnation (resent if lost).
	f.run(func() bool { return lostColumns(f.sw, rep.spec.Region) > 0 }, 5*time.Second, "the switch hears of the restart")
	writes := func(k int) (degraded int) {
		for range k {
			off := uint64(rng.IntN(int(rep.spec.Size) - 40<<10))
			chunk := make([]byte, 1+rng.IntN(40<<10))
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
			err, deg := rep.access(endpoint.KindWrite, chunk, off, time.Minute)
			if err != nil {
				t.Fatalf("seed %d: write during the rebuild: %v", seed, err)
			}
			copy(refRep[off:], chunk)
			if deg {
				degraded++
			}
		}
		return degraded
	}
	got := make([]byte, len(refRep))
	if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, refRep) {
		t.Fatalf("seed %d: replicated region after the restart: err %v, equal %v", seed, err, bytes.Equal(got, refRep))
	}
	health := func() (lost, rebuilding int) {
		for _, sp := range f.sw.PoolRegions() {
			if sp.Region == rep.spec.Region {
				return sp.Lost, sp.Rebuilding
			}
		}
		t.Fatal("region missing from the pool's list")
		return
	}
	// The read was served by the other copies: the switch knows of the
	// restart, and the rebuild (after its drain) has not finished.
	if l, _ := health(); l != 1 {
		t.Errorf("seed %d: %d lost columns reported while node 1's copy is rebuilt, want 1", seed, l)
	}
	if d := writes(30); d == 0 {
		t.Errorf("seed %d: no write reported degraded while a copy was lost", seed)
	}

	for f.sw.Stats().PoolRebuilt == 0 { // keep writing while the copy is rebuilt
		if f.net.Elapsed() > time.Minute {
			t.Fatalf("seed %d: the lost copy was not rebuilt: switch %+v, node %+v", seed, f.sw.Stats(), ns[1].core.Stats().Server.Pool)
		}
		writes(1)
	}
	if d := writes(10); d != 0 {
		t.Errorf("seed %d: %d writes degraded after the rebuild", seed, d)
	}
	// The driver's log hears of the nodes, the restart and the rebuild.
	var joined, restarted, rebuilt int
	for _, e := range f.sw.Events(nil) {
		switch {
		case e.Kind == fabric.EventPoolNodeJoined:
			joined++
		case e.Kind == fabric.EventPoolNodeRestarted && e.Addr == ns[1].addr:
			restarted++
		case e.Kind == fabric.EventCopyRebuilt && e.Addr == ns[1].addr && e.Region == rep.spec.Region:
			rebuilt++
		}
	}
	if joined != len(ns) || restarted != 1 || rebuilt == 0 {
		t.Errorf("seed %d: events: %d nodes joined, %d restarted, %d copies rebuilt; want %d, 1, at least 1", seed, joined, restarted, rebuilt, len(ns))
	}
	if l, rb := health(); l != 0 || rb != 0 {
		t.Errorf("seed %d: after the rebuild %d lost, %d rebuilding columns reported", seed, l, rb)
	}
	st := ns[1].core.Stats().Server.Pool
	t.Logf("seed %d: rebuilt at %v: node 1 copied %d bytes (%d rebuilds, %d failed)", seed, f.net.Elapsed(), st.RebuildBytes, st.Rebuilt, st.RebuildsFailed)
	// Node 0 dies: the stripes it shared with node 1 now come from the
	// rebuilt copy alone.
	f.net.Detach(ns[0].addr)
	f.net.RunFor(2 * time.Second)
	if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, refRep) {
		t.Fatalf("seed %d: region from the rebuilt copy: err %v, equal %v", seed, err, bytes.Equal(got, refRep))
	}
	// The single-copy region is not rebuilt: node 1's stripes are lost.
	homes := f.sw.PoolHomes(one.spec.Region)
	var lost, kept int
	for s := range int(one.lay.Stripes()) {
		exts, _ := one.lay.Extents(uint64(s)*one.spec.Stripe, 1, 0, nil)
		b := make([]byte, one.spec.Stripe)
		err, _ := one.access(endpoint.KindRead, b, uint64(s)*one.spec.Stripe, time.Minute)
		switch homes[exts[0].Column] {
		case ns[1].addr:
			lost++
			if !errors.Is(err, wire.StatusLost) {
				t.Errorf("seed %d: stripe %d on the restarted node: %v, want data lost", seed, s, err)
			}
		case ns[2].addr:
			kept++
			if want := refOne[uint64(s)*one.spec.Stripe:][:one.spec.Stripe]; err != nil || !bytes.Equal(b, want) {
				t.Errorf("seed %d: stripe %d on a node that stayed: err %v", seed, s, err)
			}
		}
	}
	if lost == 0 || kept == 0 {
		t.Fatalf("seed %d: %d stripes lost, %d kept: the test did not cover both", seed, lost, kept)
	}
	// The restarted node's free memory serves new regions.
	fresh := f.createPool(cli, ctrl.PoolSpec{Size: 32 << 10, Stripe: 16 << 10, Replicas: 1, Perm: uint8(wire.PermRead | wire.PermWrite)})
	if err, _ := fresh.access(endpoint.KindWrite, make([]byte, 32<<10), 0, time.Minute); err != nil {
		t.Fatalf("seed %d: new region after the restart: %v", seed, err)
	}
}

// TestSimPoolRebuildRetry: a rebuild that fails because the copy it reads
// from dies is tried again once that node is back, and then completes.
func TestSimPoolRebuildRetry(t *testing.T) {
	const seed = 31
	f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 3)
	rep := f.createPool(cli, ctrl.PoolSpec{Size: 384 << 10, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
	ref := make([]byte, rep.spec.Size)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range ref {
		ref[i] = byte(rng.Uint32())
	}
	if err, _ := rep.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	ns[1].restart()
	f.net.RunFor(5 * time.Millisecond) // the rebuild is granted; the copy starts after the drain
	f.net.Detach(ns[2].addr)
	f.net.RunFor(2 * time.Second)
	if st := f.sw.Stats(); st.PoolRebuildsFailed == 0 || st.PoolRebuilt != 0 {
		t.Fatalf("seed %d: with a source copy dead: %d rebuilt, %d failed; want a failure", seed, st.PoolRebuilt, st.PoolRebuildsFailed)
	}
	f.net.Attach(ns[2].addr, ns[2], f.link, f.link) // back, same incarnation
	f.run(func() bool { return f.sw.Stats().PoolRebuilt == 1 }, time.Minute, "rebuild after the retry")
	f.net.Detach(ns[0].addr)
	f.net.RunFor(2 * time.Second)
	got := make([]byte, len(ref))
	if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
		t.Fatalf("seed %d: region from the rebuilt copy: err %v, equal %v", seed, err, bytes.Equal(got, ref))
	}
}

// TestSimPoolPartitionHeal: a memory node cut off (declared dead, its
// memory intact) misses writes to a replicated region; when it is back its
// stale copy is not read but rebuilt, and after that the region reads back
// exactly from it alone.
func TestSimPoolPartitionHeal(t *testing.T) {
	const seed = 41
	f, ns, cli := poolSimSetup(t, seed, simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}, 3)
	rep := f.createPool(cli, ctrl.PoolSpec{Size: 384 << 10, Stripe: 16 << 10, Replicas: 2, Perm: uint8(wire.PermRead | wire.PermWrite)})
	ref := make([]byte, rep.spec.Size)
	rng := rand.New(rand.NewPCG(seed, 1))
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	fill(ref)
	if err, _ := rep.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	f.net.Detach(ns[1].addr)
	f.net.RunFor(2 * time.Second) // declared dead
	fill(ref)
	if err, deg := rep.access(endpoint.KindWrite, ref, 0, time.Minute); err != nil || !deg {
		t.Fatalf("seed %d: write with node 1 cut off: %v, degraded %v", seed, err, deg)
	}
	f.net.Attach(ns[1].addr, ns[1], f.link, f.link) // back, old memory, same incarnation
	got := make([]byte, len(ref))
	if err, _ := rep.access(endpoint.KindRead, got, 0, time.Minute); err != nil || !bytes.Equal(got, ref) {
		t.Fatalf("seed %d: read right after node 1 came back (stale copy served?): err %v, equal %v", seed, err, bytes.Equal(got, ref))
	}
	f.run(func() bool { return f.sw.Stats().PoolRebuilt == 1 }, time.Minute, "rebuild of the stale copy")
	f.net.Detach(ns[0].addr)
	f.net.Detach(ns[2].addr)
	f.net.RunFor(2 * time.Second)
	// Node 1 alone holds a copy of the stripes it shares with nodes 0 and
	// 2: every other stripe is on nodes 0 and 2, now dead.
	homes := f.sw.PoolHomes(rep.spec.Region)
	for s := range int(rep.lay.Stripes()) {
		on1 := false
		for replica := range 2 {
			exts, _ := rep.lay.Extents(uint64(s)*rep.spec.Stripe, 1, replica, nil)
			on1 = on1 || homes[exts[0].Column] == ns[1].addr
		}
		if !on1 {
			continue
		}
		b := make([]byte, rep.spec.Stripe)
		want := ref[uint64(s)*rep.spec.Stripe:][:rep.spec.Stripe]
		if err, _ := rep.access(endpoint.KindRead, b, uint64(s)*rep.spec.Stripe, time.Minute); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("seed %d: stripe %d from node 1's rebuilt copy: err %v, equal %v", seed, s, err, bytes.Equal(b, want))
		}
	}
}

// lostColumns is the lost columns of region id as the switch lists it.
func lostColumns(sw *fabric.Switch, id uint32) int {
	for _, sp := range sw.PoolRegions() {
		if sp.Region == id {
			return sp.Lost
		}
	}
	return -1
}
