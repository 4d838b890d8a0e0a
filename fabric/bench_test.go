package fabric_test

import (
	"encoding/binary"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Benchmarks of the sans-I/O Switch: no sockets, virtual time. Groups are
// built through the real control path — endpoint.Core instances post JOIN
// requests that travel to the switch through an in-memory loop — and the
// forwarding benchmarks then feed the switch hand-built packets, so that
// they time the switch alone. Run with -benchmem: the forwarding paths
// (unicast, multicast replication with ACK merging) should not allocate.

// benchSwitchAddr is the switch's address in the in-memory loop.
var benchSwitchAddr = netip.MustParseAddrPort("10.0.0.1:7471")

// benchFabric is a Switch and n member cores wired by an in-memory loop.
type benchFabric struct {
	tb    testing.TB
	sw    *fabric.Switch
	now   time.Time
	cores []*endpoint.Core
	addrs []netip.AddrPort
	byAdr map[netip.AddrPort]int
	group uint32
	// Reused output buffers.
	swOut   []netio.Datagram
	coreOut []netio.Datagram
	// swTime accumulates the time spent in the switch's Receive and Poll
	// (pump), to tell it from the cores' share.
	swTime time.Duration
}

// newBenchFabric creates a switch and n cores and makes the cores join one
// job through the control plane.
func newBenchFabric(tb testing.TB, n int) *benchFabric {
	tb.Helper()
	return newBenchFabricConfig(tb, n, fabric.Config{})
}

// newBenchFabricConfig is newBenchFabric with a switch configured by cfg
// (its Token and HeartbeatTimeout are set here).
func newBenchFabricConfig(tb testing.TB, n int, cfg fabric.Config) *benchFabric {
	tb.Helper()
	cfg.Token = []byte("bench")
	cfg.HeartbeatTimeout = time.Hour // virtual time barely moves; no heartbeats needed
	sw, err := fabric.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	f := &benchFabric{tb: tb, sw: sw, now: time.Unix(1e9, 0), byAdr: make(map[netip.AddrPort]int)}
	ops := make([]*endpoint.Op, n)
	for i := range n {
		c, err := endpoint.NewCore(endpoint.Config{Transport: transport.Config{Seed: uint64(i + 1)}})
		if err != nil {
			tb.Fatal(err)
		}
		c.EnableGroups()
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), 9000)
		f.cores = append(f.cores, c)
		f.addrs = append(f.addrs, addr)
		f.byAdr[addr] = i
		req := &ctrl.Msg{Type: ctrl.Join, Job: "bench", Size: n, Rank: i, MTU: 9000}
		if slices.Contains(cfg.Children, addr) {
			// A child switch (of a tree) joining a member behind it.
			req.Type = ctrl.JoinVia
			req.Members = []ctrl.MemberInfo{{ID: uint16(i), Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, byte(i + 1)}), 9000)}}
		}
		buf, err := secure.AppendCtrl(nil, req, []byte("bench"))
		if err != nil {
			tb.Fatal(err)
		}
		ops[i] = &endpoint.Op{Kind: endpoint.KindControl, Peer: benchSwitchAddr, Buf: buf}
		if err := c.Post(f.now, ops[i]); err != nil {
			tb.Fatal(err)
		}
	}
	f.run(func() bool {
		for _, op := range ops {
			if !opDone(op) {
				return false
			}
		}
		return true
	})
	for i, op := range ops {
		if op.Err != nil {
			tb.Fatalf("member %d join: %v", i, op.Err)
		}
		var resp ctrl.Msg
		if err := secure.ParseCtrl(op.Resp, &resp, []byte("bench")); err != nil {
			tb.Fatalf("member %d join response: %v", i, err)
		}
		if int(resp.Member) != i || len(resp.Members) != n {
			tb.Fatalf("member %d: joined as %d of %d", i, resp.Member, len(resp.Members))
		}
		f.cores[i].SetMember(resp.Group, resp.Member)
		f.group = resp.Group
	}
	return f
}

// opDone reports whether op has completed (it has a result or an error).
// The loop records completions in done; see run.
func opDone(op *endpoint.Op) bool { return op.Token == 1 }

// run pumps datagrams between the switch and the cores, advancing virtual
// time by 1µs per round, until cond holds; completed ops get Token 1.
func (f *benchFabric) run(cond func() bool) {
	for round := 0; !cond(); round++ {
		if round > 1e6 {
			f.tb.Fatal("the in-memory fabric made no progress in 10^6 rounds")
		}
		f.now = f.now.Add(time.Microsecond)
		f.pump()
	}
}

// pump does one round: the switch's output to the cores, then every
// core's output to the switch.
func (f *benchFabric) pump() {
	t0 := time.Now()
	f.swOut, _ = f.sw.Poll(f.now, f.swOut[:0])
	f.swTime += time.Since(t0)
	for _, d := range f.swOut {
		if i, ok := f.byAdr[d.Addr]; ok {
			f.cores[i].Receive(f.now, netio.Datagram{Addr: benchSwitchAddr, Buf: d.Buf})
		}
	}
	clear(f.swOut)
	for i, c := range f.cores {
		var done []*endpoint.Op
		f.coreOut, done, _ = c.Poll(f.now, f.coreOut[:0])
		for _, op := range done {
			op.Token = 1
		}
		t0 := time.Now()
		for _, d := range f.coreOut {
			if d.Addr == benchSwitchAddr {
				f.sw.Receive(f.now, netio.Datagram{Addr: f.addrs[i], Buf: d.Buf})
			}
		}
		f.swTime += time.Since(t0)
		clear(f.coreOut)
	}
}

// packet builds a sealed packet of h with payload.
func packet(tb testing.TB, h wire.Header, payload []byte) []byte {
	tb.Helper()
	h.Version = wire.Version
	pkt, err := wire.AppendPacket(nil, &h, payload)
	if err != nil {
		tb.Fatal(err)
	}
	return pkt
}

// reportRate reports n packets per benchmark iteration as a rate.
func reportRate(b *testing.B, n int, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/s, unit)
	}
}

// BenchmarkSwitchUnicastForward times one 1 KiB unicast packet from member
// 0 to member 1 of a group: Receive (parse, member checks, copy into a
// forwarding buffer) and the Poll that hands it out.
func BenchmarkSwitchUnicastForward(b *testing.B) {
	f := newBenchFabric(b, 2)
	pkt := packet(b, wire.Header{Op: wire.OpData, Mode: wire.ModeUnicast, Group: f.group, Src: 0, Dst: 1,
		PSN: 1, MsgID: 1, MsgLen: 1024}, make([]byte, 1024))
	sw, from, to, now := f.sw, f.addrs[0], f.addrs[1], f.now
	out := make([]netio.Datagram, 0, 64)
	// Warm up and check the path once.
	sw.Receive(now, netio.Datagram{Addr: from, Buf: pkt})
	out, _ = sw.Poll(now, out[:0])
	if len(out) != 1 || out[0].Addr != to || len(out[0].Buf) != len(pkt) {
		b.Fatalf("forwarded %d datagrams (%+v), want 1 to %v", len(out), out, to)
	}
	before := sw.Stats().UnicastOut
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sw.Receive(now, netio.Datagram{Addr: from, Buf: pkt})
		out, _ = sw.Poll(now, out[:0])
	}
	b.StopTimer()
	if got := sw.Stats().UnicastOut - before; got != uint64(b.N) {
		b.Fatalf("forwarded %d packets in %d iterations", got, b.N)
	}
	reportRate(b, 1, "pkts/s")
}

// BenchmarkSwitchMulticastFanout8 times one 1 KiB multicast data packet
// from member 0 of an 8-member group, replicated to the 7 others, plus the
// 7 members' ACKs for it, which the switch merges into the ACK stream back
// to the sender so that the merge window keeps moving.
func BenchmarkSwitchMulticastFanout8(b *testing.B) {
	const n = 8
	f := newBenchFabric(b, n)
	sw, now := f.sw, f.now
	const base = 1000
	data := packet(b, wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: f.group, Src: 0, Dst: wire.MemberAll,
		PSN: base, AckBase: base, MsgID: 1, MsgLen: 1024}, make([]byte, 1024))
	acks := make([][]byte, n)
	var frame [wire.AckFixedLen]byte
	for i := 1; i < n; i++ {
		acks[i] = packet(b, wire.Header{Op: wire.OpAck, Mode: wire.ModeMulticast, Group: f.group, Src: uint16(i), Dst: 0},
			frame[:])
	}
	// setPSN rewrites the data packet's PSN and AckBase and the ACKs'
	// cumulative point in place, and reseals them: no allocation.
	setPSN := func(psn uint32) {
		binary.BigEndian.PutUint32(data[16:], psn)
		binary.BigEndian.PutUint32(data[20:], psn)
		wire.Seal(data)
		a := wire.Ack{Cum: psn + 1, Window: 1024}
		for i := 1; i < n; i++ {
			a.Encode(acks[i][wire.HeaderLen:])
			wire.Seal(acks[i])
		}
	}
	out := make([]netio.Datagram, 0, 256)
	psn := uint32(base)
	step := func() {
		setPSN(psn)
		sw.Receive(now, netio.Datagram{Addr: f.addrs[0], Buf: data})
		for i := 1; i < n; i++ {
			sw.Receive(now, netio.Datagram{Addr: f.addrs[i], Buf: acks[i]})
		}
		out, _ = sw.Poll(now, out[:0])
		psn++
	}
	// Warm up (the stream's merge state is created on the first packet)
	// and check: 7 replicas, and merged ACKs to the sender that reach the
	// new cumulative point.
	for range 2 {
		step()
	}
	replicas := 0
	for _, d := range out {
		if d.Addr != f.addrs[0] {
			replicas++
		}
	}
	if replicas != n-1 {
		b.Fatalf("%d replicas, want %d", replicas, n-1)
	}
	st0 := sw.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
	b.StopTimer()
	st := sw.Stats()
	if got := st.MulticastOut - st0.MulticastOut; got != uint64((n-1)*b.N) {
		b.Fatalf("%d replicas in %d iterations", got, b.N)
	}
	reportRate(b, n-1, "replicas/s")
	reportRate(b, n, "pkts-in/s")
	b.ReportMetric(float64(st.MergedAcksOut-st0.MergedAcksOut)/float64(b.N), "merged-acks/op")
}

// BenchmarkSwitchAggregate8 times an allreduce of one 8 KiB f32 chunk over
// 8 members: each member's core sends its contribution to the switch, the
// switch reduces the 8 in a pool slot and sends the result to every
// member, and the members acknowledge. The whole in-memory fabric is
// timed (ns/op, allocs/op include the cores); switch-ns/op is the share of
// the switch's Receive and Poll.
func BenchmarkSwitchAggregate8(b *testing.B) {
	const n, elems = 8, 2048 // 8 KiB of f32: one chunk under the default MTU
	f := newBenchFabric(b, n)
	ops := make([]*endpoint.Op, n)
	for i := range n {
		buf := make([]byte, 4*elems)
		for j := range elems {
			binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(float32(i+j%5)))
		}
		ops[i] = &endpoint.Op{Kind: endpoint.KindAggregate, Peer: benchSwitchAddr, Group: f.group, Root: -1,
			Buf: buf, Recv: make([]byte, 4*elems), Dtype: wire.DtypeF32, Alu: wire.AluAdd}
	}
	allDone := func() bool {
		for _, op := range ops {
			if !opDone(op) {
				return false
			}
		}
		return true
	}
	iter := func() {
		for i, op := range ops {
			op.Token, op.Err = 0, nil
			if err := f.cores[i].Post(f.now, op); err != nil {
				b.Fatalf("member %d: %v", i, err)
			}
		}
		f.run(allDone)
	}
	iter()
	for i, op := range ops {
		if op.Err != nil {
			b.Fatalf("member %d allreduce: %v", i, op.Err)
		}
		for j := range elems {
			want := float32(0)
			for k := range n {
				want += float32(k + j%5)
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(op.Recv[4*j:])); got != want {
				b.Fatalf("member %d element %d: %v, want %v", i, j, got, want)
			}
		}
	}
	st0 := f.sw.Stats()
	f.swTime = 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		iter()
	}
	b.StopTimer()
	for i, op := range ops {
		if op.Err != nil {
			b.Fatalf("member %d allreduce: %v", i, op.Err)
		}
	}
	st := f.sw.Stats()
	if got := st.Pool.Completions - st0.Pool.Completions; got != uint64(b.N) {
		b.Fatalf("%d slot completions in %d iterations", got, b.N)
	}
	b.ReportMetric(float64(f.swTime.Nanoseconds())/float64(b.N), "switch-ns/op")
	in := st.AggregateIn - st0.AggregateIn
	b.ReportMetric(float64(in)/float64(b.N), "contribs/op")
	if s := f.swTime.Seconds(); s > 0 {
		b.ReportMetric(float64(in)/s, "switch-contribs/s")
	}
	reportRate(b, 1, "reductions/s")
}
