package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// simTree is a tree of switches on simnet: the root at f.swAddr (the
// simFabric's switch) and leaves below it, each on its own link.
type simTree struct {
	*simFabric
	leafAddrs []netip.AddrPort
	leaves    []*fabric.Switch
	leafCfg   []fabric.Config
}

func newSimTree(t *testing.T, seed int64, link simnet.LinkConfig, nleaves int, cfg fabric.Config) *simTree {
	t.Helper()
	var addrs []netip.AddrPort
	for i := range nleaves {
		addrs = append(addrs, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), 7471))
	}
	root := cfg
	root.Children = addrs
	tr := &simTree{simFabric: newSimFabric(t, seed, link, root), leafAddrs: addrs}
	for i, a := range addrs {
		lc := cfg
		lc.Token, lc.Parent = tr.token, tr.swAddr
		lc.Transport.Seed = uint64(seed)*100 + uint64(i) + 1
		if lc.Transport.MTU == 0 {
			lc.Transport.MTU = 9000
		}
		sw, err := fabric.New(lc)
		if err != nil {
			t.Fatal(err)
		}
		tr.leaves = append(tr.leaves, sw)
		tr.leafCfg = append(tr.leafCfg, lc)
		tr.net.Attach(a, sw, link, link)
	}
	return tr
}

// membersAt attaches n members to the switch at sw.
func (tr *simTree) membersAt(sw netip.AddrPort, n int) []*simMember {
	ms := tr.addMembers(n)
	for _, m := range ms {
		m.sw = sw
	}
	return ms
}

// joinAll joins ms as job (rank = index) and returns each one's JOIN
// response.
func (tr *simTree) joinAll(job string, ms []*simMember) []*ctrl.Msg {
	resps := make([]*ctrl.Msg, len(ms))
	joined := 0
	for i, m := range ms {
		m.control(&ctrl.Msg{Type: ctrl.Join, Job: job, Size: len(ms), Rank: i}, func(r *ctrl.Msg, err error) {
			if err != nil {
				tr.t.Fatalf("seed %d: rank %d join: %v", tr.seed, i, err)
			}
			m.core.SetMember(r.Group, r.Member)
			m.core.SetGroupSwitch(r.Group, m.swAddr())
			m.groups = append(m.groups, r.Group)
			m.member[r.Group] = r.Member
			resps[i] = r
			joined++
		})
	}
	tr.run(func() bool { return joined == len(ms) }, time.Minute, "join "+job)
	return resps
}

// TestSimTreeMulticast forms a job over a root and two leaves (three
// members under one leaf, two under the other, one at the root) and
// checks the JOIN answers (one group id, every rank its own address),
// that a multicast from each level reaches every member, that the root
// forwards each packet once per leaf, not once per member, and that it
// all still holds with loss and reordering on every link.
func TestSimTreeMulticast(t *testing.T) {
	for _, c := range []struct {
		seed int64
		loss float64
	}{{301, 0}, {302, 0.02}} {
		t.Run(fmt.Sprint("loss", c.loss), func(t *testing.T) {
			tr := newSimTree(t, c.seed, impaired(c.loss), 2, fabric.Config{HeartbeatTimeout: time.Second})
			ms := append(append(tr.membersAt(tr.leafAddrs[0], 3), tr.membersAt(tr.leafAddrs[1], 2)...), tr.membersAt(tr.swAddr, 1)...)
			resps := tr.joinAll("spread", ms)
			gid := resps[0].Group
			for i, r := range resps {
				if r.Group != gid || int(r.Member) != i || len(r.Members) != len(ms) {
					t.Fatalf("rank %d: JOIN answer group %d member %d, %d members; want group %d member %d, %d", i, r.Group, r.Member, len(r.Members), gid, i, len(ms))
				}
				for _, e := range r.Members {
					if e.Addr != ms[e.ID].addr {
						t.Fatalf("rank %d: the table gives rank %d the address %v, want its own %v", i, e.ID, e.Addr, ms[e.ID].addr)
					}
				}
			}
			rng := rand.New(rand.NewPCG(uint64(c.seed), 5))
			for _, sender := range []int{0, 4, 5} { // a leaf's, the other leaf's, the root's
				before := tr.sw.Stats()
				multicastRound(tr.simFabric, gid, ms, sender, randBytes(rng, 256<<10))
				if c.loss > 0 {
					continue
				}
				// Without loss the root forwards each packet it gets once
				// per switch or member with receivers: two leaves for the
				// root's member; the other leaf and the root's member
				// for a leaf's.
				after := tr.sw.Stats()
				in, out := after.MulticastIn-before.MulticastIn, after.MulticastOut-before.MulticastOut
				if in == 0 || out != 2*in {
					t.Fatalf("sender %d: the root got %d packets and sent %d copies, want 2 per packet", sender, in, out)
				}
			}
			st := tr.sw.Stats()
			if st.Spoofed != 0 || st.MulticastAcksIgnored != 0 {
				t.Fatalf("root: %d spoofed, %d ACKs ignored", st.Spoofed, st.MulticastAcksIgnored)
			}
		})
	}
}

// TestSimTreeMemberDies crashes a member under one leaf while a member
// under the other multicasts to it: the sender's multicast fails naming
// that member within twice the heartbeat timeout, every member of the
// job sees the death, and the others go on multicasting.
func TestSimTreeMemberDies(t *testing.T) {
	const seed = 303
	tr := newSimTree(t, seed, impaired(0), 2, fabric.Config{HeartbeatTimeout: time.Second})
	ms := append(tr.membersAt(tr.leafAddrs[0], 2), tr.membersAt(tr.leafAddrs[1], 2)...)
	gid := tr.joinAll("d", ms)[0].Group
	data := randBytes(rand.New(rand.NewPCG(seed, 1)), 1<<20)
	for _, i := range []int{1, 2} { // rank 3 posts no receive: the stream waits on it
		ms[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: ms[i].swAddr(), Group: gid, From: 0, Buf: make([]byte, len(data))}, nil)
	}
	var mcErr error
	done := false
	ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: ms[0].swAddr(), Group: gid, Buf: data}, func(op *endpoint.Op) {
		mcErr, done = op.Err, true
	})
	tr.net.RunFor(2 * time.Millisecond)
	crashAt := tr.net.Elapsed()
	tr.crash(ms[3])
	tr.run(func() bool { return done }, 10*time.Second, "multicast with a crashed member behind the other leaf")
	var me *endpoint.MemberError
	if !errors.As(mcErr, &me) || me.Member != 3 || !errors.Is(mcErr, wire.StatusMemberDead) {
		t.Fatalf("multicast error %v, want a MemberError naming member 3", mcErr)
	}
	if took := tr.net.Elapsed() - crashAt; took > 2*time.Second {
		t.Fatalf("error after %v, heartbeat timeout is 1s", took)
	}
	for _, sw := range []*fabric.Switch{tr.sw, tr.leaves[0], tr.leaves[1]} {
		for _, g := range sw.Groups() {
			alive := 0
			for _, a := range g.Alive {
				if a {
					alive++
				}
			}
			if g.ID == gid && alive != 3 {
				t.Fatalf("a switch counts %d live members, want 3: %+v", alive, g)
			}
		}
	}
	multicastRound(tr.simFabric, gid, ms[:3], 2, data[:64<<10])
}

// TestSimTreeLeafDies stops a leaf switch: the members under the other
// leaf get their multicast failed within twice the heartbeat timeout,
// a new job of the members the tree still reaches works, and the
// restarted leaf's members join new jobs.
func TestSimTreeLeafDies(t *testing.T) {
	const seed = 304
	tr := newSimTree(t, seed, impaired(0), 2, fabric.Config{HeartbeatTimeout: time.Second})
	a, b := tr.membersAt(tr.leafAddrs[0], 2), tr.membersAt(tr.leafAddrs[1], 2)
	ms := append(append([]*simMember{}, a...), b...)
	gid := tr.joinAll("l", ms)[0].Group
	data := randBytes(rand.New(rand.NewPCG(seed, 1)), 1<<20)
	ms[1].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: ms[1].swAddr(), Group: gid, From: 0, Buf: make([]byte, len(data))}, nil)
	var mcErr error
	done := false
	ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: ms[0].swAddr(), Group: gid, Buf: data}, func(op *endpoint.Op) {
		mcErr, done = op.Err, true
	})
	tr.net.RunFor(2 * time.Millisecond)
	downAt := tr.net.Elapsed()
	tr.net.Detach(tr.leafAddrs[1])
	tr.run(func() bool { return done }, 10*time.Second, "multicast with a leaf down")
	var me *endpoint.MemberError
	if !errors.As(mcErr, &me) || (me.Member != 2 && me.Member != 3) {
		t.Fatalf("multicast error %v, want a MemberError naming a member of the dead leaf", mcErr)
	}
	if took := tr.net.Elapsed() - downAt; took > 2*time.Second {
		t.Fatalf("error after %v, heartbeat timeout is 1s", took)
	}
	// The rest of the tree carries on.
	c := tr.membersAt(tr.swAddr, 1)
	rest := append(append([]*simMember{}, a...), c...)
	g2 := tr.joinAll("rest", rest)[0].Group
	multicastRound(tr.simFabric, g2, rest, 2, data[:128<<10])
	// The leaf restarts; its members (new processes) join a new job.
	lc := tr.leafCfg[1]
	lc.Transport.Seed += 1000 // a new process: new streams
	sw, err := fabric.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	tr.net.Attach(tr.leafAddrs[1], sw, tr.link, tr.link)
	for _, m := range b {
		tr.net.Detach(m.addr)
	}
	nb := tr.membersAt(tr.leafAddrs[1], 2)
	again := append(append([]*simMember{}, a...), nb...)
	g3 := tr.joinAll("again", again)[0].Group
	multicastRound(tr.simFabric, g3, again, 3, data[:128<<10])
}

// TestSimTreeRefusals: a JOINVIA from a switch that is not a child and a
// LEAVE from a leaf for a member not behind it are refused; the job is
// untouched.
func TestSimTreeRefusals(t *testing.T) {
	const seed = 305
	tr := newSimTree(t, seed, impaired(0), 2, fabric.Config{HeartbeatTimeout: time.Second})
	ms := append(tr.membersAt(tr.leafAddrs[0], 1), tr.membersAt(tr.leafAddrs[1], 1)...)
	gid := tr.joinAll("r", ms)[0].Group
	// A member talking to the root as if it were a child switch.
	stranger := tr.membersAt(tr.swAddr, 1)[0]
	var viaErr error
	asked := false
	stranger.control(&ctrl.Msg{Type: ctrl.JoinVia, Job: "r2", Size: 2, Rank: 0, MTU: 9000,
		Members: []ctrl.MemberInfo{{ID: 0, Addr: stranger.addr}}}, func(_ *ctrl.Msg, err error) { viaErr, asked = err, true })
	tr.run(func() bool { return asked }, 10*time.Second, "joinvia from a stranger")
	if !errors.Is(viaErr, wire.StatusNotMember) {
		t.Fatalf("JOINVIA from a process that is no child switch: %v, want %v", viaErr, wire.StatusNotMember)
	}
	// A member of leaf 0 asks the root to drop rank 1 (behind leaf 1).
	var leaveErr error
	asked = false
	ms[0].sw = tr.swAddr
	ms[0].control(&ctrl.Msg{Type: ctrl.Leave, Group: gid, Member: 1}, func(_ *ctrl.Msg, err error) { leaveErr, asked = err, true })
	tr.run(func() bool { return asked }, 10*time.Second, "leave for another")
	ms[0].sw = tr.leafAddrs[0]
	if !errors.Is(leaveErr, wire.StatusNotMember) {
		t.Fatalf("LEAVE for a member behind another switch: %v, want %v", leaveErr, wire.StatusNotMember)
	}
	multicastRound(tr.simFabric, gid, ms, 1, make([]byte, 4096))
}

// TestSimTreeAllreduce runs aggregations of a job spread over a root
// and two leaves (three members under one, two under the other, one at
// the root): deterministic f32 sums bitwise equal to the tree's fixed
// order (each leaf folds its members in rank order, the root its own
// member, then the leaves in port order), exact i64 sums with loss and
// reordering on every link, and a Reduce to a member under a leaf. The
// root gets one partial per leaf, not one contribution per member.
func TestSimTreeAllreduce(t *testing.T) {
	for _, c := range []struct {
		seed int64
		loss float64
	}{{311, 0}, {312, 0.05}} {
		t.Run(fmt.Sprint("loss", c.loss), func(t *testing.T) {
			tr := newSimTree(t, c.seed, impaired(c.loss), 2, fabric.Config{HeartbeatTimeout: time.Second})
			ms := append(append(tr.membersAt(tr.leafAddrs[0], 3), tr.membersAt(tr.leafAddrs[1], 2)...), tr.membersAt(tr.swAddr, 1)...)
			gid := tr.joinAll("ar", ms)[0].Group
			r := rand.New(rand.NewPCG(uint64(c.seed), 9))
			const elems = 20000
			vals := make([][]float32, len(ms))
			in := make([][]byte, len(ms))
			for i := range vals {
				vals[i] = make([]float32, elems)
				for j := range vals[i] {
					vals[i][j] = float32(r.NormFloat64())
				}
				in[i] = f32bytes(vals[i])
			}
			want := make([]float32, elems)
			for j := range want {
				p0 := vals[0][j] + vals[1][j] + vals[2][j]
				p1 := vals[3][j] + vals[4][j]
				want[j] = vals[5][j] + p0 + p1
			}
			rootIn, leafIn := tr.sw.Stats().AggregateIn, tr.leaves[0].Stats().AggregateIn
			for round := range 2 {
				res := allreduceRound(tr.simFabric, gid, ms, in, wire.DtypeF32, wire.AluAdd, true)
				for i := range res {
					if !bytes.Equal(res[i], f32bytes(want)) {
						t.Fatalf("round %d: member %d: the deterministic f32 sum differs from the tree's order", round, i)
					}
				}
			}
			if c.loss == 0 {
				// Per chunk: the root gets its member's and two partials,
				// leaf 0 its three members' and the root's result.
				dr, dl := tr.sw.Stats().AggregateIn-rootIn, tr.leaves[0].Stats().AggregateIn-leafIn
				if dr == 0 || 4*dr != 3*dl {
					t.Fatalf("contributions: %d at the root, %d at leaf 0; want 3 to 4", dr, dl)
				}
			}
			ints := make([][]byte, len(ms))
			sum := make([]int64, elems)
			for i := range ints {
				ints[i] = make([]byte, 8*elems)
				for j := range elems {
					v := int64(r.Uint64() >> 8)
					binary.LittleEndian.PutUint64(ints[i][8*j:], uint64(v))
					sum[j] += v
				}
			}
			for i, b := range allreduceRound(tr.simFabric, gid, ms, ints, wire.DtypeI64, wire.AluAdd, false) {
				for j := range elems {
					if got := int64(binary.LittleEndian.Uint64(b[8*j:])); got != sum[j] {
						t.Fatalf("member %d element %d: %d, want %d", i, j, got, sum[j])
					}
				}
			}
			// Reduce to rank 4, under leaf 1.
			out := make([]byte, 8*elems)
			pending := len(ms)
			for i, m := range ms {
				op := &endpoint.Op{Kind: endpoint.KindAggregate, Peer: m.swAddr(), Group: gid, Buf: ints[i], Root: 4, Dtype: wire.DtypeI64, Alu: wire.AluAdd}
				if i == 4 {
					op.Recv = out
				}
				m.post(op, func(op *endpoint.Op) {
					if op.Err != nil {
						t.Fatalf("member %d reduce: %v", i, op.Err)
					}
					pending--
				})
			}
			tr.run(func() bool { return pending == 0 }, time.Minute, "reduce")
			for j := range elems {
				if got := int64(binary.LittleEndian.Uint64(out[8*j:])); got != sum[j] {
					t.Fatalf("reduce element %d: %d, want %d", j, got, sum[j])
				}
			}
			for _, sw := range append([]*fabric.Switch{tr.sw}, tr.leaves...) {
				tr.run(func() bool { return sw.Stats().Pool.InUse == 0 }, time.Minute, "slots released")
			}
		})
	}
}

// TestSimTreeAggregationFails: a member under a leaf contributing a
// chunk of another length fails the aggregation on every member of the
// tree (its leaf refuses its rank's chunk; the root's slot, missing that
// leaf's partial, expires and the refusal goes down every port); then a
// member under a leaf crashes before contributing and every other
// member's aggregation fails naming it.
func TestSimTreeAggregationFails(t *testing.T) {
	const seed = 313
	tr := newSimTree(t, seed, impaired(0), 2, fabric.Config{HeartbeatTimeout: time.Second, AggTimeout: 2 * time.Second})
	ms := append(append(tr.membersAt(tr.leafAddrs[0], 2), tr.membersAt(tr.leafAddrs[1], 2)...), tr.membersAt(tr.swAddr, 1)...)
	gid := tr.joinAll("bad", ms)[0].Group
	run := func(what string, size func(i int) int, check func(i int, err error)) {
		t.Helper()
		pending := len(ms)
		for i, m := range ms {
			if m.crashed {
				pending--
				continue
			}
			n := size(i)
			m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: m.swAddr(), Group: gid, Buf: make([]byte, n), Recv: make([]byte, n), Root: -1,
				Dtype: wire.DtypeI32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
				check(i, op.Err)
				pending--
			})
		}
		tr.run(func() bool { return pending == 0 }, 30*time.Second, what)
	}
	run("mismatch", func(i int) int {
		if i == 3 {
			return 64
		}
		return 128
	}, func(i int, err error) {
		if err == nil {
			t.Fatalf("member %d: an aggregation whose members disagree succeeded", i)
		}
	})
	tr.crash(ms[2])
	run("crash", func(int) int { return 128 }, func(i int, err error) {
		var me *endpoint.MemberError
		if !errors.As(err, &me) || me.Member != 2 {
			t.Fatalf("member %d: %v, want a MemberError naming member 2", i, err)
		}
	})
}

// TestSimTreeLeafDiesInAllreduce stops a leaf switch while its members'
// Allreduce is in flight over a root and two leaves: every member the
// tree still reaches gets an error within twice the heartbeat timeout,
// and an Allreduce of those members then works.
func TestSimTreeLeafDiesInAllreduce(t *testing.T) {
	const seed = 314
	tr := newSimTree(t, seed, impaired(0), 2, fabric.Config{HeartbeatTimeout: time.Second})
	a, b, c := tr.membersAt(tr.leafAddrs[0], 2), tr.membersAt(tr.leafAddrs[1], 2), tr.membersAt(tr.swAddr, 1)
	ms := append(append(append([]*simMember{}, a...), b...), c...)
	gid := tr.joinAll("ld", ms)[0].Group
	const n = 1 << 20
	errs := make([]error, len(ms))
	pending := 0
	for i, m := range ms {
		if i == 2 || i == 3 {
			continue // leaf 1's members have not called yet when it stops
		}
		pending++
		m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: m.swAddr(), Group: gid, Buf: make([]byte, n), Recv: make([]byte, n), Root: -1,
			Dtype: wire.DtypeI32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
			errs[i] = op.Err
			pending--
		})
	}
	tr.net.RunFor(5 * time.Millisecond)
	downAt := tr.net.Elapsed()
	tr.net.Detach(tr.leafAddrs[1])
	tr.run(func() bool { return pending == 0 }, 10*time.Second, "allreduce with a leaf down")
	if took := tr.net.Elapsed() - downAt; took > 2*time.Second {
		t.Fatalf("errors after %v, heartbeat timeout is 1s", took)
	}
	for _, i := range []int{0, 1, 4} {
		var me *endpoint.MemberError
		if !errors.As(errs[i], &me) || (me.Member != 2 && me.Member != 3) {
			t.Fatalf("member %d: %v, want a MemberError naming a member of the dead leaf", i, errs[i])
		}
	}
	rest := append(append([]*simMember{}, a...), c...)
	g2 := tr.joinAll("rest", rest)[0].Group
	in := [][]byte{{1, 0, 0, 0}, {2, 0, 0, 0}, {4, 0, 0, 0}}
	if res := allreduceRound(tr.simFabric, g2, rest, in, wire.DtypeI32, wire.AluAdd, false); res[0][0] != 7 || res[2][0] != 7 {
		t.Fatalf("allreduce of the rest: %v", res)
	}
}

// TestSimTreeAggregateAtJoin has every member start an Allreduce the
// moment its JOIN is answered, over slow lossy links (the root's answers
// to a leaf reach it one after another, a lost one resent later): a
// leaf must count every member of
// the job attached to it from the first answer on, or a member's first
// contribution completes a slot that counted it alone. Every member gets
// the exact sum.
func TestSimTreeAggregateAtJoin(t *testing.T) {
	const seed = 315
	link := simnet.LinkConfig{Rate: 2e6, Latency: 50 * time.Microsecond, Loss: 0.2}
	tr := newSimTree(t, seed, link, 2, fabric.Config{HeartbeatTimeout: 5 * time.Second})
	ms := append(append(tr.membersAt(tr.leafAddrs[0], 3), tr.membersAt(tr.leafAddrs[1], 3)...), tr.membersAt(tr.swAddr, 1)...)
	got := make([][]byte, len(ms))
	errs := make([]error, len(ms))
	done := 0
	for i, m := range ms {
		m.control(&ctrl.Msg{Type: ctrl.Join, Job: "eager", Size: len(ms), Rank: i}, func(r *ctrl.Msg, err error) {
			if err != nil {
				t.Fatalf("rank %d join: %v", i, err)
			}
			m.core.SetMember(r.Group, r.Member)
			m.core.SetGroupSwitch(r.Group, m.swAddr())
			m.groups = append(m.groups, r.Group)
			m.member[r.Group] = r.Member
			got[i] = make([]byte, 4)
			m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: m.swAddr(), Group: r.Group, Buf: []byte{byte(1 << i), 0, 0, 0}, Recv: got[i], Root: -1,
				Dtype: wire.DtypeI32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
				errs[i] = op.Err
				done++
			})
		})
	}
	tr.run(func() bool { return done == len(ms) }, time.Minute, "join, then allreduce at once")
	for i := range ms {
		if errs[i] != nil || got[i][0] != 1<<len(ms)-1 {
			t.Fatalf("rank %d: sum %v, %v; want %d", i, got[i], errs[i], 1<<len(ms)-1)
		}
	}
}
