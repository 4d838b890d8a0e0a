package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Crafted, well-formed datagrams against the sans-I/O Switch: each must
// cost bounded work and leave the switch's state consistent.

// promptly runs fn and fails the test if it has not returned within a
// generous CPU bound (1 s) — the hostile inputs below used to cost seconds
// to minutes. fn runs on its own goroutine so that a regression fails the
// test instead of hanging it.
func promptly(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatalf("%s did not return within 1s", what)
	}
}

// mcastData is a sealed multicast data packet from member src.
func mcastData(t testing.TB, group uint32, src uint16, psn, ackBase uint32, flags wire.Flags) []byte {
	return packet(t, wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: group, Src: src, Dst: wire.MemberAll,
		PSN: psn, AckBase: ackBase, MsgID: 1, MsgLen: 64, Flags: flags}, make([]byte, 64))
}

// mcastAck is a sealed ACK from member src for sender's multicast stream.
func mcastAck(t testing.TB, group uint32, src, sender uint16, a *wire.Ack) []byte {
	frame := make([]byte, a.EncodedLen())
	a.Encode(frame)
	return packet(t, wire.Header{Op: wire.OpAck, Mode: wire.ModeMulticast, Group: group, Src: src, Dst: sender}, frame)
}

// mergedAcks returns the merged ACKs among out that go to addr.
func mergedAcks(t testing.TB, out []netio.Datagram, to netip.AddrPort) []wire.Ack {
	t.Helper()
	var acks []wire.Ack
	for _, d := range out {
		if d.Addr != to {
			continue
		}
		var h wire.Header
		payload, _, err := wire.Parse(d.Buf, &h)
		if err != nil || h.Mode != wire.ModeMulticast || (h.Op != wire.OpAck && h.Op != wire.OpNack) {
			continue
		}
		var a wire.Ack
		if err := a.Decode(payload); err != nil {
			t.Fatalf("merged ACK: %v", err)
		}
		acks = append(acks, a)
	}
	return acks
}

// replicas counts the datagrams in out not addressed to the sender.
func replicas(out []netio.Datagram, sender netip.AddrPort) int {
	n := 0
	for _, d := range out {
		if d.Addr != sender {
			n++
		}
	}
	return n
}

// TestSwitchMulticastFarSequence feeds a multicast stream a data packet
// whose AckBase is 2^31-1 ahead (the sender "abandoned" two billion
// packets) and members' ACKs whose cumulative points and SACK blocks lie
// far from anything forwarded. The switch must handle each in bounded work
// (a jump of a window or more resets the window, once the sender echoes
// the switch's challenge: the jump may be forged), and the forged ACKs must
// not corrupt the merged state: afterwards the real members' ACKs still
// move the merged ACK exactly as far as every member has got.
func TestSwitchMulticastFarSequence(t *testing.T) {
	f := newBenchFabric(t, 3)
	sw, now, g := f.sw, f.now, f.group
	sender := f.addrs[0]
	var out []netio.Datagram
	poll := func() []netio.Datagram {
		out, _ = sw.Poll(now, out[:0])
		return out
	}
	const base = 1000
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, base, base, 0)})
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, base+1, base, 0)})
	if n := replicas(poll(), sender); n != 4 {
		t.Fatalf("first packets: %d replicas, want 4", n)
	}

	// AckBase far ahead, and the packet at it.
	far := uint32(base + 1<<31 - 1)
	promptly(t, "a data packet with AckBase 2^31-1 ahead", func() {
		sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, far, far, 0)})
	})
	// The jump (whose source may be forged) is not taken at once: the
	// switch challenges the sender, and a wrong echo does nothing; the
	// sender's echo restarts the stream, and the packet, resent, goes out.
	if n := replicas(poll(), sender); n != 0 || sw.Stats().MulticastRestartsRefused != 1 {
		t.Fatalf("jump: %d replicas, %d challenged; want 0, 1", n, sw.Stats().MulticastRestartsRefused)
	}
	echoChallenge := func(ok bool, resend []byte) {
		t.Helper()
		nonce, found := senderChallenge(t, out, sender)
		if !found {
			t.Fatal("no challenge to the sender")
		}
		if !ok {
			nonce++
		}
		sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastAck(t, g, 0, wire.MemberAll, &wire.Ack{Cum: nonce, Window: 1024})})
		sw.Receive(now, netio.Datagram{Addr: sender, Buf: resend})
	}
	echoChallenge(false, mcastData(t, g, 0, far, far, 0))
	if n := replicas(poll(), sender); n != 0 {
		t.Fatalf("after a wrong echo: %d replicas, want 0", n)
	}
	now = now.Add(20 * time.Millisecond) // past the gap between two challenges
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, far, far, 0)})
	poll()
	echoChallenge(true, mcastData(t, g, 0, far, far, 0))
	if n := replicas(poll(), sender); n != 2 {
		t.Fatalf("packet after the jump: %d replicas, want 2", n)
	}
	if st := sw.Stats(); st.MulticastResets != 1 {
		t.Fatalf("MulticastResets = %d, want 1", st.MulticastResets)
	}

	// Forged ACKs from member 1: cumulative point far ahead, then SACK
	// blocks far away, wrapping around, wider than the window.
	hostile := []wire.Ack{
		{Cum: far + 1<<30, Window: 1024},
		{Cum: far - 1<<30, Window: 1024},
		{Cum: far, Window: 1024, NBlocks: 3, Blocks: [wire.MaxSackBlocks]wire.SackBlock{
			{Start: far + 5, End: far + 1<<31 - 1},
			{Start: far + 1<<30, End: far + 1<<30 + 1<<20},
			{Start: far + 1<<31 + 1<<30, End: far + 1<<31 + 1<<30 + 10}}},
	}
	for i := range hostile {
		promptly(t, "a crafted ACK", func() {
			sw.Receive(now, netio.Datagram{Addr: f.addrs[1], Buf: mcastAck(t, g, 1, 0, &hostile[i])})
		})
	}
	poll()

	// Real traffic: packets far+1 and far+2; member 1 acknowledges both,
	// member 2 only the first. The merged ACK must say far+2 (member 2
	// lacks far+2), whatever the forged ACKs claimed.
	for _, psn := range []uint32{far + 1, far + 2} {
		sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, psn, far, 0)})
	}
	if n := replicas(poll(), sender); n != 4 {
		t.Fatalf("two packets: %d replicas, want 4 (the forged ACKs must not count as member 1 having them)", n)
	}
	sw.Receive(now, netio.Datagram{Addr: f.addrs[1], Buf: mcastAck(t, g, 1, 0, &wire.Ack{Cum: far + 3, Window: 1024})})
	sw.Receive(now, netio.Datagram{Addr: f.addrs[2], Buf: mcastAck(t, g, 2, 0, &wire.Ack{Cum: far + 2, Window: 1024})})
	acks := mergedAcks(t, poll(), sender)
	if len(acks) != 1 || acks[0].Cum != far+2 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, far+2)
	}
	sw.Receive(now, netio.Datagram{Addr: f.addrs[2], Buf: mcastAck(t, g, 2, 0, &wire.Ack{Cum: far + 3, Window: 1024})})
	acks = mergedAcks(t, poll(), sender)
	if len(acks) != 1 || acks[0].Cum != far+3 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, far+3)
	}
	if st := sw.Stats(); st.MulticastAcksIgnored < 2 {
		t.Fatalf("MulticastAcksIgnored = %d, want at least 2", st.MulticastAcksIgnored)
	}

	// A SYN far behind restarts the stream, in bounded work too, once the
	// sender echoes the challenge.
	promptly(t, "a SYN with AckBase 2^31 behind", func() {
		sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, base, base, wire.FlagSyn)})
	})
	if n := replicas(poll(), sender); n != 0 {
		t.Fatalf("SYN on a live stream: %d replicas, want 0", n)
	}
	echoChallenge(true, mcastData(t, g, 0, base, base, wire.FlagSyn))
	if n := replicas(poll(), sender); n != 2 {
		t.Fatalf("after the SYN: %d replicas, want 2", n)
	}
}

// TestSwitchMulticastStaleStart: a datagram forged in a member's name
// starts its multicast stream at the switch 2^20 PSNs ahead of where the
// member's real stream is; the real packets, which carry no SYN (their
// sender had its stream acknowledged before, say, the switch lost its
// state), arrive behind the forged point.
// The switch used to take them for packets every member had and answer
// with merged ACKs at the forged point, which the sender ignores, forever.
// An AckBase further behind than transport.StaleSpan is now challenged,
// the sender's echo restarts the stream, and its packets are forwarded; a
// packet less far behind (a late one) is re-acknowledged as before.
func TestSwitchMulticastStaleStart(t *testing.T) {
	f := newBenchFabric(t, 3)
	sw, now, g := f.sw, f.now, f.group
	sender := f.addrs[0]
	var out []netio.Datagram
	poll := func() []netio.Datagram {
		out, _ = sw.Poll(now, out[:0])
		return out
	}
	const real = 5000
	forged := uint32(real + 1<<20)
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, forged, forged, wire.FlagSyn)})
	if n := replicas(poll(), sender); n != 2 {
		t.Fatalf("forged first packet: %d replicas, want 2", n)
	}
	// A late packet a few windows behind: re-acknowledged, not challenged.
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, forged-4096, forged-4096, 0)})
	if _, found := senderChallenge(t, poll(), sender); found || sw.Stats().MulticastRestartsRefused != 0 {
		t.Fatalf("a packet 4096 behind was challenged (%d)", sw.Stats().MulticastRestartsRefused)
	}
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, real, real, 0)})
	if n := replicas(poll(), sender); n != 0 || sw.Stats().MulticastRestartsRefused != 1 {
		t.Fatalf("real packet 2^20 behind: %d replicas, %d challenged; want 0, 1", n, sw.Stats().MulticastRestartsRefused)
	}
	nonce, found := senderChallenge(t, out, sender)
	if !found {
		t.Fatal("no challenge to the sender")
	}
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastAck(t, g, 0, wire.MemberAll, &wire.Ack{Cum: nonce, Window: 1024})})
	sw.Receive(now, netio.Datagram{Addr: sender, Buf: mcastData(t, g, 0, real, real, 0)})
	if n := replicas(poll(), sender); n != 2 || sw.Stats().MulticastResets != 1 {
		t.Fatalf("after the echo: %d replicas, %d restarts; want 2, 1", n, sw.Stats().MulticastResets)
	}
	for _, m := range []uint16{1, 2} {
		sw.Receive(now, netio.Datagram{Addr: f.addrs[m], Buf: mcastAck(t, g, m, 0, &wire.Ack{Cum: real + 1, Window: 1024})})
	}
	if acks := mergedAcks(t, poll(), sender); len(acks) != 1 || acks[0].Cum != real+1 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, real+1)
	}
}

// senderChallenge finds the switch's challenge to a multicast sender (an
// ACK with FlagSyn to it) among out and returns its nonce.
func senderChallenge(t testing.TB, out []netio.Datagram, sender netip.AddrPort) (uint32, bool) {
	t.Helper()
	for _, d := range out {
		var h wire.Header
		if _, _, err := wire.Parse(d.Buf, &h); err == nil && d.Addr == sender && h.Op == wire.OpAck && h.Flags&wire.FlagSyn != 0 {
			return h.PSN, true
		}
	}
	return 0, false
}

// drive runs the in-memory fabric until cond holds, as run does, but when
// a round moves no datagram it jumps virtual time to the earliest deadline
// the switch or a core asked for, so that timeouts of seconds take a few
// rounds. drop, if not nil, discards datagrams (from, to) it returns true
// for. It fails the test if cond does not hold within limit of virtual
// time.
func (f *benchFabric) drive(t *testing.T, cond func() bool, limit time.Duration, drop func(from, to netip.AddrPort, pkt []byte) bool) {
	t.Helper()
	end := f.now.Add(limit)
	for !cond() {
		if f.now.After(end) {
			t.Fatalf("condition not reached within %v of virtual time; switch %+v", limit, f.sw.Stats())
		}
		moved := 0
		var next time.Time
		later := func(at time.Time) {
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		var at time.Time
		f.swOut, at = f.sw.Poll(f.now, f.swOut[:0])
		later(at)
		for _, d := range f.swOut {
			if i, ok := f.byAdr[d.Addr]; ok && (drop == nil || !drop(benchSwitchAddr, d.Addr, d.Buf)) {
				f.cores[i].Receive(f.now, netio.Datagram{Addr: benchSwitchAddr, Buf: d.Buf})
				moved++
			}
		}
		clear(f.swOut)
		for i, c := range f.cores {
			var done []*endpoint.Op
			f.coreOut, done, at = c.Poll(f.now, f.coreOut[:0])
			later(at)
			for _, op := range done {
				op.Token = 1
				moved++
			}
			for _, d := range f.coreOut {
				if d.Addr == benchSwitchAddr && (drop == nil || !drop(f.addrs[i], d.Addr, d.Buf)) {
					f.sw.Receive(f.now, netio.Datagram{Addr: f.addrs[i], Buf: d.Buf})
					moved++
				}
			}
			clear(f.coreOut)
		}
		switch {
		case moved > 0 || next.IsZero() || !next.After(f.now):
			f.now = f.now.Add(time.Microsecond)
		default:
			f.now = next
		}
	}
}

// aggOp is an allreduce (sum of i64) of vals by core i of f's group.
func aggOp(f *benchFabric, vals []int64, timeout time.Duration) *endpoint.Op {
	return &endpoint.Op{Kind: endpoint.KindAggregate, Peer: benchSwitchAddr, Group: f.group, Root: -1,
		Buf: i64le(vals), Recv: make([]byte, 8*len(vals)), Dtype: wire.DtypeI64, Alu: wire.AluAdd, Timeout: timeout}
}

func i64le(vs []int64) []byte {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

func allDone(ops []*endpoint.Op) func() bool {
	return func() bool {
		for _, op := range ops {
			if !opDone(op) {
				return false
			}
		}
		return true
	}
}

// TestSwitchAggregationSlotsExpire: two of three members run eight
// allreduces that the third never joins, and give up on them (their own
// timeout). The switch frees the eight slots AggTimeout after they opened
// (the pool has eight), the third member's late contributions to those
// aggregations are refused rather than completing the stale slots, and
// the next allreduce of all three runs on the freed slots with the right
// sum.
func TestSwitchAggregationSlotsExpire(t *testing.T) {
	const aggTimeout = 2 * time.Second
	f := newBenchFabricConfig(t, 3, fabric.Config{Pool: fabric.PoolConfig{Slots: 8}, AggTimeout: aggTimeout})
	start := f.now
	var early []*endpoint.Op
	for id := range 8 {
		for i := range 2 {
			op := aggOp(f, []int64{int64(100*id + i), 1}, 500*time.Millisecond)
			if err := f.cores[i].Post(f.now, op); err != nil {
				t.Fatal(err)
			}
			early = append(early, op)
		}
	}
	f.drive(t, allDone(early), time.Second, nil)
	for i, op := range early {
		if !errors.Is(op.Err, endpoint.ErrTimeout) {
			t.Fatalf("abandoned allreduce %d: err %v, want ErrTimeout", i, op.Err)
		}
	}
	if st := f.sw.Stats(); st.Pool.InUse != 8 {
		t.Fatalf("%d slots in use after the abandoned allreduces, want 8", st.Pool.InUse)
	}
	// Past AggTimeout the switch has freed them.
	f.drive(t, func() bool { return f.now.Sub(start) > aggTimeout+100*time.Millisecond }, 2*aggTimeout, nil)
	if st := f.sw.Stats(); st.Pool.InUse != 0 || st.AggExpired != 8 {
		t.Fatalf("after AggTimeout: %d slots in use, %d expired; want 0 and 8", st.Pool.InUse, st.AggExpired)
	}

	// The third member now reaches the eight allreduces: refused, not
	// completed with the others' abandoned contributions.
	var late []*endpoint.Op
	for id := range 8 {
		op := aggOp(f, []int64{int64(100*id + 2), 1}, time.Minute)
		if err := f.cores[2].Post(f.now, op); err != nil {
			t.Fatal(err)
		}
		late = append(late, op)
	}
	f.drive(t, allDone(late), time.Second, nil)
	for id, op := range late {
		if !errors.Is(op.Err, wire.StatusBusy) {
			t.Fatalf("late contribution to expired allreduce %d: err %v, want StatusBusy", id+1, op.Err)
		}
	}
	if st := f.sw.Stats(); st.AggStale != 8 || st.Pool.InUse != 0 {
		t.Fatalf("late contributions: %d refused as stale, %d slots in use; want 8 and 0", st.AggStale, st.Pool.InUse)
	}

	// The members acknowledge the switch's events (their ACKs reach its
	// engine): nothing it sent is waiting to be resent or failed. Every
	// message is one packet: the join replies, held back until the
	// members' addresses were validated, went out whole.
	if tr := f.sw.Stats().Transport; tr.PacketsRetransmitted != 0 || tr.MessagesFailed != 0 || tr.MessagesCompleted != tr.PacketsSent {
		t.Fatalf("switch transport after the refusals: %+v; want every event acknowledged", tr)
	}
	// The next allreduce of all three succeeds with the right sum.
	allreduceOfThree(t, f, time.Second, "after the expiry")
}

// TestSwitchAggregationSlotsReclaimed: eight abandoned allreduces hold an
// eight-slot pool. While no one needs a slot they stay (a slow rank may
// still come: AggTimeout is long); once a new allreduce finds the pool
// full, slots open longer than AggReclaimAfter are freed, and it
// completes with the right sum.
func TestSwitchAggregationSlotsReclaimed(t *testing.T) {
	const reclaim = 2 * time.Second
	f := newBenchFabricConfig(t, 3, fabric.Config{Pool: fabric.PoolConfig{Slots: 8}, AggTimeout: time.Hour, AggReclaimAfter: reclaim})
	start := f.now
	var early []*endpoint.Op
	for id := range 8 {
		for i := range 3 {
			op := aggOp(f, []int64{int64(100*id + i), 1}, 500*time.Millisecond)
			if err := f.cores[i].Post(f.now, op); err != nil {
				t.Fatal(err)
			}
			if i == 2 {
				f.cores[i].Cancel(op) // the third member gives up before it sends
			}
			early = append(early, op)
		}
	}
	f.drive(t, allDone(early), time.Second, nil)
	f.drive(t, func() bool { return f.now.Sub(start) > 2*reclaim }, 4*reclaim, nil)
	if st := f.sw.Stats(); st.Pool.InUse != 8 || st.AggExpired != 0 {
		t.Fatalf("with no one short of slots: %d in use, %d expired; want 8 and 0", st.Pool.InUse, st.AggExpired)
	}
	allreduceOfThree(t, f, time.Minute, "after the reclaim")
	if st := f.sw.Stats(); st.AggExpired == 0 {
		t.Fatal("no slot reclaimed")
	}
}

// allreduceOfThree runs an allreduce of the three members, driving the
// fabric for at most limit, and checks every member got the right sum.
func allreduceOfThree(t *testing.T, f *benchFabric, limit time.Duration, when string) {
	t.Helper()
	var ops []*endpoint.Op
	for i := range 3 {
		op := aggOp(f, []int64{int64(1000 * (i + 1)), int64(i)}, time.Minute)
		if err := f.cores[i].Post(f.now, op); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	f.drive(t, allDone(ops), limit, nil)
	for i, op := range ops {
		if op.Err != nil || !bytes.Equal(op.Recv, i64le([]int64{6000, 3})) {
			t.Fatalf("member %d: allreduce %s: err %v, result %v", i, when, op.Err, op.Recv)
		}
	}
}
