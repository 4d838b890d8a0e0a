package fabric

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// A sans-I/O harness: one Switch and clients that are bare transport
// engines, pumped by hand in virtual time. Crafted datagrams go straight
// into Switch.Receive.

type ctlClient struct {
	addr  netip.AddrPort
	eng   *transport.Engine
	resps map[uint64]wire.Header // response headers by request id
	body  map[uint64][]byte
}

type ctlHarness struct {
	t       *testing.T
	sw      *Switch
	swAddr  netip.AddrPort
	now     time.Time
	token   []byte
	clients map[netip.AddrPort]*ctlClient
	toBytes map[netip.AddrPort]int // bytes the switch sent to each address
}

func newCtlHarness(t *testing.T, cfg Config) *ctlHarness {
	t.Helper()
	cfg.Token = []byte("hostile-token")
	cfg.Transport.Seed = 7
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &ctlHarness{t: t, sw: sw, swAddr: netip.MustParseAddrPort("10.0.0.1:7471"), now: simnet.Epoch(),
		token: cfg.Token, clients: map[netip.AddrPort]*ctlClient{}, toBytes: map[netip.AddrPort]int{}}
}

func (h *ctlHarness) client(addr netip.AddrPort, mtu int) *ctlClient {
	if c := h.clients[addr]; c != nil {
		return c
	}
	eng, err := transport.New(transport.Config{MTU: mtu, Seed: uint64(len(h.clients)) + 100})
	if err != nil {
		h.t.Fatal(err)
	}
	c := &ctlClient{addr: addr, eng: eng, resps: map[uint64]wire.Header{}, body: map[uint64][]byte{}}
	h.clients[addr] = c
	return c
}

// send queues a control request from c and returns its message id.
func (h *ctlHarness) send(c *ctlClient, m *ctrl.Msg) uint64 {
	h.t.Helper()
	buf, err := secure.AppendCtrl(nil, m, h.token)
	if err != nil {
		h.t.Fatal(err)
	}
	id, err := c.eng.Send(transport.PeerID{Addr: h.swAddr}, &wire.Header{Op: wire.OpControl}, buf, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// step feeds one datagram to the switch from addr.
func (h *ctlHarness) step(from netip.AddrPort, pkt []byte) {
	h.sw.Receive(h.now, netio.Datagram{Addr: from, Buf: pkt})
}

// pump moves datagrams between the clients and the switch for d of
// virtual time, in steps of 100µs.
func (h *ctlHarness) pump(d time.Duration) { h.run(d, 100*time.Microsecond) }

// advance is pump in steps of 10ms, for long stretches of time.
func (h *ctlHarness) advance(d time.Duration) { h.run(d, 10*time.Millisecond) }

func (h *ctlHarness) run(d, dt time.Duration) {
	end := h.now.Add(d)
	for ; h.now.Before(end); h.now = h.now.Add(dt) {
		for _, c := range h.clients {
			out, _, _ := c.eng.Poll(h.now, nil)
			for _, dg := range out {
				h.sw.Receive(h.now, netio.Datagram{Addr: c.addr, Buf: dg.Buf})
			}
		}
		out, _ := h.sw.Poll(h.now, nil)
		for _, dg := range out {
			h.toBytes[dg.Addr] += len(dg.Buf)
			c := h.clients[dg.Addr]
			if c == nil {
				continue
			}
			del, ok := c.eng.Receive(h.now, netio.Datagram{Addr: h.swAddr, Buf: dg.Buf}, transport.Admission{})
			if ok && del.Header.Flags&wire.FlagResp != 0 && del.MsgDone {
				c.resps[del.Header.MsgID] = del.Header
				c.body[del.Header.MsgID] = append([]byte(nil), del.Payload...)
			}
		}
	}
}

// register makes c rank rank of the 2-member round-robin service "svc"
// and returns the service's group id.
func (h *ctlHarness) register(c *ctlClient, rank int) uint32 {
	h.t.Helper()
	id := h.send(c, &ctrl.Msg{Type: ctrl.Register, Service: "svc", Policy: uint8(ctrl.PolicyRoundRobin), Size: 2, Rank: rank, MTU: 9000})
	h.pump(2 * time.Millisecond)
	var m ctrl.Msg
	if st := c.resps[id].Status; st != wire.StatusOK {
		h.t.Fatalf("register rank %d: %v", rank, st)
	}
	if err := secure.ParseCtrl(c.body[id], &m, h.token); err != nil {
		h.t.Fatal(err)
	}
	return m.Group
}

func addrN(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 5000)
}

// TestRendezvousBoundedAndExpiring: JOINs of jobs whose other ranks never
// come open at most MaxRendezvous rendezvous; they expire after
// RendezvousTimeout (the waiting rank is told BUSY); a completed job is
// never pushed out, and a new job can rendezvous afterwards.
func TestRendezvousBoundedAndExpiring(t *testing.T) {
	h := newCtlHarness(t, Config{HeartbeatTimeout: time.Hour})
	done := h.client(addrN(0), 1500)
	doneID := h.send(done, &ctrl.Msg{Type: ctrl.Join, Job: "done", Size: 1, Rank: 0, MTU: 1500})
	h.pump(5 * time.Millisecond)
	if st := done.resps[doneID].Status; st != wire.StatusOK {
		t.Fatalf("single-rank job: status %v", st)
	}
	var ids []uint64
	for i := 1; i <= 1000; i++ {
		c := h.client(addrN(i), 1500)
		ids = append(ids, h.send(c, &ctrl.Msg{Type: ctrl.Join, Job: "stuck-" + string(rune('a'+i%26)) + string(rune(i)), Size: 2, Rank: 0, MTU: 1500}))
		if i%50 == 0 {
			h.pump(2 * time.Millisecond)
		}
	}
	h.pump(5 * time.Millisecond)
	if n := len(h.sw.jobs); n > 256 {
		t.Fatalf("%d pending rendezvous after 1000 stuck JOINs, want at most the default 256", n)
	}
	busy := 0
	for i, id := range ids {
		if r := h.clients[addrN(i+1)].resps[id]; r.Status == wire.StatusBusy {
			busy++
			if r.Operand1 != ctrl.JoinBusyFull {
				t.Fatalf("JOIN refused for a full switch with Operand1 %d, want %d", r.Operand1, ctrl.JoinBusyFull)
			}
		}
	}
	if busy != 1000-len(h.sw.jobs) {
		t.Fatalf("%d JOINs refused BUSY, want %d", busy, 1000-len(h.sw.jobs))
	}
	waiting := len(h.sw.jobs)
	h.advance(2 * time.Minute)
	if n := len(h.sw.jobs); n != 0 {
		t.Fatalf("%d rendezvous left two minutes after their last JOIN", n)
	}
	if len(h.sw.Groups()) != 1 {
		t.Fatalf("completed job gone: %+v", h.sw.Groups())
	}
	h.pump(5 * time.Millisecond)
	expired, full := 0, 0
	for i, id := range ids {
		switch r := h.clients[addrN(i+1)].resps[id]; {
		case r.Status == wire.StatusBusy && r.Operand1 == ctrl.JoinBusyExpired:
			expired++
		case r.Status == wire.StatusBusy && r.Operand1 == ctrl.JoinBusyFull:
			full++
		}
	}
	if expired != waiting || full != 1000-waiting {
		t.Fatalf("after expiry: %d stuck joiners told their rendezvous expired, %d the switch was full; want %d and %d", expired, full, waiting, 1000-waiting)
	}
	a, b := h.client(addrN(2000), 1500), h.client(addrN(2001), 1500)
	ia := h.send(a, &ctrl.Msg{Type: ctrl.Join, Job: "late", Size: 2, Rank: 0, MTU: 1500})
	ib := h.send(b, &ctrl.Msg{Type: ctrl.Join, Job: "late", Size: 2, Rank: 1, MTU: 1500})
	h.pump(5 * time.Millisecond)
	if a.resps[ia].Status != wire.StatusOK || b.resps[ib].Status != wire.StatusOK {
		t.Fatalf("new job after the flood: %v %v", a.resps[ia].Status, b.resps[ib].Status)
	}
}

// TestDeadListBounded: a service rank that leaves and registers again,
// thousands of times, must not grow the dead list its group's heartbeat
// replies carry (it used to grow until the reply could not be encoded and
// every heartbeat was answered BUSY).
func TestDeadListBounded(t *testing.T) {
	h := newCtlHarness(t, Config{HeartbeatTimeout: time.Hour})
	a, b := h.client(addrN(1), 9000), h.client(addrN(2), 9000)
	reg := h.register
	g := reg(a, 0)
	for range 5000 {
		reg(b, 1)
		h.send(b, &ctrl.Msg{Type: ctrl.Leave, Group: g, Member: 1})
		h.pump(time.Millisecond)
	}
	id := h.send(a, &ctrl.Msg{Type: ctrl.Heartbeat, Group: g, Member: 0})
	h.pump(5 * time.Millisecond)
	if st := a.resps[id].Status; st != wire.StatusOK {
		t.Fatalf("heartbeat after 5000 leave/register cycles: status %v", st)
	}
	var m ctrl.Msg
	if err := secure.ParseCtrl(a.body[id], &m, h.token); err != nil {
		t.Fatal(err)
	}
	if len(m.Dead) != 1 || m.Dead[0] != 1 {
		t.Fatalf("dead list %v, want [1]", m.Dead)
	}
	reg(b, 1)
	id = h.send(a, &ctrl.Msg{Type: ctrl.Heartbeat, Group: g, Member: 0})
	h.pump(5 * time.Millisecond)
	if err := secure.ParseCtrl(a.body[id], &m, h.token); err != nil || len(m.Dead) != 0 {
		t.Fatalf("dead list %v (err %v) after rank 1 registered again, want empty", m.Dead, err)
	}
}

// TestPoolNodeTableLifetime: a memory node that went silent and holds no
// region copies is forgotten after PoolNodeTTL; one holding copies stays;
// a full table takes a new node in place of a dead empty one and refuses
// it when every node holds copies or lives.
func TestPoolNodeTableLifetime(t *testing.T) {
	h := newCtlHarness(t, Config{HeartbeatTimeout: time.Second, Limits: ControlLimits{MaxPoolNodes: 2}})
	reg := func(i int) wire.Status {
		c := h.client(addrN(i), 9000)
		id := h.send(c, &ctrl.Msg{Type: ctrl.PoolNode, Key: 0x1000 + uint64(i), Capacity: 1 << 20, Epoch: 1})
		h.pump(2 * time.Millisecond)
		if st := c.resps[id].Status; st != wire.StatusOK {
			return st
		}
		// It reports holding nothing: the switch uses it from now on.
		id = h.send(c, &ctrl.Msg{Type: ctrl.PoolReport, Final: true})
		h.pump(2 * time.Millisecond)
		return c.resps[id].Status
	}
	if reg(1) != wire.StatusOK || reg(2) != wire.StatusOK {
		t.Fatal("registrations refused")
	}
	// Node 2 gets a region copy (straight in the MMU: no grant exchange).
	if _, err := h.sw.memPool.mmu.Create(4096, 4096, 2, 1, 3); err != nil {
		t.Fatal(err)
	}
	if n1 := h.sw.memPool.mmu.NodeAt(addrN(1)); n1.Used() == 0 {
		t.Fatal("region not on node 1")
	}
	// Free node 1's extent again: it holds nothing.
	for _, r := range h.sw.memPool.mmu.Regions() {
		if err := h.sw.memPool.mmu.Free(r.ID, r.Key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.sw.memPool.mmu.Create(4096, 4096, 1, 1, 3); err != nil {
		t.Fatal(err)
	}
	holder := h.sw.memPool.mmu.Regions()[0].Homes[0].Node.Addr
	h.advance(5 * time.Second) // both dead now
	if st := reg(3); st != wire.StatusOK {
		t.Fatalf("new node with a dead empty one in a full table: %v", st)
	}
	if h.sw.memPool.mmu.NodeAt(holder) == nil {
		t.Fatal("node holding a region copy evicted")
	}
	if st := reg(4); st == wire.StatusOK {
		t.Fatal("new node admitted although every node holds copies or is alive")
	}
	h.advance(11 * time.Minute)
	nodes := h.sw.memPool.mmu.Nodes()
	if len(nodes) != 1 || nodes[0].Addr != holder {
		var got []netip.AddrPort
		for _, n := range nodes {
			got = append(got, n.Addr)
		}
		t.Fatalf("nodes %v after the TTL, want only %v (the one holding copies)", got, holder)
	}
}

// TestPoolNodeTableExpiresByDefault: with the default limits, a memory
// node that registered once and went silent is forgotten in time.
func TestPoolNodeTableExpiresByDefault(t *testing.T) {
	h := newCtlHarness(t, Config{HeartbeatTimeout: time.Second})
	for i := range 100 {
		c := h.client(addrN(i), 9000)
		h.send(c, &ctrl.Msg{Type: ctrl.PoolNode, Key: 0x1000 + uint64(i), Capacity: 1 << 20, Epoch: 1})
	}
	h.pump(10 * time.Millisecond)
	if n := len(h.sw.memPool.mmu.Nodes()); n != 100 {
		t.Fatalf("%d nodes registered, want 100", n)
	}
	h.advance(time.Hour)
	if n := len(h.sw.memPool.mmu.Nodes()); n != 0 {
		t.Fatalf("%d silent, empty memory nodes still in the table after an hour", n)
	}
}

// TestControlMultiPacket: a REGISTER with 200 key ranges does not fit one
// 1500-byte packet; the switch must reassemble it before authenticating
// it (it used to authenticate each packet and refuse them all).
func TestControlMultiPacket(t *testing.T) {
	h := newCtlHarness(t, Config{Transport: transport.Config{MTU: 1500}})
	c := h.client(addrN(1), 1500)
	var ranges []ctrl.Range
	for i := range 200 {
		ranges = append(ranges, ctrl.Range{Start: uint64(i) * 100, End: uint64(i)*100 + 99, Owner: 0, Replicas: []int32{1, 2}})
	}
	m := &ctrl.Msg{Type: ctrl.Register, Service: "kv", Policy: uint8(ctrl.PolicyKeyAffinity), Size: 3, Rank: 0, Ranges: ranges, MTU: 1500}
	buf, _ := secure.AppendCtrl(nil, m, h.token)
	if len(buf) <= 1500-wire.HeaderLen {
		t.Fatalf("REGISTER of %d bytes fits one packet: the test needs more ranges", len(buf))
	}
	id := h.send(c, m)
	h.pump(20 * time.Millisecond)
	if st := c.resps[id].Status; st != wire.StatusOK {
		t.Fatalf("multi-packet REGISTER (%d bytes): status %v, switch %+v", len(buf), st, h.sw.Stats())
	}
	var resp ctrl.Msg
	if err := secure.ParseCtrl(c.body[id], &resp, h.token); err != nil || resp.Type != ctrl.Register {
		t.Fatalf("response %+v, %v", resp, err)
	}
	if h.sw.asm.len() != 0 {
		t.Fatalf("%d partial requests left", h.sw.asm.len())
	}
}

// fragment builds a control request packet: bytes [off, off+len(p)) of a
// message of total bytes with id msgID, at sequence number psn.
func fragment(msgID uint64, psn uint32, off, total int, p []byte) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpControl, MsgID: msgID, PSN: psn, AckBase: 1000, Offset: uint32(off), MsgLen: uint32(total)}
	pkt, err := wire.AppendPacket(nil, &h, p)
	if err != nil {
		panic(err)
	}
	return pkt
}

// TestControlContradictingFragments: packets of one control request that
// disagree about its length, reach past it or overlap are refused (BAD
// OPERAND) without a panic and leave nothing behind.
func TestControlContradictingFragments(t *testing.T) {
	h := newCtlHarness(t, Config{})
	src := addrN(7)
	c := h.client(src, 9000) // receives the refusals
	_ = c
	p := make([]byte, 500)
	cases := []struct {
		name string
		pkts [][]byte
	}{
		{"MsgLen grows", [][]byte{fragment(1, 1000, 0, 1000, p), fragment(1, 1001, 600, 2000, p)}},
		{"MsgLen shrinks", [][]byte{fragment(2, 1002, 500, 1000, p), fragment(2, 1003, 0, 600, p)}},
		{"overlap", [][]byte{fragment(3, 1004, 0, 1500, p), fragment(3, 1005, 250, 1500, p)}},
		{"too large", [][]byte{fragment(4, 1006, 0, 1<<20, p)}},
	}
	// The transport refuses a fragment that contradicts what it has of
	// the message (Transport.Contradicting); the switch's reassembly
	// refuses one too large for a control request (ControlRefused).
	refused := func() uint64 { return h.sw.stats.ControlRefused + h.sw.eng.Stats().Contradicting }
	for _, tc := range cases {
		before := refused()
		for _, pkt := range tc.pkts {
			h.step(src, pkt)
		}
		if got := refused() - before; got != 1 {
			t.Errorf("%s: %d refusals, want 1", tc.name, got)
		}
	}
	// The messages' first fragments wait for the rest until the
	// reassembly timeout.
	h.advance(h.sw.cfg.Limits.ControlReassemblyTimeout + time.Second)
	if n := h.sw.asm.len(); n != 0 {
		t.Fatalf("%d partial requests left after contradicting fragments and the reassembly timeout", n)
	}
}

// TestControlPartialFlood: partial control requests from thousands of
// fresh addresses and ids stay within the reassembly bounds, and a
// legitimate JOIN during the flood still succeeds.
func TestControlPartialFlood(t *testing.T) {
	h := newCtlHarness(t, Config{})
	p := make([]byte, 1000)
	for i := range 3000 {
		from := addrN(100 + i/3)
		h.step(from, fragment(uint64(i+1), 1000+uint32(i%3), 0, 200<<10, p))
		lim := &h.sw.cfg.Limits
		if h.sw.asm.len() > lim.MaxControlPartial || h.sw.asm.bytes > lim.MaxControlPartialBytes {
			t.Fatalf("after %d partial requests: %d held, %d bytes", i+1, h.sw.asm.len(), h.sw.asm.bytes)
		}
		if i == 1500 {
			c := h.client(addrN(1), 9000)
			id := h.send(c, &ctrl.Msg{Type: ctrl.Join, Job: "legit", Size: 1, Rank: 0, MTU: 9000})
			h.pump(2 * time.Millisecond)
			if st := c.resps[id].Status; st != wire.StatusOK || c.resps[id].Flags&wire.FlagResp == 0 {
				t.Fatalf("JOIN during the flood: status %v", st)
			}
		}
	}
	h.advance(10 * time.Second)
	if n := h.sw.asm.len(); n != 0 {
		t.Fatalf("%d partial requests left after the reassembly timeout", n)
	}
}

// TestJoinStatus: JOINSTATUS tells any token holder the size of a job's
// rendezvous and which ranks joined it, and answers size 0 for a job
// without one (unknown, or formed). The answer to an address that has
// not shown it receives stays within the transport's amplification
// budget, even for the largest job.
func TestJoinStatus(t *testing.T) {
	h := newCtlHarness(t, Config{HeartbeatTimeout: time.Hour})
	a, b, asker := h.client(addrN(1), 1500), h.client(addrN(2), 1500), h.client(addrN(3), 1500)
	h.send(a, &ctrl.Msg{Type: ctrl.Join, Job: "job", Size: 11, Rank: 0, MTU: 1500})
	h.send(b, &ctrl.Msg{Type: ctrl.Join, Job: "job", Size: 11, Rank: 9, MTU: 1500})
	h.pump(5 * time.Millisecond)
	status := func(job string) *ctrl.Msg {
		t.Helper()
		id := h.send(asker, &ctrl.Msg{Type: ctrl.JoinStatus, Job: job})
		h.pump(5 * time.Millisecond)
		if st := asker.resps[id].Status; st != wire.StatusOK {
			t.Fatalf("join status of %q: status %v", job, st)
		}
		var m ctrl.Msg
		if err := secure.ParseCtrl(asker.body[id], &m, h.token); err != nil || m.Type != ctrl.JoinStatus || !m.Resp {
			t.Fatalf("join status of %q: %+v, %v", job, m, err)
		}
		return &m
	}
	if m := status("job"); m.Size != 11 || !slices.Equal(m.JoinedRanks(), []int{0, 9}) {
		t.Errorf("job: size %d, joined %v; want 11, [0 9]", m.Size, m.JoinedRanks())
	}
	if m := status("other"); m.Size != 0 || len(m.Joined) != 0 {
		t.Errorf("unknown job: size %d, joined %v; want an empty answer", m.Size, m.JoinedRanks())
	}
	h.send(a, &ctrl.Msg{Type: ctrl.Join, Job: "pair", Size: 2, Rank: 0, MTU: 1500})
	h.send(b, &ctrl.Msg{Type: ctrl.Join, Job: "pair", Size: 2, Rank: 1, MTU: 1500})
	h.pump(5 * time.Millisecond)
	if m := status("pair"); m.Size != 0 {
		t.Errorf("formed job: size %d, joined %v; want an empty answer", m.Size, m.JoinedRanks())
	}

	// A request from a forged source: the answer for a job of ctrl.MaxSize
	// ranks is larger than the request, but the victim gets at most three
	// times the request's bytes.
	h.send(a, &ctrl.Msg{Type: ctrl.Join, Job: "big", Size: ctrl.MaxSize, Rank: ctrl.RankAny, MTU: 1500})
	h.pump(5 * time.Millisecond)
	forger, err := transport.New(transport.Config{MTU: 1500, Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.JoinStatus, Job: "big"}, h.token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := forger.Send(transport.PeerID{Addr: h.swAddr}, &wire.Header{Op: wire.OpControl}, buf, 0); err != nil {
		t.Fatal(err)
	}
	out, _, _ := forger.Poll(h.now, nil)
	victim, sent := addrN(4), 0
	for _, dg := range out {
		h.step(victim, dg.Buf)
		sent += len(dg.Buf)
	}
	h.advance(10 * time.Second)
	t.Logf("forged request %d bytes, victim got %d", sent, h.toBytes[victim])
	if got := h.toBytes[victim]; got == 0 || got > 3*sent {
		t.Errorf("forged join status of %d bytes drew %d bytes to the victim, want 1..%d", sent, got, 3*sent)
	}
}
