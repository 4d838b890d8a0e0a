package dissect

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// The names the dissector shows, as docs/PROTOCOL.md spells them.
var (
	opNames = map[wire.Opcode]string{
		wire.OpWrite: "WRITE", wire.OpRead: "READ", wire.OpCAS: "CAS", wire.OpFetchAdd: "FETCHADD",
		wire.OpVector: "VECTOR", wire.OpSend: "SEND", wire.OpNop: "NOP", wire.OpControl: "CONTROL",
		wire.OpEvent: "EVENT", wire.OpData: "DATA", wire.OpChain: "CHAIN", wire.OpOptim: "OPTIM", wire.OpFence: "FENCE",
		wire.OpAck: "ACK", wire.OpNack: "NACK", wire.OpHandshake: "HANDSHAKE",
	}
	statusNames = []string{"OK", "BAD_KEY", "OUT_OF_BOUNDS", "MISALIGNED", "UNKNOWN_OP", "PERMISSION",
		"BAD_OPERAND", "TOO_LARGE", "BUSY", "MEMBER_DEAD", "NOT_MEMBER", "AUTH", "LOST", "FENCED"}
)

const luaScript = "../../tools/wireshark/ndma.lua"

// TestDissector captures the traffic of a small fabric on simnet — one-
// sided WRITE and READ with their ACKs, JOIN, heartbeats, a multicast, an
// aggregation, pool registration, creation, grants and reports, pool
// accesses forwarded with their reply-to trailer, a refusal — plus
// packets made by hand (an AUTH packet, an ACK with SACK blocks,
// malformed ones and a datagram that is not NDMA), writes it as a pcap,
// runs tshark with tools/wireshark/ndma.lua over it and checks every
// packet's decoded fields against the bytes sent.
func TestDissector(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install tshark): the dissector test needs it")
	}
	script, err := filepath.Abs(luaScript)
	if err != nil {
		t.Fatal(err)
	}
	// Reading the script makes it part of the test's cache key.
	if b, err := os.ReadFile(script); err != nil || len(b) == 0 {
		t.Fatalf("the dissector %s: %v", script, err)
	}
	f := newSimFabric(t, 1)
	w := runWorkload(t, f)
	handmade(t, f)

	dir := t.TempDir()
	capture := filepath.Join(dir, "ndma.pcap")
	var pcap bytes.Buffer
	pw, err := NewWriter(&pcap)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.log {
		if err := pw.WriteUDP(s.at, s.src, s.dst, s.buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(capture, pcap.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("NDMA_DISSECT_PCAP"); keep != "" {
		// The capture, to look at with Wireshark.
		if err := os.WriteFile(keep, pcap.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d datagrams captured", len(f.log))

	cmd := exec.Command(tshark, "-n", "-r", capture, "-X", "lua_script:"+script, "-T", "pdml")
	// A private configuration folder: no user preference or disabled
	// protocol changes what is decoded.
	cmd.Env = append(os.Environ(), "WIRESHARK_CONFIG_DIR="+dir, "HOME="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	if bytes.Contains(out, []byte("Lua Error")) || strings.Contains(stderr.String(), "Lua") {
		t.Fatalf("the dissector failed:\n%s\n%s", stderr.String(), grepLines(out, "Lua"))
	}
	pkts, err := parsePDML(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) != len(f.log) {
		t.Fatalf("tshark shows %d packets, the capture has %d", len(pkts), len(f.log))
	}
	c := &checker{t: t, f: f, seen: map[string]int{}}
	for i, s := range f.log {
		c.packet(i, s, pkts[i], w)
	}
	for _, want := range []string{
		"WRITE unicast req", "WRITE unicast resp", "READ unicast req", "READ unicast resp", "ACK",
		"ctrl JOIN req", "ctrl JOIN resp", "ctrl HEARTBEAT req", "ctrl HEARTBEAT resp",
		"DATA multicast req", "DATA aggregate req", "DATA aggregate result",
		"ctrl POOLNODE req", "ctrl POOLNODE resp", "ctrl POOLREPORT req", "ctrl POOLCREATE req", "ctrl POOLCREATE resp",
		"ctrl POOLGRANT req", "ctrl POOLOPEN req",
		"WRITE pool req", "WRITE pool req replyto", "READ pool req", "READ pool req replyto", "READ pool resp",
		"status BAD_KEY", "auth", "sack", "ack riding", "bad crc", "truncated", "ctrl malformed", "not ndma",
		"CHAIN pool req", "OPTIM pool req", "EVENT unicast req", "NACK", "invalid", "op NOP",
		"WRITE fenced", "FENCE fenced", "CHAIN fenced", "fences shown",
		"DATA anycast req", "DATA anycast resp",
	} {
		if c.seen[want] == 0 {
			t.Errorf("the capture has no %q packet checked", want)
		}
	}
	for typ := ctrl.Join; !strings.HasPrefix(typ.String(), "ctrl("); typ++ {
		for _, dir := range []string{"req", "resp"} {
			if want := "ctrl " + strings.ToUpper(typ.String()) + " " + dir; c.seen[want] == 0 {
				t.Errorf("the capture has no %q packet checked", want)
			}
		}
	}
	for op := wire.Opcode(1); op < 0xff; op++ {
		if !strings.HasPrefix(op.String(), "op(") && c.seen["op "+opNames[op]] == 0 {
			t.Errorf("no %v packet checked", op)
		}
	}
	for st := wire.StatusOK; st.Known(); st++ {
		if st != wire.StatusOK && c.seen["status "+statusNames[st]] == 0 {
			t.Errorf("no packet with status %v checked", st)
		}
	}
	t.Logf("checked: %v", c.seen)
}

// workload is what runWorkload sent and learnt, for the checks.
type workload struct {
	memKey   uint64 // the standalone memory node's region key
	data     []byte // written to it and read back
	group    uint32
	members  []netip.AddrPort
	poolKeys map[netip.AddrPort]uint64 // pool node -> lent region key
	region   uint32
	client   netip.AddrPort // the pool client
	said     uint32         // SA id of the AUTH packet
}

func runWorkload(t *testing.T, f *simFabric) *workload {
	w := &workload{poolKeys: map[netip.AddrPort]uint64{}, said: 0x5a1d0001}
	// Memory nodes on memd's port, endpoints on ports no dissector claims
	// (found by the heuristic).
	for i := range 2 {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}), 7470)
		w.poolKeys[a] = f.newPoolNode(a, 1<<20, uint64(i+1))
	}
	mem, memKey := f.newMemNode(netip.MustParseAddrPort("10.3.0.1:40100"), 64<<10)
	w.memKey = memKey
	ms := make([]*host, 3)
	for i := range ms {
		ms[i] = f.newMember(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), uint16(40001+i)))
		w.members = append(w.members, ms[i].addr)
	}
	f.net.RunFor(300 * time.Millisecond) // the pool nodes register and report
	f.run(func() bool { return !f.sw.PoolRecovering(f.net.Now()) }, 5*time.Second, "pool recovery")

	// One-sided WRITE and READ to a memory node, no switch on the way.
	w.data = []byte("one-sided write through NDMA, read back by the dissector test")
	if op := f.wait(ms[0], &endpoint.Op{Kind: endpoint.KindWrite, Peer: mem.addr, Key: memKey, Addr: 128, Buf: w.data}, "write"); op.Err != nil {
		t.Fatal(op.Err)
	}
	got := make([]byte, len(w.data))
	if op := f.wait(ms[0], &endpoint.Op{Kind: endpoint.KindRead, Peer: mem.addr, Key: memKey, Addr: 128, Buf: got}, "read"); op.Err != nil || !bytes.Equal(got, w.data) {
		t.Fatalf("read: %v, %q", op.Err, got)
	}

	// A job of three, a multicast and an allreduce.
	w.group, _ = f.join("dissect", ms)
	mc := []byte("multicast to the group")
	pending := 0
	for _, m := range ms[1:] {
		pending++
		buf := make([]byte, len(mc))
		m.post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: w.group, From: 0, Buf: buf}, func(op *endpoint.Op) {
			if op.Err != nil || !bytes.Equal(buf, mc) {
				t.Errorf("multicast receive: %v, %q", op.Err, buf)
			}
			pending--
		})
	}
	pending++
	ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: w.group, Buf: mc}, func(op *endpoint.Op) {
		if op.Err != nil {
			t.Errorf("multicast: %v", op.Err)
		}
		pending--
	})
	f.run(func() bool { return pending == 0 }, time.Minute, "multicast")
	sums := make([][]byte, len(ms))
	for i, m := range ms {
		in := binary.LittleEndian.AppendUint64(nil, uint64(i+1))
		sums[i] = make([]byte, 8)
		pending++
		m.post(&endpoint.Op{Kind: endpoint.KindAggregate, Peer: f.swAddr, Group: w.group, Buf: in, Recv: sums[i], Root: -1,
			Dtype: wire.DtypeI64, Alu: wire.AluAdd}, func(op *endpoint.Op) {
			if op.Err != nil {
				t.Errorf("allreduce: %v", op.Err)
			}
			pending--
		})
	}
	f.run(func() bool { return pending == 0 }, time.Minute, "allreduce")
	for i, s := range sums {
		if v := binary.LittleEndian.Uint64(s); v != 6 {
			t.Fatalf("member %d: allreduce of 1+2+3 = %d", i, v)
		}
	}

	// An anycast request to a service's member, which claims a caller in
	// its Key (the switch replaces it: this one knows no identities, 0),
	// and the member's reply.
	var svc *ctrl.Msg
	ms[1].control(&ctrl.Msg{Type: ctrl.Register, Service: "echo", Size: 1, Rank: 0, Policy: uint8(ctrl.PolicyRoundRobin)}, func(m *ctrl.Msg, err error) {
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		svc = m
	})
	f.run(func() bool { return svc != nil }, time.Minute, "register")
	ms[1].core.SetMember(svc.Group, svc.Member)
	ms[1].core.SetGroupSwitch(svc.Group, f.swAddr)
	var reply []byte
	ms[0].post(&endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: svc.Group, Key: 0x5eed, Addr: 7, Buf: []byte("ping"), Timeout: time.Minute},
		func(op *endpoint.Op) {
			if op.Err != nil {
				t.Errorf("anycast: %v", op.Err)
			}
			reply = append([]byte{}, op.Resp...)
		})
	var reqs []*endpoint.Request
	f.run(func() bool { reqs = append(reqs, ms[1].core.Requests()...); return len(reqs) > 0 }, time.Minute, "anycast request")
	if reqs[0].Caller != 0 || string(reqs[0].Data) != "ping" {
		t.Fatalf("the service got %q from caller %#x, want ping from 0 (no identities)", reqs[0].Data, uint64(reqs[0].Caller))
	}
	if err := ms[1].core.Reply(reqs[0], []byte("pong"), wire.StatusOK); err != nil {
		t.Fatal(err)
	}
	f.net.Wake(ms[1].addr)
	f.run(func() bool { return reply != nil }, time.Minute, "anycast reply")

	// A pool region over both pool nodes, written and read through the
	// switch, and a read with a wrong key.
	cli := ms[2]
	w.client = cli.addr
	var created *ctrl.Msg
	cli.control(&ctrl.Msg{Type: ctrl.PoolCreate, Pool: ctrl.PoolSpec{Size: 64 << 10, Stripe: 4096, Replicas: 1, Perm: uint8(wire.PermAll)}},
		func(m *ctrl.Msg, err error) {
			if err != nil {
				t.Fatalf("pool create: %v", err)
			}
			created = m
		})
	f.run(func() bool { return created != nil }, time.Minute, "pool create")
	w.region = created.Region
	var opened *ctrl.Msg
	cli.control(&ctrl.Msg{Type: ctrl.PoolOpen, Region: created.Region, Key: created.Key}, func(m *ctrl.Msg, err error) {
		if err != nil {
			t.Fatalf("pool open: %v", err)
		}
		opened = m
	})
	f.run(func() bool { return opened != nil }, time.Minute, "pool open")
	pdata := []byte("pool data, one stripe")
	if op := f.wait(cli, &endpoint.Op{Kind: endpoint.KindWrite, Peer: f.swAddr, Pool: created.Region, Key: created.Key, Addr: 4096, Lane: 1, Buf: pdata}, "pool write"); op.Err != nil {
		t.Fatal(op.Err)
	}
	pgot := make([]byte, len(pdata))
	if op := f.wait(cli, &endpoint.Op{Kind: endpoint.KindRead, Peer: f.swAddr, Pool: created.Region, Key: created.Key, Addr: 4096, Lane: 1, Buf: pgot}, "pool read"); op.Err != nil || !bytes.Equal(pgot, pdata) {
		t.Fatalf("pool read: %v, %q", op.Err, pgot)
	}
	if op := f.wait(cli, &endpoint.Op{Kind: endpoint.KindRead, Peer: f.swAddr, Pool: created.Region, Key: created.Key ^ 1, Addr: 0, Buf: make([]byte, 8), Timeout: time.Second}, "pool read, wrong key"); op.Err == nil {
		t.Fatal("a pool read with a wrong key succeeded")
	}
	f.net.RunFor(300 * time.Millisecond) // heartbeats

	// Packets made by hand.
	at := f.net.Now()
	a, b := w.members[0], mem.addr
	// An AUTH packet, sealed by a security association: SA id and
	// sequence, encrypted payload, 16-byte tag.
	h := wire.Header{Version: wire.Version, Op: wire.OpWrite, PSN: 1000, AckBase: 1000, MsgID: 77, MsgLen: 48, Key: memKey}
	pkt, err := wire.AppendPacket(nil, &h, bytes.Repeat([]byte{0xc3}, 48))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secure.DeriveKeys([]byte("a shared secret for the capture"), nil, "dissector test")
	if err != nil {
		t.Fatal(err)
	}
	sa, err := secure.NewSendSA(w.said, secure.AESGCM, keys, true)
	if err != nil {
		t.Fatal(err)
	}
	if pkt, err = sa.Seal(pkt); err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: a, dst: b, buf: pkt})
	// An ACK with two SACK blocks.
	ack := wire.Ack{Cum: 500, Window: 1024, EchoTS: 12345, AckDelay: 678, NBlocks: 2}
	ack.Blocks[0], ack.Blocks[1] = wire.SackBlock{Start: 502, End: 505}, wire.SackBlock{Start: 510, End: 511}
	ah := wire.Header{Version: wire.Version, Op: wire.OpAck, TS: 999}
	f.log = append(f.log, sent{at: at, src: b, dst: a, buf: wire.PutAckPacket(make([]byte, ack.AckPacketLen()), &ah, &ack)})
	// A WRITE with a corrupted payload byte, to the switch's port (the
	// heuristic rejects a bad CRC).
	wh := wire.Header{Version: wire.Version, Op: wire.OpWrite, PSN: 5, AckBase: 5, MsgID: 9, MsgLen: 16}
	bad, err := wire.AppendPacket(nil, &wh, make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	bad[wire.HeaderLen+3] ^= 0x10
	f.log = append(f.log, sent{at: at, src: a, dst: f.swAddr, buf: bad})
	// A truncated header.
	f.log = append(f.log, sent{at: at, src: a, dst: f.swAddr, buf: bad[:50]})
	// A control request whose fields end early (a POOLCREATE without its
	// pool shape).
	ch := wire.Header{Version: wire.Version, Op: wire.OpControl, PSN: 6, AckBase: 6, MsgID: 10, MsgLen: 2 + 5 + secure.CtrlTagLen}
	short, err := wire.AppendPacket(nil, &ch, append([]byte{byte(ctrl.PoolCreate), 0, 1, 2, 3, 4, 5}, make([]byte, secure.CtrlTagLen)...))
	if err != nil {
		t.Fatal(err)
	}
	f.log = append(f.log, sent{at: at, src: a, dst: f.swAddr, buf: short})
	// Not NDMA: version byte 1 but no consistent length or CRC.
	junk := bytes.Repeat([]byte{1, 2, 3, 4}, 40)
	f.log = append(f.log, sent{at: at, src: a, dst: b, buf: junk})
	return w
}

// checker compares tshark's decoding of each packet with the packet.
type checker struct {
	t    *testing.T
	f    *simFabric
	seen map[string]int
}

func (c *checker) packet(i int, s sent, p *packet, w *workload) {
	t := c.t
	t.Helper()
	where := fmt.Sprintf("frame %d (%v -> %v, %d bytes)", i+1, s.src, s.dst, len(s.buf))
	if p.proto["ndma"] == nil {
		if bytes.HasPrefix(s.buf, []byte{1, 2, 3, 4}) {
			c.seen["not ndma"]++
			return
		}
		t.Errorf("%s: not decoded as NDMA (protocols %v)", where, p.order)
		return
	}
	d := p.proto["ndma"]
	if bytes.HasPrefix(s.buf, []byte{1, 2, 3, 4}) {
		t.Errorf("%s: a datagram that is not NDMA was decoded as NDMA", where)
		return
	}
	if len(s.buf) < wire.HeaderLen {
		if !d.has("ndma.malformed") {
			t.Errorf("%s: a truncated packet shows no malformed expert info", where)
		}
		c.seen["truncated"]++
		return
	}
	var h wire.Header
	payload, tag, err := wire.Parse(s.buf, &h)
	if err == wire.ErrChecksum {
		if !d.has("ndma.crc.bad") || d.show("ndma.crc.status") != "bad" {
			t.Errorf("%s: a bad CRC is not shown as such", where)
		}
		c.seen["bad crc"]++
		return
	}
	if err != nil {
		if !d.has("ndma.malformed") && !d.has("ndma.crc.bad") {
			t.Errorf("%s: an invalid packet (%v) shows no expert info", where, err)
		}
		c.seen["invalid"]++
		return
	}
	if d.show("ndma.crc.status") != "good" {
		t.Errorf("%s: CRC status %q, want good", where, d.show("ndma.crc.status"))
	}
	// Every header field, and the names of opcode, mode and status.
	for _, fv := range []struct {
		name string
		want uint64
	}{
		{"ndma.version", uint64(h.Version)}, {"ndma.op", uint64(h.Op)}, {"ndma.mode", uint64(h.Mode)},
		{"ndma.flags", uint64(h.Flags)}, {"ndma.group", uint64(h.Group)}, {"ndma.src", uint64(h.Src)},
		{"ndma.dst", uint64(h.Dst)}, {"ndma.said", uint64(h.SAID)}, {"ndma.psn", uint64(h.PSN)},
		{"ndma.ackbase", uint64(h.AckBase)}, {"ndma.msgid", h.MsgID}, {"ndma.offset", uint64(h.Offset)},
		{"ndma.msglen", uint64(h.MsgLen)}, {"ndma.len", uint64(h.Len)}, {"ndma.status", uint64(h.Status)},
		{"ndma.dtype", uint64(h.Dtype)}, {"ndma.alu", uint64(h.Alu)}, {"ndma.hop", uint64(h.Hop)},
		{"ndma.copies", uint64(h.Copies)}, {"ndma.addr", h.Addr}, {keyField(&h), h.Key},
		{"ndma.operand1", h.Operand1}, {"ndma.operand2", h.Operand2}, {"ndma.ts", h.TS}, {"ndma.saseq", uint64(h.SASeq)},
		{"ndma.crc", uint64(binary.BigEndian.Uint32(s.buf[92:]))},
	} {
		c.num(where, d, fv.name, fv.want)
	}
	if opNames[h.Op] == "" || int(h.Status) >= len(statusNames) {
		t.Fatalf("%s: the test knows no name for opcode %v or status %v: add it from docs/PROTOCOL.md, here and in the dissector", where, h.Op, h.Status)
	}
	c.contains(where, d, "ndma.op", opNames[h.Op])
	c.contains(where, d, "ndma.mode", h.Mode.String())
	c.contains(where, d, "ndma.status", statusNames[h.Status])
	c.seen["op "+opNames[h.Op]]++
	c.flag(where, d, "ndma.flags.resp", h.Flags&wire.FlagResp != 0)
	c.flag(where, d, "ndma.flags.auth", h.Flags&wire.FlagAuth != 0)
	c.flag(where, d, "ndma.flags.syn", h.Flags&wire.FlagSyn != 0)
	c.flag(where, d, "ndma.flags.replyto", h.Flags&wire.FlagReplyTo != 0)
	c.flag(where, d, "ndma.flags.ack", h.Flags&wire.FlagAck != 0)
	c.flag(where, d, "ndma.flags.fence", h.Flags&wire.FlagFence != 0)
	if h.Status != wire.StatusOK {
		c.seen["status "+statusNames[h.Status]]++
		if !d.has("ndma.status.error") {
			t.Errorf("%s: status %v without expert info", where, h.Status)
		}
	}
	dir := "req"
	if h.Flags&wire.FlagResp != 0 {
		dir = "resp"
	}

	if h.Flags&wire.FlagAuth != 0 {
		if d.value("ndma.encrypted") != hex.EncodeToString(payload) || d.value("ndma.tag") != hex.EncodeToString(tag) ||
			d.has("ndma.payload") || !d.has("ndma.encrypted.note") || !strings.Contains(p.info, "encrypted") ||
			!strings.Contains(p.info, fmt.Sprintf("SA=0x%08x", w.said)) {
			t.Errorf("%s: AUTH packet: encrypted %q tag %q, info %q", where, d.value("ndma.encrypted"), d.value("ndma.tag"), p.info)
		}
		c.seen["auth"]++
		return
	}

	if h.Flags&wire.FlagAck != 0 {
		// An ACK rides after the payload: shown as an ACK frame; the
		// rest of the packet reads as if it were not there.
		var a wire.Ack
		if payload, err = wire.SplitAck(payload, &a); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		h.Len -= wire.AckFixedLen
		c.num(where, d, "ndma.ack.cum", uint64(a.Cum))
		c.num(where, d, "ndma.ack.window", uint64(a.Window))
		c.num(where, d, "ndma.ack.echots", a.EchoTS)
		c.num(where, d, "ndma.ack.delay", uint64(a.AckDelay))
		if !strings.Contains(p.info, fmt.Sprintf("ack cum=%d", a.Cum)) {
			t.Errorf("%s: summary %q does not show the riding ACK", where, p.info)
		}
		c.seen["ack riding"]++
	}
	body := payload
	if h.Flags&wire.FlagReplyTo != 0 {
		var to netip.AddrPort
		body, to, err = wire.SplitReplyTo(payload)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if got := d.show("ndma.replyto"); got != to.String() {
			t.Errorf("%s: reply-to %q, want %v", where, got, to)
		}
		if to != w.client {
			t.Errorf("%s: reply-to %v is not the pool client %v", where, to, w.client)
		}
		c.num(where, d, "ndma.replyto.port", uint64(to.Port()))
		c.seen[opNames[h.Op]+" pool req replyto"]++
	}
	if h.Flags&wire.FlagFence != 0 {
		var fc wire.Fence
		if body, fc, err = wire.SplitFence(body); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		c.fences(where, d, []wire.Fence{fc})
		if !strings.Contains(p.info, fmt.Sprintf("fence=%d/0x%016x", fc.ID, fc.Token)) {
			t.Errorf("%s: summary %q does not show the fence", where, p.info)
		}
		c.seen[opNames[h.Op]+" fenced"]++
	}

	switch h.Op {
	case wire.OpAck, wire.OpNack:
		var a wire.Ack
		if err := a.Decode(payload); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		c.num(where, d, "ndma.ack.cum", uint64(a.Cum))
		c.num(where, d, "ndma.ack.window", uint64(a.Window))
		c.num(where, d, "ndma.ack.echots", a.EchoTS)
		c.num(where, d, "ndma.ack.delay", uint64(a.AckDelay))
		c.num(where, d, "ndma.ack.nblocks", uint64(a.NBlocks))
		var want, got []string
		for _, b := range a.Blocks[:a.NBlocks] {
			want = append(want, fmt.Sprint(b.Start, b.End))
		}
		starts, ends := d.all("ndma.sack.start"), d.all("ndma.sack.end")
		for j := range starts {
			if j < len(ends) {
				got = append(got, starts[j].Show+" "+ends[j].Show)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: SACK blocks %v, want %v", where, got, want)
		}
		if a.NBlocks > 0 {
			c.seen["sack"]++
		}
		c.seen[opNames[h.Op]]++
		return
	case wire.OpControl:
		if h.Offset != 0 || uint32(h.Len) != h.MsgLen {
			c.seen["ctrl fragment"]++
			return
		}
		if len(payload) == 0 {
			c.seen["ctrl refusal"]++
			return
		}
		var m ctrl.Msg
		if err := secure.ParseCtrl(payload, &m, c.f.token); err != nil {
			if !d.has("ndma.ctrl.malformed") {
				t.Errorf("%s: a malformed control message (%v) shows no expert info", where, err)
			}
			c.seen["ctrl malformed"]++
			return
		}
		c.ctrl(where, d, &m, payload, w, s)
		c.seen["ctrl "+strings.ToUpper(m.Type.String())+" "+dir]++
		return
	}
	switch {
	case h.Op == wire.OpChain && len(body) > 0:
		hops, data, err := wire.SplitChain(&h, body)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		addrs, ops, coefs := d.all("ndma.chain.addr"), d.all("ndma.chain.op"), d.all("ndma.chain.coef")
		if len(addrs) != len(hops)/wire.ChainHopLen || len(ops) != len(addrs) || len(coefs) != len(addrs) || (data != nil) != d.has("ndma.chain.data") {
			t.Errorf("%s: %d hops shown, want %d", where, len(addrs), len(hops)/wire.ChainHopLen)
			break
		}
		for j := range addrs {
			hop := wire.ChainHopAt(hops, j)
			v, _ := strconv.ParseUint(addrs[j].Show, 0, 64)
			c, _ := strconv.ParseUint(coefs[j].Show, 0, 8)
			if v != hop.Addr || !strings.Contains(ops[j].Showname, strings.ToUpper(hop.Op.String())) || c != uint64(hop.Coef) {
				t.Errorf("%s: hop %d shown as %s %s ×%s, want %v at %#x ×%#x", where, j, ops[j].Showname, addrs[j].Show, coefs[j].Show, hop.Op, hop.Addr, hop.Coef)
			}
		}
	case h.Op == wire.OpOptim && dir == "req" && len(body) > 0:
		p, err := wire.ParseOptim(body)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		c.num(where, d, "ndma.optim.algo", uint64(p.Algo))
		c.num(where, d, "ndma.optim.step", uint64(p.Step))
		if v, err := strconv.ParseFloat(d.show("ndma.optim.beta2"), 32); err != nil || float32(v) != p.Beta2 {
			t.Errorf("%s: beta2 %q, want %v", where, d.show("ndma.optim.beta2"), p.Beta2)
		}
	case h.Op == wire.OpEvent && h.Status == wire.StatusMemberDead:
		if !strings.Contains(p.info, "MEMBER_DEAD") || !strings.Contains(p.info, "member 2") {
			t.Errorf("%s: event summary %q", where, p.info)
		}
	case len(body) > 0:
		if got := d.value("ndma.payload"); got != hex.EncodeToString(body) {
			t.Errorf("%s: payload %q, want %x", where, got, body)
		}
	}
	if h.Op == wire.OpRead && h.Flags&wire.FlagResp != 0 && h.Mode == wire.ModeUnicast && bytes.Equal(body, w.data) {
		c.seen["READ unicast resp"]++
		return
	}
	if h.Op == wire.OpRead && h.Flags&wire.FlagResp != 0 && h.Mode == wire.ModeUnicast {
		return // (a reply of the memory node's own)
	}
	if h.Op == wire.OpWrite && h.Mode == wire.ModeUnicast && dir == "req" && h.Group == 0 {
		if !bytes.Equal(body, w.data) || h.Key != w.memKey {
			return
		}
	}
	if h.Op == wire.OpData && h.Mode == wire.ModeAggregate && h.Src == wire.MemberAll {
		dir = "result"
	}
	c.seen[opNames[h.Op]+" "+h.Mode.String()+" "+dir]++
}

func (c *checker) pool(where string, d *fields, p *ctrl.PoolSpec) {
	c.num(where, d, "ndma.ctrl.pool.size", p.Size)
	c.num(where, d, "ndma.ctrl.pool.stripe", p.Stripe)
	c.num(where, d, "ndma.ctrl.pool.columns", uint64(p.Columns))
	c.num(where, d, "ndma.ctrl.pool.replicas", uint64(p.Replicas))
	c.num(where, d, "ndma.ctrl.pool.perm", uint64(p.Perm))
}

func addrs(as []netip.AddrPort) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

// num checks that the first field called name shows the number want.
// keyField is the dissector's name for the header's Key: the caller the
// switch writes into an anycast request, the region key elsewhere.
func keyField(h *wire.Header) string {
	if h.Mode == wire.ModeAnycast && h.Flags&wire.FlagResp == 0 {
		return "ndma.caller"
	}
	return "ndma.key"
}

func (c *checker) num(where string, d *fields, name string, want uint64) {
	c.t.Helper()
	got := d.show(name)
	v, err := strconv.ParseUint(got, 0, 64)
	if err != nil || v != want {
		c.t.Errorf("%s: %s = %q, want %d (%#x)", where, name, got, want, want)
	}
}

func (c *checker) flag(where string, d *fields, name string, want bool) {
	c.t.Helper()
	got := d.show(name)
	on := got == "1" || strings.EqualFold(got, "true")
	if !on && got != "0" && !strings.EqualFold(got, "false") || on != want {
		c.t.Errorf("%s: %s = %q, want %v", where, name, got, want)
	}
}

// contains checks that the first field called name is displayed with
// text.
func (c *checker) contains(where string, d *fields, name, text string) {
	c.t.Helper()
	if got := d.showname(name); !strings.Contains(got, text) {
		c.t.Errorf("%s: %s displayed as %q, want it to name %q", where, name, got, text)
	}
}

func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// PDML, tshark's XML output: packets of protocols of nested fields.

type pdmlField struct {
	Name     string      `xml:"name,attr"`
	Show     string      `xml:"show,attr"`
	Showname string      `xml:"showname,attr"`
	Value    string      `xml:"value,attr"`
	Fields   []pdmlField `xml:"field"`
}

type pdmlProto struct {
	Name     string      `xml:"name,attr"`
	Showname string      `xml:"showname,attr"`
	Fields   []pdmlField `xml:"field"`
}

type pdmlDoc struct {
	Packets []struct {
		Protos []pdmlProto `xml:"proto"`
	} `xml:"packet"`
}

// fields are one protocol's fields by name, in tree order (nested fields
// flattened).
type fields struct{ by map[string][]pdmlField }

func (f *fields) add(fs []pdmlField) {
	for _, x := range fs {
		f.by[x.Name] = append(f.by[x.Name], x)
		f.add(x.Fields)
	}
}

func (f *fields) has(name string) bool        { return len(f.by[name]) > 0 }
func (f *fields) all(name string) []pdmlField { return f.by[name] }
func (f *fields) first(name string) *pdmlField {
	if fs := f.by[name]; len(fs) > 0 {
		return &fs[0]
	}
	return &pdmlField{}
}
func (f *fields) show(name string) string     { return f.first(name).Show }
func (f *fields) showname(name string) string { return f.first(name).Showname }
func (f *fields) value(name string) string    { return f.first(name).Value }

type packet struct {
	order []string
	proto map[string]*fields
	info  string
}

func parsePDML(b []byte) ([]*packet, error) {
	var doc pdmlDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("tshark's PDML: %w", err)
	}
	var pkts []*packet
	for _, p := range doc.Packets {
		pk := &packet{proto: map[string]*fields{}}
		for _, pr := range p.Protos {
			pk.order = append(pk.order, pr.Name)
			fs := &fields{by: map[string][]pdmlField{}}
			fs.add(pr.Fields)
			pk.proto[pr.Name] = fs
			if pr.Name == "ndma" {
				pk.info = pr.Showname // the summary, as the Info column shows it
			}
		}
		pkts = append(pkts, pk)
	}
	return pkts, nil
}
