package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

func impaired(loss float64) simnet.LinkConfig {
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond, Loss: loss}
	if loss > 0 {
		l.Reorder, l.Dup, l.Corrupt = 0.02, 0.02, 0.01
	}
	return l
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// multicastRound: member sender multicasts data to the group; every other
// member receives and checks it. Returns when all are done.
func multicastRound(f *simFabric, gid uint32, ms []*simMember, sender int, data []byte) {
	pending := 0
	for i, m := range ms {
		if i == sender {
			continue
		}
		buf := make([]byte, len(data))
		pending++
		m.post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: m.swAddr(), Group: gid, From: uint16(sender), Buf: buf}, func(op *endpoint.Op) {
			if op.Err != nil {
				f.t.Fatalf("seed %d: member %d recv: %v", f.seed, i, op.Err)
			}
			if !bytes.Equal(buf, data) {
				f.t.Fatalf("seed %d: member %d received different bytes", f.seed, i)
			}
			pending--
		})
	}
	pending++
	ms[sender].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: ms[sender].swAddr(), Group: gid, Buf: data}, func(op *endpoint.Op) {
		if op.Err != nil {
			for i, m := range ms {
				f.t.Logf("member %d: %+v", i, m.core.Stats().Transport)
			}
			f.t.Fatalf("seed %d: multicast: %v\nswitch %+v", f.seed, op.Err, f.sw.Stats())
		}
		pending--
	})
	f.run(func() bool { return pending == 0 }, 10*time.Minute, "multicast")
}

// TestSimMulticast: every member count and loss level, two groups at once.
func TestSimMulticast(t *testing.T) {
	for _, n := range []int{2, 5, 16, 64} {
		for _, loss := range []float64{0, 0.05, 0.2} {
			t.Run(fmt.Sprintf("members=%d/loss=%v", n, loss), func(t *testing.T) {
				seed := int64(n*100 + int(loss*100))
				cfg := fabric.Config{}
				var dead time.Duration
				if loss >= 0.2 {
					// 20% on the switch's port and on each member's link:
					// 36% each way. With the sender backed off to its
					// longest timeout, the default 5 s (and the switch's
					// 1 s heartbeat timeout) can pass with every try lost,
					// which is not what this test is about.
					cfg.HeartbeatTimeout, dead = 10*time.Second, 30*time.Second
					cfg.Transport.DeadTimeout = dead
				}
				f := newSimFabric(t, seed, impaired(loss), cfg)
				f.deadTimeout = dead
				a := f.addMembers(n)
				b := f.addMembers(3)
				ga := f.join("a", a)
				gb := f.join("b", b)
				r := rand.New(rand.NewPCG(uint64(seed), 7))
				size := 100000
				if n == 64 && loss > 0 {
					size = 30000
				}
				done := 0
				// Group b runs concurrently with group a.
				data := randBytes(r, 50000)
				for i := 1; i < 3; i++ {
					buf := make([]byte, len(data))
					b[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: gb, From: 0, Buf: buf}, func(op *endpoint.Op) {
						if op.Err != nil || !bytes.Equal(buf, data) {
							t.Fatalf("seed %d: group b recv: %v", seed, op.Err)
						}
						done++
					})
				}
				b[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: gb, Buf: data}, func(op *endpoint.Op) {
					if op.Err != nil {
						t.Fatalf("seed %d: group b multicast: %v", seed, op.Err)
					}
					done++
				})
				multicastRound(f, ga, a, 0, randBytes(r, size))
				multicastRound(f, ga, a, n-1, randBytes(r, size/3))
				f.run(func() bool { return done == 3 }, time.Minute, "group b")
				t.Logf("virtual %v, switch %+v", f.net.Elapsed(), f.sw.Stats().MulticastOut)
			})
		}
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// allreduceRound runs one allreduce over ms and returns each member's
// result.
func allreduceRound(f *simFabric, gid uint32, ms []*simMember, inputs [][]byte, dt wire.Dtype, alu wire.Alu, det bool) [][]byte {
	out := make([][]byte, len(ms))
	pending := len(ms)
	for i, m := range ms {
		out[i] = make([]byte, len(inputs[i]))
		m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: m.swAddr(), Group: gid, Buf: inputs[i], Recv: out[i], Root: -1,
			Dtype: dt, Alu: alu, Deterministic: det}, func(op *endpoint.Op) {
			if op.Err != nil {
				f.t.Fatalf("seed %d: member %d allreduce: %v", f.seed, i, op.Err)
			}
			pending--
		})
	}
	f.run(func() bool { return pending == 0 }, 10*time.Minute, "allreduce")
	return out
}

// TestSimAllreduce: f32 sums in deterministic mode are bitwise equal to a
// member-order reference; i64 sums, min and max exact; with loss.
func TestSimAllreduce(t *testing.T) {
	for _, n := range []int{2, 5, 16, 64} {
		for _, loss := range []float64{0, 0.05, 0.2} {
			t.Run(fmt.Sprintf("members=%d/loss=%v", n, loss), func(t *testing.T) {
				seed := int64(n*1000 + int(loss*100))
				f := newSimFabric(t, seed, impaired(loss), fabric.Config{})
				ms := f.addMembers(n)
				gid := f.join("ar", ms)
				r := rand.New(rand.NewPCG(uint64(seed), 9))
				elems := 20000
				if n == 64 {
					elems = 5000
				}
				// f32 sum, deterministic.
				in := make([][]byte, n)
				vals := make([][]float32, n)
				for i := range in {
					vals[i] = make([]float32, elems)
					for j := range vals[i] {
						vals[i][j] = float32(r.NormFloat64())
					}
					in[i] = f32bytes(vals[i])
				}
				want := make([]float32, elems)
				for j := range want {
					acc := vals[0][j]
					for i := 1; i < n; i++ {
						acc += vals[i][j]
					}
					want[j] = acc
				}
				wantB := f32bytes(want)
				res := allreduceRound(f, gid, ms, in, wire.DtypeF32, wire.AluAdd, true)
				for i := range res {
					if !bytes.Equal(res[i], wantB) {
						t.Fatalf("seed %d: member %d f32 sum not bitwise equal to the member-order reference", seed, i)
					}
				}
				// i64 max and sum, non-deterministic (exact anyway).
				for _, alu := range []wire.Alu{wire.AluMax, wire.AluAdd} {
					ints := make([][]byte, n)
					want := make([]int64, elems)
					for i := range ints {
						ints[i] = make([]byte, 8*elems)
						for j := range elems {
							v := int64(r.Uint64())
							binary.LittleEndian.PutUint64(ints[i][8*j:], uint64(v))
							switch {
							case i == 0:
								want[j] = v
							case alu == wire.AluMax && v > want[j]:
								want[j] = v
							case alu == wire.AluAdd:
								want[j] += v
							}
						}
					}
					res := allreduceRound(f, gid, ms, ints, wire.DtypeI64, alu, false)
					for i := range res {
						for j := range elems {
							if got := int64(binary.LittleEndian.Uint64(res[i][8*j:])); got != want[j] {
								t.Fatalf("seed %d: member %d %v element %d: %d want %d", seed, i, alu, j, got, want[j])
							}
						}
					}
				}
				// Slots are recycled once every member has acknowledged its result.
				f.run(func() bool { return f.sw.Stats().Pool.InUse == 0 }, time.Minute, "slots released")
				st := f.sw.Stats()
				t.Logf("virtual %v, pool %+v", f.net.Elapsed(), st.Pool)
			})
		}
	}
}

// TestSimMemberCrash: a member dying in the middle of a multicast and of
// an aggregation makes the callers fail with an error naming it within the
// heartbeat timeout; another group is unaffected.
func TestSimMemberCrash(t *testing.T) {
	seed := int64(77)
	f := newSimFabric(t, seed, impaired(0), fabric.Config{HeartbeatTimeout: time.Second})
	a := f.addMembers(5)
	b := f.addMembers(3)
	ga := f.join("a", a)
	gb := f.join("b", b)
	r := rand.New(rand.NewPCG(1, 2))

	// Multicast of 1 MB from member 0 while member 3 crashes; member 3
	// posted no receive, so the stream stalls on it.
	data := randBytes(r, 1<<20)
	var mcErr error
	mcDone := false
	for i := 1; i < 5; i++ {
		if i == 3 {
			continue
		}
		buf := make([]byte, len(data))
		a[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: ga, From: 0, Buf: buf}, nil)
	}
	a[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: ga, Buf: data}, func(op *endpoint.Op) {
		mcErr, mcDone = op.Err, true
	})
	f.net.RunFor(2 * time.Millisecond)
	crashAt := f.net.Elapsed()
	f.crash(a[3])
	// Meanwhile group b keeps working.
	res := allreduceRound(f, gb, b, [][]byte{{1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}}, wire.DtypeI32, wire.AluAdd, false)
	if res[0][0] != 6 {
		t.Fatalf("group b allreduce: %v", res[0])
	}
	f.run(func() bool { return mcDone }, 10*time.Second, "multicast with a crashed member")
	var me *endpoint.MemberError
	if !errors.As(mcErr, &me) || me.Member != 3 || !errors.Is(mcErr, wire.StatusMemberDead) {
		t.Fatalf("multicast error %v, want a MemberError naming member 3; switch %+v; sender %+v", mcErr, f.sw.Stats(), a[0].core.Stats())
	}
	if took := f.net.Elapsed() - crashAt; took > 2*time.Second {
		t.Fatalf("error after %v, heartbeat timeout is 1s", took)
	}

	// Aggregation: member 4 crashes before contributing.
	f.crash(a[4])
	fails := 0
	for i := range 3 {
		a[i].post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: ga, Buf: make([]byte, 4096), Recv: make([]byte, 4096), Root: -1,
			Dtype: wire.DtypeF32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
			if !errors.As(op.Err, &me) {
				t.Fatalf("member %d: aggregation error %v, want a MemberError", i, op.Err)
			}
			fails++
		})
	}
	f.run(func() bool { return fails == 3 }, 10*time.Second, "aggregation with dead members")
	// Group b is still fine.
	res = allreduceRound(f, gb, b, [][]byte{{1, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}}, wire.DtypeI32, wire.AluAdd, false)
	if res[2][0] != 3 {
		t.Fatalf("group b after the crash: %v", res[2])
	}
}

// TestSimPoolExhaustion: many concurrent aggregations in several groups
// share a small slot pool: all complete, correct, without deadlock.
func TestSimPoolExhaustion(t *testing.T) {
	seed := int64(5)
	f := newSimFabric(t, seed, impaired(0.02), fabric.Config{Pool: fabric.PoolConfig{Slots: 8}})
	const groups, n, elems = 4, 4, 8 * 2226 // 8 chunks per op at MTU 9000
	type run struct {
		ms  []*simMember
		gid uint32
	}
	var runs []run
	for g := range groups {
		ms := f.addMembers(n)
		runs = append(runs, run{ms, f.join(fmt.Sprintf("g%d", g), ms)})
	}
	pending := 0
	for _, rr := range runs {
		for op := range 3 {
			for i, m := range rr.ms {
				in := make([]byte, 4*elems)
				for j := 0; j < elems; j++ {
					binary.LittleEndian.PutUint32(in[4*j:], uint32(i+op))
				}
				out := make([]byte, len(in))
				pending++
				m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: rr.gid, Buf: in, Recv: out, Root: -1,
					Dtype: wire.DtypeI32, Alu: wire.AluAdd}, func(o *endpoint.Op) {
					if o.Err != nil {
						t.Fatalf("seed %d: %v", seed, o.Err)
					}
					want := uint32(0)
					for k := range n {
						want += uint32(k + op)
					}
					for j := 0; j < elems; j++ {
						if got := binary.LittleEndian.Uint32(out[4*j:]); got != want {
							t.Fatalf("seed %d: element %d = %d, want %d", seed, j, got, want)
						}
					}
					pending--
				})
			}
		}
	}
	f.run(func() bool { return pending == 0 }, 10*time.Minute, "concurrent aggregations")
	f.run(func() bool { return f.sw.Stats().Pool.InUse == 0 }, time.Minute, "slots released")
	st := f.sw.Stats()
	t.Logf("virtual %v, pool %+v, refused %d", f.net.Elapsed(), st.Pool, st.Transport.Refused)
}

// TestSimAggregateResultTooLarge: members that join claiming a smaller MTU
// than they use (the switch's is 4096; they send 9000-byte datagrams) get
// their allreduce refused with TOO_LARGE: the switch can neither hold nor
// send chunks that large and says so instead of leaving the members
// waiting.
func TestSimAggregateResultTooLarge(t *testing.T) {
	f := newSimFabric(t, 77, simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}, fabric.Config{Transport: transport.Config{MTU: 4096}})
	ms := f.addMembers(3)
	var gid uint32
	joined := 0
	for i, m := range ms {
		m.control(&ctrl.Msg{Type: ctrl.Join, Job: "liar", Size: len(ms), Rank: i, MTU: 4096}, func(r *ctrl.Msg, err error) {
			if err != nil {
				t.Fatalf("join: %v", err)
			}
			m.core.SetMember(r.Group, r.Member)
			m.member[r.Group] = r.Member
			gid = r.Group
			joined++
		})
	}
	f.run(func() bool { return joined == len(ms) }, time.Minute, "join")
	const size = 32 << 10 // several 9000-byte chunks
	errs := make([]error, len(ms))
	pending := len(ms)
	for i, m := range ms {
		m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: gid, Buf: make([]byte, size), Recv: make([]byte, size), Root: -1,
			Dtype: wire.DtypeF32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
			errs[i] = op.Err
			pending--
		})
	}
	f.run(func() bool { return pending == 0 }, time.Minute, "refused allreduce")
	for i, err := range errs {
		if !errors.Is(err, wire.StatusTooLarge) {
			t.Errorf("member %d: %v, want StatusTooLarge", i, err)
		}
	}
	if st := f.sw.Stats(); st.Pool.Mismatches == 0 || st.Pool.Contributions != 0 {
		t.Errorf("pool %+v: want the chunks refused, none recorded", st.Pool)
	}
}

// TestSimEagerMulticast: an eager multicast completes at its sender the
// moment it is posted, before any member has it, and with loss on every
// link each member still receives it (the sender's transport resends
// its copy); a larger one completes only after every member has it.
func TestSimEagerMulticast(t *testing.T) {
	for _, loss := range []float64{0, 0.1} {
		f := newSimFabric(t, 7, simnet.LinkConfig{Rate: 100e6, Latency: 5 * time.Microsecond, Loss: loss}, fabric.Config{})
		ms := f.addMembers(4)
		gid := f.join("eager", ms)
		for _, size := range []int{8, endpoint.EagerMulticastMax, endpoint.EagerMulticastMax + 8} {
			data := randBytes(rand.New(rand.NewPCG(uint64(size), 7)), size)
			var sentAt, doneAt, lastRecv time.Time
			pending := 0
			for i := 1; i < len(ms); i++ {
				buf := make([]byte, size)
				pending++
				ms[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: gid, From: 0, Buf: buf}, func(op *endpoint.Op) {
					if op.Err != nil || !bytes.Equal(buf, data) {
						t.Fatalf("seed 7, loss %v, %d B: member %d: %v", loss, size, i, op.Err)
					}
					lastRecv = f.net.Now()
					pending--
				})
			}
			pending++
			sentAt = f.net.Now()
			ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: gid, Buf: bytes.Clone(data), Eager: true}, func(op *endpoint.Op) {
				if op.Err != nil {
					t.Fatalf("seed 7, loss %v, %d B: multicast: %v", loss, size, op.Err)
				}
				doneAt = f.net.Now()
				pending--
			})
			f.run(func() bool { return pending == 0 }, time.Minute, "eager multicast")
			eager := size <= endpoint.EagerMulticastMax
			if eager && (doneAt != sentAt || !doneAt.Before(lastRecv)) {
				t.Errorf("loss %v, %d B: eager multicast done %v after posting, members by %v", loss, size, doneAt.Sub(sentAt), lastRecv.Sub(sentAt))
			}
			if !eager && doneAt.Before(lastRecv) {
				t.Errorf("loss %v, %d B: a multicast above EagerMulticastMax completed at %v, before the last member had it at %v", loss, size, doneAt.Sub(sentAt), lastRecv.Sub(sentAt))
			}
			// Let the eager multicast's ACKs come back before the next size.
			f.net.RunFor(100 * time.Millisecond)
		}
	}
}

// TestSimAggregateMismatchFailsAll: when one member's allreduce differs
// from the others' (another length), every member's operation fails at
// once with StatusBadOperand, whether the odd one contributes first or
// last, instead of the others waiting for the slot to expire; the next
// allreduce, agreed on, works.
// TestSimAggregateJumboMTU: with datagrams of 64 KB (a switch and
// members of MTU 65000, as on loopback), an allreduce's chunks are the
// size of a datagram's payload and the switch's slots hold them: the sum
// is right. (Slots of a fixed 9000 bytes refused every such chunk, as if
// the members' contributions differed.)
func TestSimAggregateJumboMTU(t *testing.T) {
	f := newSimFabric(t, 12, simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}, fabric.Config{Transport: transport.Config{MTU: 65000}})
	ms := f.addMembers(3)
	gid := f.join("jumbo", ms)
	const n = 50000 // float32s: 200 KB, four chunks of up to 64 KB
	inputs := make([][]byte, len(ms))
	want := make([]float32, n)
	for i := range inputs {
		v := make([]float32, n)
		for j := range v {
			v[j] = float32(i*n + j)
			want[j] += v[j]
		}
		inputs[i] = f32bytes(v)
	}
	for i, got := range allreduceRound(f, gid, ms, inputs, wire.DtypeF32, wire.AluAdd, false) {
		if !bytes.Equal(got, f32bytes(want)) {
			t.Fatalf("member %d: the sum differs", i)
		}
	}
	if st := f.sw.Stats(); st.AggRefused != 0 || st.Pool.Mismatches != 0 {
		t.Errorf("%d aggregations refused, %d chunks mismatched", st.AggRefused, st.Pool.Mismatches)
	}
}

func TestSimAggregateMismatchFailsAll(t *testing.T) {
	for _, oddFirst := range []bool{true, false} {
		f := newSimFabric(t, 11, simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}, fabric.Config{})
		ms := f.addMembers(4)
		gid := f.join("mismatch", ms)
		order := []int{0, 1, 2, 3}
		if oddFirst {
			order = []int{3, 0, 1, 2}
		}
		start := f.net.Now()
		failed := 0
		for _, i := range order {
			n := 64
			if i == 3 {
				n = 32
			}
			ms[i].post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: gid, Root: -1,
				Buf: make([]byte, n), Recv: make([]byte, n), Dtype: wire.DtypeF32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
				if !errors.Is(op.Err, wire.StatusBadOperand) {
					t.Errorf("odd first %v: member %d: %v, want BAD_OPERAND", oddFirst, i, op.Err)
				}
				failed++
			})
			f.net.RunFor(50 * time.Microsecond) // contributions arrive in this order
		}
		f.run(func() bool { return failed == len(ms) }, time.Second, "mismatched allreduce")
		if d := f.net.Now().Sub(start); d > 10*time.Millisecond {
			t.Errorf("odd first %v: the members learned after %v", oddFirst, d)
		}
		if st := f.sw.Stats(); st.AggRefused != 1 || st.Pool.InUse != 0 {
			t.Errorf("odd first %v: %d aggregations refused, %d slots in use; want 1 and 0", oddFirst, st.AggRefused, st.Pool.InUse)
		}
		inputs := make([][]byte, len(ms))
		for i := range inputs {
			inputs[i] = f32bytes([]float32{float32(i), 1})
		}
		for i, got := range allreduceRound(f, gid, ms, inputs, wire.DtypeF32, wire.AluAdd, false) {
			if !bytes.Equal(got, f32bytes([]float32{6, 4})) {
				t.Errorf("odd first %v: the next allreduce at member %d: %v", oddFirst, i, got)
			}
		}
	}
}

// TestSimAggregateAcksRide: back-to-back one-packet Allreduces: the
// switch's ACK of each contribution rides on the result, and each
// member's ACK of a result on its next contribution, so that an
// Allreduce costs one datagram up and one down per member, and nothing
// is resent (the senders' timeouts allow for the held ACKs). A rooted
// Reduce's other members get no result, so their contributions are
// acknowledged at once: their calls do not wait for the held-ACK delay.
func TestSimAggregateAcksRide(t *testing.T) {
	seed := int64(73)
	f := newSimFabric(t, seed, impaired(0), fabric.Config{})
	ms := f.addMembers(4)
	gid := f.join("acks", ms)
	const rounds = 200
	in := make([][]byte, len(ms))
	for i := range in {
		in[i] = f32bytes([]float32{float32(i), 1})
	}
	before := make([]transport.Stats, len(ms))
	for i, m := range ms {
		before[i] = m.core.Stats().Transport
	}
	swBefore := f.sw.Stats().Transport
	start := f.net.Elapsed()
	for range rounds {
		for i, got := range allreduceRound(f, gid, ms, in, wire.DtypeF32, wire.AluAdd, false) {
			if !bytes.Equal(got, f32bytes([]float32{6, 4})) {
				t.Fatalf("seed %d: member %d: wrong sum", seed, i)
			}
		}
	}
	t.Logf("%v of virtual time per Allreduce", (f.net.Elapsed()-start)/rounds)
	for i, m := range ms {
		a, b := before[i], m.core.Stats().Transport
		alone := (b.AcksSent - b.AcksPiggybacked) - (a.AcksSent - a.AcksPiggybacked)
		riding := b.AcksPiggybacked - a.AcksPiggybacked
		if retx := b.PacketsRetransmitted - a.PacketsRetransmitted; retx != 0 {
			t.Errorf("seed %d: member %d retransmitted %d packets", seed, i, retx)
		}
		if riding < rounds*9/10 || alone > rounds/10 {
			t.Errorf("seed %d: member %d: %d ACKs rode on contributions and %d went alone over %d results", seed, i, riding, alone, rounds)
		}
	}
	a, b := swBefore, f.sw.Stats().Transport
	alone := (b.AcksSent - b.AcksPiggybacked) - (a.AcksSent - a.AcksPiggybacked)
	riding := b.AcksPiggybacked - a.AcksPiggybacked
	if want := uint64(rounds * len(ms)); riding < want*9/10 || alone > want/10 {
		t.Errorf("seed %d: switch: %d ACKs rode on results and %d went alone over %d contributions", seed, riding, alone, want)
	}
	if retx := b.PacketsRetransmitted - a.PacketsRetransmitted; retx != 0 {
		t.Errorf("seed %d: switch retransmitted %d packets", seed, retx)
	}

	// Reduce to rank 0: the others' calls end once the switch has their
	// contribution, long before transport.MaxAckDelay.
	done := make([]time.Duration, len(ms))
	pending := len(ms)
	start = f.net.Elapsed()
	for i, m := range ms {
		var recv []byte
		if i == 0 {
			recv = make([]byte, len(in[i]))
		}
		m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: gid, Buf: in[i], Recv: recv, Root: 0,
			Dtype: wire.DtypeF32, Alu: wire.AluAdd}, func(op *endpoint.Op) {
			if op.Err != nil {
				t.Errorf("seed %d: member %d reduce: %v", seed, i, op.Err)
			}
			done[i] = f.net.Elapsed() - start
			pending--
		})
	}
	f.run(func() bool { return pending == 0 }, time.Second, "reduce")
	for i, d := range done {
		if d >= transport.MaxAckDelay {
			t.Errorf("seed %d: member %d's reduce took %v (its contribution's ACK was held)", seed, i, d)
		}
	}
	t.Logf("reduce: members done after %v", done)
}
