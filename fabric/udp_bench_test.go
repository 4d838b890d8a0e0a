package fabric_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Benchmarks of the forwarding node on real UDP over loopback: a
// fabric.Server on its own socket, members on theirs, every packet through
// the kernel. Unlike bench_test.go they time the whole system — sockets,
// the members' engines and the switch — so the numbers depend on the host
// (cores, loopback, other load); the switch's own counters give the rates
// at the switch. Each benchmark run sets up a fresh switch and members and
// tears them down in b.Cleanup.

// udpBenchTimeout bounds one benchmark run's setup and every wait in it.
const udpBenchTimeout = 60 * time.Second

// udpBenchMsg is the message size of the multicast and aggregation
// benchmarks, in bytes.
const udpBenchMsg = 1 << 20

// startBenchServer starts a switch with cfg on a loopback socket; the
// server closes at the end of the run. It runs without a fabric token
// (the raw members tag their control messages under the empty key).
func startBenchServer(b *testing.B, cfg fabric.Config) *fabric.Server {
	b.Helper()
	cfg.Insecure = true
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		b.Fatal(err)
	}
	sw, err := fabric.New(cfg)
	if err != nil {
		conn.Close()
		b.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	b.Cleanup(func() { srv.Close() })
	return srv
}

// listenBench opens n loopback endpoints, closed at the end of the run.
func listenBench(b *testing.B, n int) []*endpoint.Endpoint {
	b.Helper()
	eps := make([]*endpoint.Endpoint, n)
	for i := range eps {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ep.Close() })
		eps[i] = ep
	}
	return eps
}

// joinBench makes n endpoints join one job at srv, concurrently (the
// rendezvous answers when all have joined). Member i has rank i.
func joinBench(b *testing.B, ctx context.Context, srv *fabric.Server, n int, opts endpoint.FabricOptions) []*endpoint.Group {
	b.Helper()
	eps := listenBench(b, n)
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			opts.Insecure = true
			gs[i], errs[i] = ep.JoinJob(ctx, srv.Addr().String(), "bench", n, i, opts)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("member %d join: %v", i, err)
		}
	}
	return gs
}

// waitOps waits for every op in ops to complete, or fails the benchmark at
// ctx's deadline.
func waitOps(b *testing.B, ctx context.Context, what string, ops []*endpoint.Op) {
	b.Helper()
	for i, op := range ops {
		if op == nil {
			continue
		}
		select {
		case <-op.Done():
		case <-ctx.Done():
			b.Fatalf("%s %d: %v", what, i, ctx.Err())
		}
		if op.Err != nil {
			b.Fatalf("%s %d: %v", what, i, op.Err)
		}
	}
}

// perSecond reports count, accumulated over the timed part of the run, as
// a rate.
func perSecond(b *testing.B, count float64, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(count/s, unit)
	}
}

// reportGoodput reports bytesPerOp of application data per iteration in
// Gbit/s.
func reportGoodput(b *testing.B, bytesPerOp int, unit string) {
	perSecond(b, float64(bytesPerOp)*8*float64(b.N)/1e9, unit)
}

// rawMember is a group member without an Endpoint: an endpoint.Core driven
// over its own UDP socket by a loop.Driver, so that the benchmark can also
// send and receive raw group packets on that socket. Received datagrams of
// a non-zero group (the raw traffic) are counted and dropped; the others
// (control, group 0) go to the core.
type rawMember struct {
	conn *netio.UDPConn
	drv  *loop.Driver

	// writeMu serialises writes: the driver and the benchmark both send
	// on conn.
	writeMu sync.Mutex

	mu    sync.Mutex // owns core, rawIn
	core  *endpoint.Core
	rawIn uint64 // raw datagrams received since the last Poll

	done      chan *endpoint.Op // completed ops; room for the few posted
	raw       atomic.Uint64     // raw group datagrams received
	rawNotify chan struct{}     // signalled (capacity 1) after raw datagrams arrive
}

// newRawMember opens a loopback socket and starts driving a core on it;
// the member closes at the end of the run.
func newRawMember(b *testing.B, seed uint64) *rawMember {
	b.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		b.Fatal(err)
	}
	core, err := endpoint.NewCore(endpoint.Config{Transport: transport.Config{Seed: seed}})
	if err != nil {
		conn.Close()
		b.Fatal(err)
	}
	core.EnableGroups()
	m := &rawMember{conn: conn, core: core, done: make(chan *endpoint.Op, 4), rawNotify: make(chan struct{}, 1)}
	m.drv = loop.New((*rawMachine)(m), &m.mu, []netio.Conn{serialConn{conn, &m.writeMu}}, loop.Config{Name: "raw member"})
	m.drv.Start()
	b.Cleanup(func() {
		if err := m.close(); err != nil {
			b.Errorf("raw member %v: %v", conn.LocalAddr(), err)
		}
	})
	return m
}

// serialConn is a Conn whose writes take mu.
type serialConn struct {
	netio.Conn
	mu *sync.Mutex
}

func (c serialConn) WriteBatch(ds []netio.Datagram) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.WriteBatch(ds)
}

// rawMachine is the member's core as its driver runs it: raw group
// datagrams are counted instead of stepped, and completions go to done.
type rawMachine rawMember

func (m *rawMachine) Receive(now time.Time, d netio.Datagram) {
	if b := d.Buf; len(b) >= wire.HeaderLen && binary.BigEndian.Uint32(b[4:8]) != 0 {
		m.rawIn++
		return
	}
	m.core.Receive(now, d)
}

func (m *rawMachine) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	if m.rawIn > 0 {
		m.raw.Add(m.rawIn)
		m.rawIn = 0
		select {
		case m.rawNotify <- struct{}{}:
		default:
		}
	}
	out, done, next := m.core.Poll(now, out)
	for _, op := range done {
		select {
		case m.done <- op:
		default:
		}
	}
	return out, next
}

// write sends ds on the member's socket.
func (m *rawMember) write(ds []netio.Datagram) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	return m.conn.WriteBatch(ds)
}

// join posts a JOIN of job (size members, as rank) to sw and waits for the
// response. The members of a job must join concurrently.
func (m *rawMember) join(ctx context.Context, sw netip.AddrPort, job string, size, rank int) (*ctrl.Msg, error) {
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.Join, Job: job, Size: size, Rank: rank, MTU: 9000}, nil)
	if err != nil {
		return nil, err
	}
	op := &endpoint.Op{Kind: endpoint.KindControl, Peer: sw, Buf: buf}
	m.mu.Lock()
	now := time.Now()
	err = m.core.Post(now, op)
	if err == nil {
		m.drv.PumpLocked(now)
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case got := <-m.done:
		if got != op {
			return nil, fmt.Errorf("completion of an op not posted: %+v", got)
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if op.Err != nil {
		return nil, op.Err
	}
	resp := &ctrl.Msg{}
	if err := secure.ParseCtrl(op.Resp, resp, nil); err != nil {
		return nil, err
	}
	if !resp.Resp || resp.Type != ctrl.Join {
		return nil, fmt.Errorf("join answered with %v (resp %v)", resp.Type, resp.Resp)
	}
	m.mu.Lock()
	m.core.SetMember(resp.Group, resp.Member)
	m.mu.Unlock()
	return resp, nil
}

// close stops the member and returns the first socket error it met.
func (m *rawMember) close() error {
	cerr := m.drv.Close()
	return errors.Join(m.drv.Err(), cerr)
}

// BenchmarkUDPSwitchUnicast: member A sends 1 KiB group-unicast data
// packets to member B through the switch, which relays each unchanged to
// B's address; one op is one packet received at B. The members are raw
// (no transport on the data path, nothing acknowledged), so this is the
// switch's relay rate through the kernel: A keeps at most 256 packets in
// flight and writes 64 per sendmmsg; packets lost to socket overflow are
// written off after a 5ms stall and counted in loss-%.
func BenchmarkUDPSwitchUnicast(b *testing.B) {
	const (
		batch   = 64
		window  = 256
		stall   = 5 * time.Millisecond
		payload = 1024
	)
	// The raw members send no heartbeats (and B sends nothing at all
	// while it receives): the switch must not declare them dead.
	srv := startBenchServer(b, fabric.Config{HeartbeatTimeout: time.Hour})
	sw := srv.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), udpBenchTimeout)
	defer cancel()
	ma, mb := newRawMember(b, 1), newRawMember(b, 2)
	var ra, rb *ctrl.Msg
	var ea, eb error
	var wg sync.WaitGroup
	wg.Go(func() { ra, ea = ma.join(ctx, sw, "unicast", 2, 0) })
	wg.Go(func() { rb, eb = mb.join(ctx, sw, "unicast", 2, 1) })
	wg.Wait()
	if err := errors.Join(ea, eb); err != nil {
		b.Fatalf("join: %v", err)
	}
	if ra.Group != rb.Group || len(ra.Members) != 2 || ra.Member == rb.Member {
		b.Fatalf("joined as %+v and %+v", ra, rb)
	}
	pkt := packet(b, wire.Header{Op: wire.OpData, Mode: wire.ModeUnicast, Group: ra.Group, Src: ra.Member, Dst: rb.Member,
		PSN: 1, MsgID: 1, MsgLen: payload}, make([]byte, payload))
	ds := make([]netio.Datagram, batch)
	for i := range ds {
		ds[i] = netio.Datagram{Addr: sw, Buf: pkt}
	}

	// Warm up the path (the switch's forwarding buffers, the sockets'
	// GRO state) with one batch.
	if err := ma.write(ds); err != nil {
		b.Fatalf("send: %v", err)
	}
	for deadline := time.Now().Add(time.Second); mb.raw.Load() < batch && time.Now().Before(deadline); {
		select {
		case <-mb.rawNotify:
		case <-time.After(stall):
		}
	}

	st0 := srv.Stats()
	recv0 := mb.raw.Load()
	var sent, writtenOff, stalls uint64
	wait := time.NewTimer(stall)
	defer wait.Stop()
	lastProgress, lastGot := time.Now(), uint64(0)
	b.ResetTimer()
	for {
		got := mb.raw.Load() - recv0
		if got >= uint64(b.N) {
			break
		}
		if got != lastGot {
			lastGot, lastProgress = got, time.Now()
		}
		if sent-writtenOff-min(got, sent-writtenOff)+batch <= window {
			if err := ma.write(ds); err != nil {
				b.Fatalf("send: %v", err)
			}
			sent += batch
			continue
		}
		wait.Reset(stall)
		select {
		case <-mb.rawNotify:
		case <-wait.C:
			// What is still out after a stall is lost (socket overflow):
			// write it off so the sender moves on.
			stalls++
			writtenOff = sent - got
			if time.Since(lastProgress) > 5*time.Second {
				b.Fatalf("no packet arrived for 5s: %d of %d received, %d sent", got, b.N, sent)
			}
		}
	}
	b.StopTimer()
	st := srv.Stats()
	// Let what is in flight land before counting losses.
	for prev, deadline := uint64(math.MaxUint64), time.Now().Add(time.Second); time.Now().Before(deadline); {
		got := mb.raw.Load() - recv0
		if got >= sent || got == prev {
			break
		}
		prev = got
		time.Sleep(20 * time.Millisecond)
	}
	got := mb.raw.Load() - recv0
	perSecond(b, float64(b.N), "pkts/s")
	b.ReportMetric(float64(st.UnicastOut-st0.UnicastOut)/float64(b.N), "unicast-out/op")
	b.ReportMetric(100*float64(sent-min(got, sent))/float64(sent), "loss-%")
	b.ReportMetric(float64(stalls), "stalls")
	if d := st.ForwardDropped - st0.ForwardDropped; d > 0 {
		b.ReportMetric(float64(d), "fwd-dropped")
	}
	if d := ma.conn.Stats().SendDrops; d > 0 {
		b.ReportMetric(float64(d), "send-drops")
	}
}

// BenchmarkUDPSwitchMulticast8: member 0 of 8 multicasts 1 MiB through the
// switch and the 7 others receive it; one op is one message delivered to
// all. replicas/s counts the data packets the switch sent out.
func BenchmarkUDPSwitchMulticast8(b *testing.B) {
	const n = 8
	srv := startBenchServer(b, fabric.Config{HeartbeatTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), udpBenchTimeout)
	defer cancel()
	gs := joinBench(b, ctx, srv, n, endpoint.FabricOptions{Heartbeat: 1250 * time.Millisecond})
	data := make([]byte, udpBenchMsg)
	for i := range data {
		data[i] = byte(i * 13)
	}
	bufs := make([][]byte, n)
	for i := 1; i < n; i++ {
		bufs[i] = make([]byte, len(data))
	}
	ops := make([]*endpoint.Op, n)
	iter := func() {
		for i := 1; i < n; i++ {
			op, err := gs[i].StartRecv(0, bufs[i])
			if err != nil {
				b.Fatalf("member %d recv: %v", i, err)
			}
			ops[i] = op
		}
		if err := gs[0].Multicast(ctx, data, endpoint.MulticastOptions{}); err != nil {
			b.Fatalf("multicast: %v", err)
		}
		waitOps(b, ctx, "recv at member", ops)
	}
	iter()
	for i := 1; i < n; i++ {
		if !bytes.Equal(bufs[i], data) {
			b.Fatalf("member %d received different data", i)
		}
	}
	st0 := srv.Stats()
	b.SetBytes(udpBenchMsg)
	b.ResetTimer()
	for range b.N {
		iter()
	}
	b.StopTimer()
	st := srv.Stats()
	perSecond(b, float64(st.MulticastOut-st0.MulticastOut), "replicas/s")
	b.ReportMetric(float64(st.MulticastIn-st0.MulticastIn)/float64(b.N), "pkts-in/op")
	b.ReportMetric(float64(st.MergedAcksOut-st0.MergedAcksOut)/float64(b.N), "merged-acks/op")
	reportGoodput(b, udpBenchMsg, "Gbit/s")
	reportGoodput(b, (n-1)*udpBenchMsg, "delivered-Gbit/s")
	if d := st.ForwardDropped - st0.ForwardDropped; d > 0 {
		b.ReportMetric(float64(d)/float64(b.N), "fwd-dropped/op")
	}
}

// BenchmarkUDPHostMulticast8 is the baseline for BenchmarkUDPSwitchMulticast8
// without a switch: member 0 sends the same 1 MiB to each of 7 receivers
// with one-sided WRITEs into their registered buffers, all 7 in flight at
// once; one op is the 7 writes acknowledged.
func BenchmarkUDPHostMulticast8(b *testing.B) {
	const n = 8
	ctx, cancel := context.WithTimeout(context.Background(), udpBenchTimeout)
	defer cancel()
	eps := listenBench(b, n)
	data := make([]byte, udpBenchMsg)
	for i := range data {
		data[i] = byte(i * 13)
	}
	bufs := make([][]byte, n)
	keys := make([]uint64, n)
	for i := 1; i < n; i++ {
		bufs[i] = make([]byte, len(data))
		key, err := eps[i].Register(bufs[i], wire.PermWrite, 0)
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = key
	}
	ops := make([]*endpoint.Op, n)
	for i := 1; i < n; i++ {
		ops[i] = &endpoint.Op{Kind: endpoint.KindWrite, Peer: eps[i].LocalAddr(), Key: keys[i], Buf: data}
	}
	iter := func() {
		for i := 1; i < n; i++ {
			if err := eps[0].Start(ops[i], nil); err != nil {
				b.Fatalf("write to member %d: %v", i, err)
			}
		}
		waitOps(b, ctx, "write to member", ops)
	}
	iter()
	for i := 1; i < n; i++ {
		eps[i].Locked(func() {
			if !bytes.Equal(bufs[i], data) {
				b.Errorf("member %d holds different data", i)
			}
		})
	}
	if b.Failed() {
		b.FailNow()
	}
	b.SetBytes(udpBenchMsg)
	b.ResetTimer()
	for range b.N {
		iter()
	}
	b.StopTimer()
	reportGoodput(b, udpBenchMsg, "Gbit/s")
	reportGoodput(b, (n-1)*udpBenchMsg, "delivered-Gbit/s")
}

// BenchmarkUDPSwitchAllreduce8: 8 members allreduce 1 MiB of float32 (sum)
// through the switch; one op is one allreduce complete at all members.
// contribs/s counts contribution packets the switch admitted, reductions/s
// the chunks it reduced (pool slot completions).
func BenchmarkUDPSwitchAllreduce8(b *testing.B) {
	const n = 8
	const elems = udpBenchMsg / 4
	srv := startBenchServer(b, fabric.Config{HeartbeatTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), udpBenchTimeout)
	defer cancel()
	gs := joinBench(b, ctx, srv, n, endpoint.FabricOptions{Heartbeat: 1250 * time.Millisecond})
	send := make([][]byte, n)
	recv := make([][]byte, n)
	for i := range n {
		send[i] = make([]byte, 4*elems)
		for j := range elems {
			binary.LittleEndian.PutUint32(send[i][4*j:], math.Float32bits(float32(i+j%5)))
		}
		recv[i] = make([]byte, 4*elems)
	}
	ops := make([]*endpoint.Op, n)
	iter := func() {
		for i, g := range gs {
			op, err := g.StartAllreduce(send[i], recv[i], wire.DtypeF32, wire.AluAdd, endpoint.ReduceOptions{})
			if err != nil {
				b.Fatalf("member %d allreduce: %v", i, err)
			}
			ops[i] = op
		}
		waitOps(b, ctx, "allreduce at member", ops)
	}
	iter()
	for i := range n {
		for j := range elems {
			want := float32(0)
			for k := range n {
				want += float32(k + j%5)
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(recv[i][4*j:])); got != want {
				b.Fatalf("member %d element %d: %v, want %v", i, j, got, want)
			}
		}
	}
	st0 := srv.Stats()
	b.SetBytes(udpBenchMsg)
	b.ResetTimer()
	for range b.N {
		iter()
	}
	b.StopTimer()
	st := srv.Stats()
	in := st.AggregateIn - st0.AggregateIn
	done := st.Pool.Completions - st0.Pool.Completions
	perSecond(b, float64(in), "contribs/s")
	perSecond(b, float64(done), "reductions/s")
	b.ReportMetric(float64(done)/float64(b.N), "chunks/op")
	b.ReportMetric(float64(in)/float64(done), "contribs/chunk")
	if d := st.Pool.NoSlot - st0.Pool.NoSlot; d > 0 {
		b.ReportMetric(float64(d)/float64(b.N), "no-slot/op")
	}
}
