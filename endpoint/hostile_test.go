package endpoint

import (
	"bytes"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// Crafted datagrams: a hostile sender that speaks the wire format
// correctly (valid checksum, sequence numbers in the window) but lies in
// the fields the endpoint trusts.

// forger builds sealed datagrams with consecutive PSNs per stream, as a
// transport would, so that each is new data to the receiving engine.
type forger struct {
	psn map[forgerKey]uint32
}

type forgerKey struct {
	group uint32
	src   uint16
	mode  wire.Mode
}

func newForger() *forger { return &forger{psn: make(map[forgerKey]uint32)} }

// packet seals h (Version, PSN, AckBase and Len filled in) with payload.
func (f *forger) packet(h wire.Header, payload []byte) []byte {
	k := forgerKey{h.Group, h.Src, h.Mode}
	f.psn[k]++
	h.Version = wire.Version
	h.PSN = f.psn[k]
	h.AckBase = 1
	pkt, err := wire.AppendPacket(nil, &h, payload)
	if err != nil {
		panic(err)
	}
	return pkt
}

// step feeds one datagram to c and fails the test if the core panics.
func step(t *testing.T, c *Core, now time.Time, from netip.AddrPort, pkt []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Receive panicked on a crafted datagram: %v", r)
		}
	}()
	c.Receive(now, netio.Datagram{Addr: from, Buf: pkt})
}

func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

var (
	hostileAddr = netip.MustParseAddrPort("10.9.9.9:666")
	swAddr      = netip.MustParseAddrPort("10.0.0.100:9000")
)

// pollDone runs Poll and returns the ops it completed.
func pollDone(c *Core, now time.Time) []*Op {
	_, done, _ := c.Poll(now, nil)
	return append([]*Op(nil), done...)
}

func newTestCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	cfg.Transport.Seed = 1
	c, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The two datagrams of finding 1: the first fragment of a 100-byte
// message, then a fragment of the same message id that claims 10000
// bytes and lands at offset 5000 (past the first's length). Then the
// legitimate rest of the 100-byte message.
func contradicting(h wire.Header, data []byte) (first, liar, rest wire.Header, p1, p2, p3 []byte) {
	first, liar, rest = h, h, h
	first.MsgLen, first.Offset = 100, 0
	liar.MsgLen, liar.Offset = 10000, 5000
	rest.MsgLen, rest.Offset = 100, 50
	return first, liar, rest, data[:50], fill(50, 0xEE), data[50:100]
}

// TestContradictingFragmentMsg: finding 1 for two-sided messages, with
// the receive posted before and after the fragments arrive.
func TestContradictingFragmentMsg(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "posted", true: "unexpected"}[late], func(t *testing.T) {
			c := newTestCore(t, Config{})
			now := simnet.Epoch()
			f := newForger()
			data := fill(100, 1)
			op := &Op{Kind: KindRecvMsg, Peer: hostileAddr, Comm: 3, Tag: 9, Buf: make([]byte, 200)}
			if !late {
				if err := c.Post(now, op); err != nil {
					t.Fatal(err)
				}
			}
			h := wire.Header{Op: wire.OpSend, MsgID: 5, Key: 3, Operand1: 9, Operand2: 1}
			h1, h2, h3, p1, p2, p3 := contradicting(h, data)
			step(t, c, now, hostileAddr, f.packet(h1, p1))
			step(t, c, now, hostileAddr, f.packet(h2, p2))
			if got := refusedFrags(c); got != 1 {
				t.Fatalf("FragmentsRefused = %d, want 1", got)
			}
			if late {
				if n := bufferedUnexpected(c); n > 100 {
					t.Fatalf("%d bytes buffered for a 100-byte message", n)
				}
				if err := c.Post(now, op); err != nil {
					t.Fatal(err)
				}
			}
			step(t, c, now, hostileAddr, f.packet(h3, p3))
			done := pollDone(c, now)
			if len(done) != 1 || done[0] != op || op.Err != nil || op.N != 100 || !bytes.Equal(op.Buf[:100], data) {
				t.Fatalf("receive: done %d, err %v, N %d, data ok %v", len(done), op.Err, op.N, bytes.Equal(op.Buf[:100], data))
			}
			// The stream goes on: the next message is received whole.
			next := &Op{Kind: KindRecvMsg, Peer: hostileAddr, Comm: 3, Tag: 9, Buf: make([]byte, 64)}
			if err := c.Post(now, next); err != nil {
				t.Fatal(err)
			}
			step(t, c, now, hostileAddr, f.packet(wire.Header{Op: wire.OpSend, MsgID: 6, Key: 3, Operand1: 9, Operand2: 2, MsgLen: 10}, data[:10]))
			if done := pollDone(c, now); len(done) != 1 || next.Err != nil || next.N != 10 || !bytes.Equal(next.Buf[:10], data[:10]) {
				t.Fatalf("next message: err %v N %d", next.Err, next.N)
			}
		})
	}
}

// groupCore returns a core that is member 1 of group 7 at the switch
// swAddr.
func groupCore(t *testing.T, cfg Config) *Core {
	c := newTestCore(t, cfg)
	c.EnableGroups()
	c.SetMember(7, 1)
	return c
}

// TestContradictingFragmentMulticast: finding 1 for multicast receives,
// posted before and after the fragments arrive.
func TestContradictingFragmentMulticast(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "posted", true: "unexpected"}[late], func(t *testing.T) {
			c := groupCore(t, Config{})
			now := simnet.Epoch()
			f := newForger()
			data := fill(100, 2)
			op := &Op{Kind: KindRecv, Peer: swAddr, Group: 7, From: 0, Buf: make([]byte, 100)}
			if !late {
				if err := c.Post(now, op); err != nil {
					t.Fatal(err)
				}
			}
			h := wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: 7, Src: 0, Dst: 1, MsgID: 1}
			h1, h2, h3, p1, p2, p3 := contradicting(h, data)
			step(t, c, now, swAddr, f.packet(h1, p1))
			step(t, c, now, swAddr, f.packet(h2, p2))
			if got := refusedFrags(c); got != 1 {
				t.Fatalf("FragmentsRefused = %d, want 1", got)
			}
			if late {
				if err := c.Post(now, op); err != nil {
					t.Fatal(err)
				}
			}
			step(t, c, now, swAddr, f.packet(h3, p3))
			if done := pollDone(c, now); len(done) != 1 || op.Err != nil || !bytes.Equal(op.Buf, data) {
				t.Fatalf("receive: done %d, err %v", len(done), op.Err)
			}
			next := &Op{Kind: KindRecv, Peer: swAddr, Group: 7, From: 0, Buf: make([]byte, 10)}
			if err := c.Post(now, next); err != nil {
				t.Fatal(err)
			}
			step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: 7, Dst: 1, MsgID: 2, MsgLen: 10}, data[:10]))
			if done := pollDone(c, now); len(done) != 1 || next.Err != nil || !bytes.Equal(next.Buf, data[:10]) {
				t.Fatalf("next multicast: err %v", next.Err)
			}
		})
	}
}

// TestContradictingFragmentAnycast: finding 1 for an anycast request
// served by this endpoint (the switch relays a client's header as is).
func TestContradictingFragmentAnycast(t *testing.T) {
	c := groupCore(t, Config{})
	now := simnet.Epoch()
	f := newForger()
	data := fill(100, 3)
	h := wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1, MsgID: 11, Addr: 42}
	h1, h2, h3, p1, p2, p3 := contradicting(h, data)
	step(t, c, now, swAddr, f.packet(h1, p1))
	step(t, c, now, swAddr, f.packet(h2, p2))
	if got := refusedFrags(c); got != 1 {
		t.Fatalf("FragmentsRefused = %d, want 1", got)
	}
	step(t, c, now, swAddr, f.packet(h3, p3))
	rs := c.Requests()
	if len(rs) != 1 || rs[0].Key != 42 || !bytes.Equal(rs[0].Data, data) {
		t.Fatalf("requests %d", len(rs))
	}
	if err := c.Reply(rs[0], []byte("ok"), wire.StatusOK); err != nil {
		t.Fatal(err)
	}
	step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1, MsgID: 12, MsgLen: 3}, []byte("abc")))
	if rs := c.Requests(); len(rs) != 1 || string(rs[0].Data) != "abc" {
		t.Fatalf("next request: %d", len(rs))
	}
}

// TestContradictingFragmentResponse: a read's and a control exchange's
// response whose fragments contradict each other: the liar is dropped
// and the response completes from the consistent fragments.
func TestContradictingFragmentResponse(t *testing.T) {
	for _, kind := range []Kind{KindRead, KindControl} {
		t.Run(kind.String(), func(t *testing.T) {
			c := newTestCore(t, Config{})
			now := simnet.Epoch()
			f := newForger()
			data := fill(100, 4)
			op := &Op{Kind: kind, Peer: hostileAddr, Key: 1}
			if kind == KindRead {
				op.Buf = make([]byte, 100)
			} else {
				op.Buf = []byte("req")
			}
			if err := c.Post(now, op); err != nil {
				t.Fatal(err)
			}
			h := wire.Header{Op: kind.opcode(), Flags: wire.FlagResp, MsgID: op.msgID}
			h1, h2, h3, p1, p2, p3 := contradicting(h, data)
			step(t, c, now, hostileAddr, f.packet(h1, p1))
			step(t, c, now, hostileAddr, f.packet(h2, p2))
			if got := refusedFrags(c); got != 1 {
				t.Fatalf("FragmentsRefused = %d, want 1", got)
			}
			step(t, c, now, hostileAddr, f.packet(h3, p3))
			got := op.Buf
			if kind == KindControl {
				got = op.Resp
			}
			if done := pollDone(c, now); len(done) != 1 || op.Err != nil || !bytes.Equal(got, data) {
				t.Fatalf("op: done %d, err %v", len(done), op.Err)
			}
		})
	}
}

// TestReassemblyRefuses checks the endpoint's reassembly on its own: it
// refuses a fragment that contradicts its message or would land past its
// buffer, and reports a message the transport calls done while bytes are
// missing as broken (its receive then fails with ErrBadFragment). Through
// a Core the transport refuses such fragments first (the tests above count
// a refusal at either layer); this is the second line of defence.
func TestReassemblyRefuses(t *testing.T) {
	var r reassembly
	r.start(100, make([]byte, 100))
	frag := func(msgLen, off uint32, n int) (bool, error) {
		h := wire.Header{MsgLen: msgLen, Offset: off}
		return r.place(&h, fill(n, 1))
	}
	if done, err := frag(100, 0, 50); done || err != nil {
		t.Fatalf("first half: done %v, err %v", done, err)
	}
	for _, c := range []struct {
		name        string
		msgLen, off uint32
		n           int
	}{{"longer message", 10000, 5000, 50}, {"shorter message", 60, 0, 60}, {"past the end", 100, 80, 50}} {
		if done, err := frag(c.msgLen, c.off, c.n); done || !errors.Is(err, ErrBadFragment) {
			t.Fatalf("%s: done %v, err %v; want ErrBadFragment", c.name, done, err)
		}
	}
	if !r.Broken(true) || r.Broken(false) {
		t.Fatal("a message called done with half its bytes is not broken")
	}
	if done, err := frag(100, 50, 50); !done || err != nil || !r.Complete() {
		t.Fatalf("second half: done %v, err %v", done, err)
	}
	var small reassembly
	small.start(100, make([]byte, 40)) // a buffer shorter than the message
	h := wire.Header{MsgLen: 100, Offset: 20}
	if _, err := small.place(&h, fill(30, 2)); !errors.Is(err, ErrBadFragment) {
		t.Fatalf("fragment past the buffer: %v", err)
	}
}

// TestUnexpectedBoundedByCharge: an unexpected message is charged its
// length when its first fragment arrives; later fragments that claim a
// larger message cannot buffer past it (finding 1's last sentence).
func TestUnexpectedBoundedByCharge(t *testing.T) {
	c := newTestCore(t, Config{MaxUnexpected: 4096})
	now := simnet.Epoch()
	f := newForger()
	h := wire.Header{Op: wire.OpSend, MsgID: 5, Key: 1, Operand1: 1, Operand2: 1, MsgLen: 1000}
	step(t, c, now, hostileAddr, f.packet(h, fill(100, 6)))
	for i := range 200 {
		h.MsgLen, h.Offset = 1<<30, uint32(1000+i*1000)
		step(t, c, now, hostileAddr, f.packet(h, fill(1000, 7)))
	}
	if n := bufferedUnexpected(c); n > 1000 {
		t.Fatalf("%d bytes buffered for unexpected messages, bound 4096 and a 1000-byte message", n)
	}
}

// TestGroupOnlyFromItsSwitch: once a group's forwarding node is known,
// the group's datagrams from any other address — here a forged anycast
// request that would hold a buffer of its claimed length, and a forged
// multicast — are dropped before they cost any state.
func TestGroupOnlyFromItsSwitch(t *testing.T) {
	c := newTestCore(t, Config{})
	c.EnableGroups()
	c.SetMember(7, 2)
	c.SetGroupSwitch(7, swAddr)
	now := simnet.Epoch()
	f := newForger()
	req := wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 2, MsgID: 1, MsgLen: 32 << 20}
	step(t, c, now, hostileAddr, f.packet(req, fill(1000, 1)))
	mc := wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: 7, Src: wire.MemberAll, Dst: 2, MsgID: 1, MsgLen: 100}
	step(t, c, now, hostileAddr, f.packet(mc, fill(100, 2)))
	if st := c.Stats(); st.ForeignGroup != 2 || len(c.anyIn) != 0 || len(c.unexp) != 0 || c.eng.Peers() != 0 {
		t.Fatalf("forged group datagrams: %d dropped, %d requests, %d unexpected, %d peers; want 2, 0, 0, 0",
			st.ForeignGroup, len(c.anyIn), len(c.unexp), c.eng.Peers())
	}
	// The same request from the switch is taken.
	step(t, c, now, swAddr, f.packet(req, fill(1000, 1)))
	if len(c.anyIn) != 1 {
		t.Fatalf("the switch's request: %d requests in progress, want 1", len(c.anyIn))
	}
}

// TestAnycastDeclaredLength: the first fragment of an anycast request
// declaring 16 MiB used to allocate (and fault in) all of it at once —
// tens of milliseconds of one Receive for 64 bytes received, from a sender
// that need not send the rest. A large request now costs the bytes that
// arrived until it is complete, and is still delivered whole.
func TestAnycastDeclaredLength(t *testing.T) {
	c := groupCore(t, Config{})
	now := simnet.Epoch()
	f := newForger()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1,
		MsgID: 1, MsgLen: 16 << 20}, make([]byte, 64)))
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("a 64-byte first fragment declaring 16 MiB allocated %d KiB", grew>>10)
	}
	// A request of 100 KiB in 13 fragments, out of order.
	data := fill(100<<10, 5)
	const frag = 8000
	var offs []int
	for off := 0; off < len(data); off += frag {
		offs = append([]int{off}, offs...)
	}
	for _, off := range offs {
		end := min(off+frag, len(data))
		step(t, c, now, swAddr, f.packet(wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1,
			MsgID: 2, Addr: 9, Offset: uint32(off), MsgLen: uint32(len(data))}, data[off:end]))
	}
	if rs := c.Requests(); len(rs) != 1 || rs[0].Key != 9 || !bytes.Equal(rs[0].Data, data) {
		t.Fatalf("%d requests, want the 100 KiB one whole", len(rs))
	}
}
