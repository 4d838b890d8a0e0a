package transport

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Tests with crafted, well-formed datagrams: each would crash, freeze or
// exhaust an engine that trusted what a packet says.

var t0 = time.Unix(1000, 0)

// craft seals a data packet with the given header fields.
func craft(h wire.Header, payload []byte) []byte {
	h.Version = wire.Version
	if h.Op == 0 {
		h.Op = wire.OpWrite
	}
	if h.MsgLen == 0 && h.Offset == 0 {
		h.MsgLen = uint32(len(payload))
	}
	pkt, err := wire.AppendPacket(nil, &h, payload)
	if err != nil {
		panic(err)
	}
	return pkt
}

// craftAck seals an ACK frame.
func craftAck(a *wire.Ack) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpAck}
	b := make([]byte, wire.HeaderLen+a.EncodedLen())
	h.Len = uint16(a.EncodedLen())
	h.Encode(b)
	a.Encode(b[wire.HeaderLen:])
	wire.Seal(b)
	return b
}

// within runs f and fails the test if it has not returned after limit (a
// generous bound: the operations it guards take microseconds).
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

// trust makes addr an address e contacted itself, so that e's ACKs to it
// are plain ones, not challenges.
func trust(t *testing.T, e *Engine, addr netip.AddrPort) {
	t.Helper()
	h := wire.Header{Op: wire.OpNop}
	if _, err := e.Send(PeerID{Addr: addr}, &h, nil, 0); err != nil {
		t.Fatal(err)
	}
	if !e.Validated(addr) {
		t.Fatal("address contacted is not validated")
	}
}

// lastAck polls e and returns the ACK frame it sends to addr, in an ACK
// packet or riding on data (wire.FlagAck).
func lastAck(t *testing.T, e *Engine, now time.Time, addr netip.AddrPort) (wire.Ack, bool) {
	t.Helper()
	out, _, _ := e.Poll(now, nil)
	var a wire.Ack
	found := false
	for _, d := range out {
		var h wire.Header
		p, _, err := wire.Parse(d.Buf, &h)
		if err == nil && d.Addr == addr && h.Flags&wire.FlagAck != 0 {
			if _, err := wire.SplitAck(p, &a); err != nil {
				t.Fatal(err)
			}
			found = true
			continue
		}
		if err != nil || d.Addr != addr || (h.Op != wire.OpAck && h.Op != wire.OpNack) {
			continue
		}
		if err := a.Decode(p); err != nil {
			t.Fatal(err)
		}
		found = true
	}
	return a, found
}

// TestAckBaseJump: a data packet whose AckBase is 2^31-2 ahead of the
// receive window used to advance it one PSN at a time (seconds of CPU).
// Now it costs O(1), and — since a datagram that restarts a live window
// may be forged — it is answered with a challenge and the window restarts
// only when the sender echoes it. A jump shorter than the window keeps
// the packets already received beyond it.
func TestAckBaseJump(t *testing.T) {
	e, _ := New(Config{Seed: 1})
	from := netip.MustParseAddrPort("10.0.0.7:7")
	trust(t, e, from)
	h := wire.Header{PSN: 100, AckBase: 100, MsgID: 1, Flags: wire.FlagSyn}
	if _, ok := e.Step(t0, from, craft(h, make([]byte, 8))); !ok {
		t.Fatal("first packet not delivered")
	}
	lastAck(t, e, t0, from)
	far := uint32(101 + (1<<31 - 2))
	h = wire.Header{PSN: far, AckBase: far, MsgID: 2}
	var ok bool
	within(t, time.Second, "Step with a far AckBase", func() {
		_, ok = e.Step(t0, from, craft(h, make([]byte, 8)))
	})
	if ok {
		t.Fatal("a far AckBase restarted the window without a challenge")
	}
	nonce, found := challenge(t, e, t0, from)
	if !found {
		t.Fatal("no challenge for a far AckBase")
	}
	// A forged echo (wrong nonce) does nothing; the right one restarts
	// the window, and the resent packet is delivered.
	e.Step(t0, from, craftAck(&wire.Ack{Cum: nonce + 2, Window: 1024}))
	if _, ok := e.Step(t0, from, craft(h, make([]byte, 8))); ok {
		t.Fatal("window restarted on a wrong echo")
	}
	e.Step(t0, from, craftAck(&wire.Ack{Cum: nonce, Window: 1024}))
	if _, ok := e.Step(t0, from, craft(h, make([]byte, 8))); !ok {
		t.Fatal("packet at the new AckBase not delivered after the echo")
	}
	if a, _ := lastAck(t, e, t0, from); a.Cum != far+1 || a.NBlocks != 0 {
		t.Fatalf("after the jump: Cum %d blocks %d, want Cum %d", a.Cum, a.NBlocks, far+1)
	}
	// A short jump: PSN far+10 arrives, then AckBase moves to far+10.
	base := far + 1
	e.Step(t0, from, craft(wire.Header{PSN: base + 9, AckBase: base, MsgID: 3}, make([]byte, 8)))
	if a, _ := lastAck(t, e, t0, from); a.Cum != base || a.NBlocks != 1 {
		t.Fatalf("gap: Cum %d blocks %d", a.Cum, a.NBlocks)
	}
	if _, ok := e.Step(t0, from, craft(wire.Header{PSN: base + 10, AckBase: base + 9, MsgID: 4}, make([]byte, 8))); !ok {
		t.Fatal("packet after a short jump not delivered")
	}
	if a, _ := lastAck(t, e, t0, from); a.Cum != base+11 || a.NBlocks != 0 {
		t.Fatalf("short jump: Cum %d blocks %d, want Cum %d", a.Cum, a.NBlocks, base+11)
	}
}

// challenge polls e and returns the nonce of the reset challenge (an ACK
// with FlagSyn) it sends to addr.
func challenge(t *testing.T, e *Engine, now time.Time, addr netip.AddrPort) (uint32, bool) {
	t.Helper()
	out, _, _ := e.Poll(now, nil)
	for _, d := range out {
		var h wire.Header
		if _, _, err := wire.Parse(d.Buf, &h); err == nil && d.Addr == addr && h.Op == wire.OpAck && h.Flags&wire.FlagSyn != 0 {
			return h.PSN, true
		}
	}
	return 0, false
}

// TestForgedRestart: datagrams with a live stream's address that would
// restart its window (a SYN far from it, an AckBase a window ahead) —
// what a blind attacker can send without guessing a sequence number —
// leave the stream alone: the legitimate packets that follow are
// delivered in order, and the forged ones get at most one challenge per
// RTO. A sender that really restarted (a new engine at the same address)
// echoes the challenge and gets through.
func TestForgedRestart(t *testing.T) {
	srv, _ := New(Config{Seed: 3})
	cli, _ := New(Config{Seed: 4})
	sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
	now := t0
	exchange := func() (delivered int) {
		for range 2000 {
			out, _, _ := cli.Poll(now, nil)
			for _, o := range out {
				if _, ok := srv.Step(now, ca, o.Buf); ok {
					delivered++
				}
			}
			out, _, _ = srv.Poll(now, nil)
			for _, o := range out {
				cli.Step(now, sa, o.Buf)
			}
			now = now.Add(100 * time.Microsecond)
		}
		return delivered
	}
	send := func(n int) {
		for range n {
			if _, err := cli.Send(PeerID{Addr: sa}, &wire.Header{Op: wire.OpWrite}, make([]byte, 100), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(5)
	if got := exchange(); got != 5 {
		t.Fatalf("%d of 5 messages delivered", got)
	}
	before := srv.Stats()
	for i := range 1000 {
		h := wire.Header{PSN: uint32(i) * 7919, AckBase: uint32(i) * 7919, MsgID: uint64(1000 + i), Flags: wire.FlagSyn}
		if i%2 == 1 {
			h.Flags = 0
			h.AckBase = uint32(i)*7919 + 1<<30
		}
		srv.Step(now, ca, craft(h, make([]byte, 8)))
	}
	out, _, _ := srv.Poll(now, nil)
	if after := srv.Stats(); after.Resets != before.Resets || len(out) > 2 {
		t.Fatalf("1000 forged restarts: %d resets, %d datagrams in answer", after.Resets-before.Resets, len(out))
	}
	send(5)
	if got := exchange(); got != 5 {
		t.Fatalf("after the forged restarts: %d of 5 messages delivered", got)
	}
	// The client restarts: a new engine, a new initial sequence number.
	cli, _ = New(Config{Seed: 5})
	send(3)
	if got := exchange(); got != 3 {
		t.Fatalf("after the client's restart: %d of 3 messages delivered", got)
	}
	if srv.Stats().Resets != before.Resets+1 {
		t.Fatalf("%d resets for one restart", srv.Stats().Resets-before.Resets)
	}
}

// TestForgedStartBehind: a datagram forged in the sender's name reaches
// the receiver before the sender's first packet and starts the receive
// window 2^20 PSNs ahead of the real stream. The real first packet (SYN)
// is challenged; the sender's echoes are lost. The sender used to take the
// challenge for an acknowledgment and drop SYN from its resends, which the
// receiver, seeing an AckBase behind its window, took for duplicates and
// acknowledged at the forged point, forever: the message never completed.
// Now the resends keep SYN until a real ACK ("syn"), and an AckBase more
// than StaleSpan behind the window is challenged as well ("no syn": the
// resends of a sender whose stream was acknowledged before carry none);
// either way the next challenge is echoed and the message is delivered.
func TestForgedStartBehind(t *testing.T) {
	for _, c := range []struct {
		name    string
		dropSyn bool // strip SYN from the resends (a sender whose stream was acknowledged before)
	}{{"syn", false}, {"no syn", true}} {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := New(Config{Seed: 3})
			cli, _ := New(Config{Seed: 4})
			sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
			trust(t, srv, ca) // as a member trusts its switch
			if _, err := cli.Send(PeerID{Addr: sa}, &wire.Header{Op: wire.OpWrite}, make([]byte, 100), 1); err != nil {
				t.Fatal(err)
			}
			now := t0
			forged, delivered := false, 0
			var nonce uint32 // the receiver's first challenge
			echoed := false
			var done []Completion
			for range 5000 {
				out, comp, _ := cli.Poll(now, nil)
				done = append(done, comp...)
				for _, o := range out {
					var h wire.Header
					payload, _, err := wire.Parse(o.Buf, &h)
					if err != nil {
						t.Fatal(err)
					}
					var a wire.Ack
					if h.Op == wire.OpAck && a.Decode(payload) == nil && nonce != 0 && a.Cum == nonce {
						echoed = true
						continue // the echoes of the first challenge are lost
					}
					if h.Op == wire.OpWrite && !forged {
						forged = true
						at := h.AckBase + 1<<20
						srv.Step(now, ca, craft(wire.Header{PSN: at, AckBase: at, MsgID: 1 << 40, Flags: wire.FlagSyn}, make([]byte, 8)))
					}
					if h.Op == wire.OpWrite && !c.dropSyn && h.Flags&wire.FlagSyn == 0 && delivered == 0 {
						t.Fatal("a resend lost its SYN before the receiver acknowledged anything")
					}
					if h.Op == wire.OpWrite && c.dropSyn && h.Flags&wire.FlagSyn != 0 && echoed {
						h.Flags &^= wire.FlagSyn
						o.Buf = craft(h, payload)
					}
					if d, ok := srv.Step(now, ca, o.Buf); ok && d.Header.MsgID != 1<<40 {
						delivered++
					}
				}
				out, _, _ = srv.Poll(now, nil)
				for _, o := range out {
					var h wire.Header
					if _, _, err := wire.Parse(o.Buf, &h); err == nil && h.Op == wire.OpAck && h.Flags&wire.FlagSyn != 0 && nonce == 0 {
						nonce = h.PSN
					}
					cli.Step(now, sa, o.Buf)
				}
				if len(done) > 0 {
					break
				}
				now = now.Add(time.Millisecond)
			}
			if delivered != 1 || len(done) != 1 || done[0].Err != nil {
				t.Fatalf("%d delivered, completions %+v; want the message delivered and acknowledged (virtual %v, receiver %+v)",
					delivered, done, now.Sub(t0), srv.Stats())
			}
			if st := srv.Stats(); st.Resets != 1 {
				t.Fatalf("%d window restarts, want 1", st.Resets)
			}
		})
	}
}

// TestHostileSack: an ACK whose 32 SACK blocks each span about 2^31 PSNs
// starting far below what was sent used to be walked one PSN at a time
// (minutes); blocks are now clipped to the packets in flight.
func TestHostileSack(t *testing.T) {
	e, _ := New(Config{MTU: 1500, Seed: 2})
	to := netip.MustParseAddrPort("10.0.0.8:8")
	h := wire.Header{Op: wire.OpWrite}
	if _, err := e.Send(PeerID{Addr: to}, &h, make([]byte, 10*e.SegmentSize()), 5); err != nil {
		t.Fatal(err)
	}
	out, _, _ := e.Poll(t0, nil)
	if len(out) != 10 {
		t.Fatalf("%d packets sent, want 10", len(out))
	}
	var first wire.Header
	if _, _, err := wire.Parse(out[0].Buf, &first); err != nil {
		t.Fatal(err)
	}
	psn0 := first.PSN
	a := wire.Ack{Cum: first.PSN - 1<<31 + 64, Window: 1024, NBlocks: wire.MaxSackBlocks}
	for i := range a.Blocks {
		a.Blocks[i] = wire.SackBlock{Start: a.Cum + 1 + uint32(i), End: a.Cum + 1<<31 - uint32(i)}
	}
	pkt := craftAck(&a)
	var chk wire.Ack
	if _, _, err := wire.Parse(pkt, &first); err != nil || chk.Decode(pkt[wire.HeaderLen:]) != nil {
		t.Fatal("crafted ACK does not decode")
	}
	within(t, time.Second, "Step with 32 huge SACK blocks", func() { e.Step(t0, to, pkt) })
	// The blocks cover the 10 packets in flight, but the ACK does not fit
	// what was sent (its cumulative point is 2^31 away): a blind forgery,
	// ignored. The receiver's real ACK completes the message.
	if _, comps, _ := e.Poll(t0, nil); len(comps) != 0 {
		t.Fatalf("a forged ACK completed %+v", comps)
	}
	e.Step(t0, to, craftAck(&wire.Ack{Cum: psn0 + 10, Window: 1024}))
	_, comps, _ := e.Poll(t0, nil)
	if len(comps) != 1 || comps[0].Err != nil || comps[0].Token != 5 {
		t.Fatalf("completions %+v", comps)
	}
}

// TestContradictingFragments: fragments that disagree with the message
// they join (another MsgLen, bytes already received) are refused but
// acknowledged; MsgDone comes once, when [0, MsgLen) is covered, whatever
// the arrival order.
func TestContradictingFragments(t *testing.T) {
	e, _ := New(Config{Seed: 3})
	from := netip.MustParseAddrPort("10.0.0.9:9")
	trust(t, e, from)
	psn := uint32(7)
	step := func(off, n, msgLen uint32) (Delivery, bool) {
		h := wire.Header{PSN: psn, AckBase: 7, MsgID: 42, Offset: off, MsgLen: msgLen}
		psn++
		return e.Step(t0, from, craft(h, make([]byte, n)))
	}
	if d, ok := step(0, 100, 200); !ok || d.MsgDone {
		t.Fatal("first fragment")
	}
	// The second fragment of the crash: a larger MsgLen and an
	// Offset past the first fragment.
	if _, ok := step(150, 100, 400); ok {
		t.Fatal("fragment with another MsgLen delivered")
	}
	if _, ok := step(50, 100, 200); ok {
		t.Fatal("overlapping fragment delivered")
	}
	if got := e.Stats().Contradicting; got != 2 {
		t.Fatalf("Contradicting %d, want 2", got)
	}
	// Refused packets are acknowledged all the same.
	if a, _ := lastAck(t, e, t0, from); a.Cum != psn {
		t.Fatalf("Cum %d, want %d", a.Cum, psn)
	}
	d, ok := step(100, 100, 200)
	if !ok || !d.MsgDone {
		t.Fatalf("last fragment: ok %v done %v", ok, d.MsgDone)
	}
	// Out of order: 9 fragments of 10 bytes, arriving odd offsets first.
	done := 0
	for _, i := range []uint32{1, 3, 5, 7, 0, 2, 4, 6, 8} {
		h := wire.Header{PSN: psn, AckBase: psn, MsgID: 43, Offset: 10 * i, MsgLen: 90}
		psn++
		d, ok := e.Step(t0, from, craft(h, make([]byte, 10)))
		if !ok {
			t.Fatalf("fragment %d refused", i)
		}
		if d.MsgDone {
			done++
			if i != 8 {
				t.Fatalf("MsgDone on fragment %d", i)
			}
		}
	}
	if done != 1 {
		t.Fatalf("MsgDone %d times", done)
	}
}

// TestFloodOfStrangers: 100,000 data packets, each from a fresh address,
// group, member and mode, do not lock a new client out of a server whose
// peer table they used to fill for good, and the server's state stays
// within MaxPeers plus the strangers' budget (1024 by default).
func TestFloodOfStrangers(t *testing.T) {
	const maxPeers = 64
	srv, _ := New(Config{Seed: 4, MaxPeers: maxPeers, GroupModes: true})
	cli, _ := New(Config{Seed: 5})
	srvAddr := netip.MustParseAddrPort("10.0.0.1:1")
	cliAddr := netip.MustParseAddrPort("10.0.0.2:2")
	now := t0
	var out []netio.Datagram
	// pump runs the client and the server until nothing is in flight;
	// the server answers each request with a 100-byte response.
	pump := func() int {
		got := 0
		for range 1000 {
			now = now.Add(10 * time.Microsecond)
			var next time.Time
			out, _, next = cli.Poll(now, out[:0])
			for _, d := range out {
				if d.Addr != srvAddr {
					continue
				}
				if del, ok := srv.Step(now, cliAddr, d.Buf); ok && del.MsgDone && del.Header.Flags&wire.FlagResp == 0 {
					h := wire.Header{Op: wire.OpWrite, Flags: wire.FlagResp, MsgID: del.Header.MsgID}
					if _, err := srv.Send(del.Peer, &h, make([]byte, 100), 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			n := len(out)
			out, _, _ = srv.Poll(now, out[:0])
			for _, d := range out {
				if d.Addr != cliAddr {
					continue
				}
				if del, ok := cli.Step(now, srvAddr, d.Buf); ok && del.MsgDone {
					got++
				}
			}
			if n == 0 && len(out) == 0 && cli.Pending() == 0 && (next.IsZero() || next.After(now)) {
				break
			}
		}
		return got
	}
	h := wire.Header{Op: wire.OpWrite}
	if _, err := cli.Send(PeerID{Addr: srvAddr}, &h, make([]byte, 3000), 1); err != nil {
		t.Fatal(err)
	}
	if pump() != 1 {
		t.Fatal("exchange before the flood failed")
	}
	var x uint32
	for i := range 100000 {
		x = x*1664525 + 1013904223
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 66, byte(i >> 8), byte(i)}), uint16(x>>16))
		fh := wire.Header{PSN: x, AckBase: x, MsgID: uint64(i), Group: x >> 30, Src: uint16(x >> 8), Mode: wire.Mode(x>>28) & 3}
		srv.Step(now, from, craft(fh, make([]byte, 8)))
		if i%1000 == 0 {
			// The established client keeps working during the flood.
			if _, err := cli.Send(PeerID{Addr: srvAddr}, &h, make([]byte, 3000), 2); err != nil {
				t.Fatal(err)
			}
			if pump() != 1 {
				t.Fatalf("exchange %d during the flood failed (server %+v)", i, srv.Stats())
			}
		}
		if srv.Peers() > maxPeers+1024 {
			t.Fatalf("server holds %d peers", srv.Peers())
		}
	}
	// A client the server has never seen is served after the flood.
	cli2, _ := New(Config{Seed: 6})
	cli = cli2
	cliAddr = netip.MustParseAddrPort("10.0.0.3:3")
	if _, err := cli.Send(PeerID{Addr: srvAddr}, &h, make([]byte, 3000), 3); err != nil {
		t.Fatal(err)
	}
	if pump() != 1 {
		t.Fatalf("new client locked out after the flood (server %+v)", srv.Stats())
	}
}

// TestAmplification: a one-packet request from an address that never
// acknowledges anything (a forged source) gets at most three times its
// bytes back, retransmissions included, and the response fails after
// DeadTimeout; the same request from a real client gets its 1 MiB
// response, held back only until the client echoes the challenge.
func TestAmplification(t *testing.T) {
	srv, _ := New(Config{Seed: 7, MTU: 9000})
	victim := netip.MustParseAddrPort("10.0.0.66:6")
	req := craft(wire.Header{Op: wire.OpRead, PSN: 5, AckBase: 5, MsgID: 9, Flags: wire.FlagSyn}, nil)
	d, ok := srv.Step(t0, victim, req)
	if !ok {
		t.Fatal("request not delivered")
	}
	rh := wire.Header{Op: wire.OpRead, Flags: wire.FlagResp, MsgID: 9}
	if _, err := srv.Send(d.Peer, &rh, make([]byte, 1<<20), 1); err != nil {
		t.Fatal(err)
	}
	sent := 0
	var failed error
	now := t0
	for i := 0; i < 100000 && failed == nil; i++ {
		out, comps, next := srv.Poll(now, nil)
		for _, o := range out {
			sent += len(o.Buf)
		}
		for _, c := range comps {
			failed = c.Err
		}
		if next.IsZero() {
			break
		}
		now = next
	}
	if sent > 3*len(req) {
		t.Fatalf("sent %d bytes to an unverified address for a %d-byte request", sent, len(req))
	}
	if !errors.Is(failed, ErrPeerDead) {
		t.Fatalf("response to a silent stranger: %v", failed)
	}

	// A real client: READ 1 MiB, then WRITE 1 MiB as its first message
	// to a fresh server.
	for _, read := range []bool{true, false} {
		srv, _ := New(Config{Seed: 8, MTU: 9000})
		cli, _ := New(Config{Seed: 9, MTU: 9000})
		sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
		req, resp := 0, 1<<20
		if !read {
			req, resp = resp, 0
		}
		h := wire.Header{Op: wire.OpRead}
		if _, err := cli.Send(PeerID{Addr: sa}, &h, make([]byte, req), 1); err != nil {
			t.Fatal(err)
		}
		got, done := 0, false
		now := t0
		for i := 0; i < 10000 && !done; i++ {
			now = now.Add(100 * time.Microsecond)
			out, _, _ := cli.Poll(now, nil)
			for _, o := range out {
				if d, ok := srv.Step(now, ca, o.Buf); ok && d.MsgDone && d.Header.Flags&wire.FlagResp == 0 {
					rh := wire.Header{Op: wire.OpRead, Flags: wire.FlagResp, MsgID: d.Header.MsgID}
					if _, err := srv.Send(d.Peer, &rh, make([]byte, resp), 2); err != nil {
						t.Fatal(err)
					}
				}
			}
			out, _, _ = srv.Poll(now, nil)
			for _, o := range out {
				if d, ok := cli.Step(now, sa, o.Buf); ok {
					got += len(d.Payload)
					done = d.MsgDone
				}
			}
		}
		if !done || got != resp {
			t.Fatalf("read %v: response done %v, %d of %d bytes", read, done, got, resp)
		}
		// The client's ACK of the response.
		out, _, _ := cli.Poll(now.Add(time.Millisecond), nil)
		for _, o := range out {
			srv.Step(now, ca, o.Buf)
		}
		if !srv.Validated(ca) {
			t.Fatalf("read %v: client address not validated after it acknowledged data", read)
		}
		if read && srv.Stats().AmplificationLimited == 0 {
			t.Fatal("first response to an unvalidated client not limited")
		}
	}
}

// TestAmplificationKeepsPackets: a response that does not fit the
// budget of an unvalidated requester waits whole for the echo of the
// challenge instead of going out cut to fit: a one-packet response stays
// one packet (two would each be exposed to loss, and a join reply whose
// second half was lost again and again kept a member from heartbeating
// until it was declared dead), and it arrives one round trip later than
// to a validated address.
func TestAmplificationKeepsPackets(t *testing.T) {
	srv, _ := New(Config{Seed: 21, MTU: 9000})
	cli, _ := New(Config{Seed: 22, MTU: 9000})
	sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
	const reqLen, respLen = 64, 300 // the response: more than 3x the request less two challenges
	h := wire.Header{Op: wire.OpRead}
	if _, err := cli.Send(PeerID{Addr: sa}, &h, make([]byte, reqLen), 1); err != nil {
		t.Fatal(err)
	}
	const rtt = 100 * time.Microsecond
	now := t0
	got, done, sentAt, doneAt := 0, false, time.Time{}, time.Time{}
	for i := 0; i < 100 && !done; i++ {
		out, _, _ := cli.Poll(now, nil)
		now = now.Add(rtt / 2)
		for _, o := range out {
			if d, ok := srv.Step(now, ca, o.Buf); ok && d.MsgDone && d.Header.Flags&wire.FlagResp == 0 {
				rh := wire.Header{Op: wire.OpRead, Flags: wire.FlagResp, MsgID: d.Header.MsgID}
				if _, err := srv.Send(d.Peer, &rh, make([]byte, respLen), 2); err != nil {
					t.Fatal(err)
				}
				sentAt = now
			}
		}
		out, _, _ = srv.Poll(now, nil)
		now = now.Add(rtt / 2)
		for _, o := range out {
			var ph wire.Header
			if p, _, err := wire.Parse(o.Buf, &ph); err == nil && ph.Op == wire.OpRead {
				if ph.Flags&wire.FlagAck != 0 {
					var a wire.Ack
					p, _ = wire.SplitAck(p, &a)
				}
				if len(p) != respLen {
					t.Fatalf("response sent in a packet of %d of its %d bytes", len(p), respLen)
				}
			}
			if d, ok := cli.Step(now, sa, o.Buf); ok {
				got += len(d.Payload)
				done, doneAt = d.MsgDone, now
			}
		}
	}
	if !done || got != respLen {
		t.Fatalf("response done %v, %d of %d bytes", done, got, respLen)
	}
	if srv.Stats().AmplificationLimited == 0 {
		t.Fatal("the response was not held back by the budget")
	}
	if took := doneAt.Sub(sentAt); took > 2*rtt {
		t.Fatalf("response took %v from Send to arrival, want at most one extra round trip (%v)", took, 2*rtt)
	}
}

// TestPeerQueueCap: one peer that never acknowledges cannot take all of
// MaxMessages; a stranger gets a much smaller share.
func TestPeerQueueCap(t *testing.T) {
	e, _ := New(Config{Seed: 10})
	h := wire.Header{Op: wire.OpWrite}
	a := PeerID{Addr: netip.MustParseAddrPort("10.0.0.1:1")}
	for i := range DefaultMaxPeerMessages {
		if _, err := e.Send(a, &h, []byte("x"), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Send(a, &h, []byte("x"), 0); !errors.Is(err, ErrQueueFull) || !errors.Is(err, ErrPeerQueueFull) {
		t.Fatalf("beyond the per-peer cap: %v", err)
	}
	b := PeerID{Addr: netip.MustParseAddrPort("10.0.0.2:2")}
	if _, err := e.Send(b, &h, []byte("x"), 0); err != nil {
		t.Fatalf("another peer refused: %v", err)
	}
	// A stranger (state created by its data, address unvalidated).
	s := netip.MustParseAddrPort("10.0.0.3:3")
	d, ok := e.Step(t0, s, craft(wire.Header{PSN: 1, AckBase: 1, MsgID: 1}, nil))
	if !ok || e.Strangers() != 1 || e.Validated(s) {
		t.Fatalf("stranger: ok %v strangers %d validated %v", ok, e.Strangers(), e.Validated(s))
	}
	for i := range DefaultMaxStrangerMessages {
		if _, err := e.Send(d.Peer, &h, []byte("x"), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Send(d.Peer, &h, []byte("x"), 0); !errors.Is(err, ErrPeerQueueFull) {
		t.Fatalf("beyond the stranger cap: %v", err)
	}
}

// TestStrangerEviction: strangers beyond MaxStrangers evict the least
// recently active one, never an established peer.
func TestStrangerEviction(t *testing.T) {
	e, _ := New(Config{Seed: 11, MaxStrangers: 4, MaxPeers: 2})
	h := wire.Header{Op: wire.OpWrite}
	est := PeerID{Addr: netip.MustParseAddrPort("10.0.0.1:1")}
	if _, err := e.Send(est, &h, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	var first PeerID
	for i := range 10 {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 1)
		d, _ := e.Step(t0, from, craft(wire.Header{PSN: 1, AckBase: 1, MsgID: 1}, nil))
		if i == 0 {
			first = d.Peer
			if _, err := e.Send(first, &h, []byte("reply"), 7); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.Peers() != 5 || e.Strangers() != 4 || e.Stats().StrangersEvicted != 6 {
		t.Fatalf("peers %d strangers %d evicted %d", e.Peers(), e.Strangers(), e.Stats().StrangersEvicted)
	}
	_, comps, _ := e.Poll(t0, nil)
	if len(comps) != 1 || comps[0].Token != 7 || !errors.Is(comps[0].Err, ErrEvicted) || comps[0].Peer != first {
		t.Fatalf("completions %+v", comps)
	}
	if e.lookup(est) == nil {
		t.Fatal("established peer evicted")
	}
	// Established peers are bounded by MaxPeers.
	if _, err := e.Send(PeerID{Addr: netip.MustParseAddrPort("10.0.0.2:1")}, &h, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Send(PeerID{Addr: netip.MustParseAddrPort("10.0.0.3:1")}, &h, nil, 0); !errors.Is(err, ErrTooManyPeers) {
		t.Fatalf("third established peer: %v", err)
	}
}

// TestIdleSweep: a receiver's state for a sender that went quiet is swept
// after IdleTimeout (default 30 s), and the sender, which kept its own
// state, resumes without a SYN: the fresh receiver starts at its AckBase,
// even when the first packet after the pause is lost.
func TestIdleSweep(t *testing.T) {
	cfg := Config{Seed: 12, MTU: 1500}
	srv, _ := New(cfg)
	cfg.Seed++
	cli, _ := New(cfg)
	sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
	now := t0
	exchange := func(dropFirst bool) int {
		done := 0
		for range 1000 {
			now = now.Add(time.Millisecond)
			out, _, _ := cli.Poll(now, nil)
			for _, o := range out {
				if dropFirst {
					dropFirst = false
					continue
				}
				if d, ok := srv.Step(now, ca, o.Buf); ok && d.MsgDone {
					done++
				}
			}
			out, _, _ = srv.Poll(now, nil)
			for _, o := range out {
				cli.Step(now, sa, o.Buf)
			}
			if cli.Pending() == 0 && done > 0 {
				break
			}
		}
		return done
	}
	h := wire.Header{Op: wire.OpWrite}
	if _, err := cli.Send(PeerID{Addr: sa}, &h, make([]byte, 5000), 1); err != nil {
		t.Fatal(err)
	}
	if exchange(false) != 1 || srv.Peers() != 1 {
		t.Fatalf("first message: server peers %d", srv.Peers())
	}
	// The server alone sees time pass.
	_, _, next := srv.Poll(now, nil)
	if next.IsZero() || next.Sub(now) > DefaultIdleTimeout {
		t.Fatalf("idle engine with a peer asks for Poll at %v (now %v)", next, now)
	}
	now = now.Add(DefaultIdleTimeout)
	srv.Poll(now, nil)
	if srv.Peers() != 0 || srv.Stats().PeersSwept != 1 {
		t.Fatalf("after idling: %d peers, %d swept", srv.Peers(), srv.Stats().PeersSwept)
	}
	if _, _, next := srv.Poll(now, nil); !next.IsZero() {
		t.Fatalf("empty engine asks for Poll at %v", next)
	}
	if _, err := cli.Send(PeerID{Addr: sa}, &h, make([]byte, 5000), 2); err != nil {
		t.Fatal(err)
	}
	if n := exchange(true); n != 1 {
		t.Fatalf("after the sweep: %d messages delivered", n)
	}
}

// TestAckProofNeeded: ACKs that acknowledge nothing really sent (a blind
// guess from a forged source) neither validate a stranger's address nor
// are applied to it; the echo of the challenge in the engine's ACK does.
func TestAckProofNeeded(t *testing.T) {
	e, _ := New(Config{Seed: 14})
	s := netip.MustParseAddrPort("10.0.0.5:5")
	d, _ := e.Step(t0, s, craft(wire.Header{PSN: 1, AckBase: 1, MsgID: 1}, make([]byte, 200)))
	rh := wire.Header{Op: wire.OpWrite, Flags: wire.FlagResp, MsgID: 1}
	if _, err := e.Send(d.Peer, &rh, make([]byte, 64), 0); err != nil {
		t.Fatal(err)
	}
	out, _, _ := e.Poll(t0, nil)
	challenge, found := uint32(0), false
	for _, o := range out {
		var h wire.Header
		p, _, err := wire.Parse(o.Buf, &h)
		if err != nil || h.Op != wire.OpAck {
			continue
		}
		var a wire.Ack
		if a.Decode(p) != nil || h.Flags&wire.FlagSyn == 0 || a.Cum != 1 || a.NBlocks != 0 {
			t.Fatalf("ACK to a stranger is not a challenge: %+v %+v", h, a)
		}
		challenge, found = h.PSN, true
	}
	if !found {
		t.Fatal("no challenge sent")
	}
	var x uint32 = 1
	for range 1000 {
		x = x*1664525 + 1013904223
		if x-challenge < 1<<16 || challenge-x < 1<<16 {
			continue
		}
		a := wire.Ack{Cum: x, Window: 64, NBlocks: 1}
		a.Blocks[0] = wire.SackBlock{Start: x + 1, End: x + 1<<31}
		e.Step(t0, s, craftAck(&a))
	}
	if e.Validated(s) || e.Strangers() != 1 {
		t.Fatalf("blind ACKs validated the address (strangers %d)", e.Strangers())
	}
	a := wire.Ack{Cum: challenge, Window: 64}
	e.Step(t0, s, craftAck(&a))
	if !e.Validated(s) || e.Strangers() != 0 {
		t.Fatal("the echo of the challenge did not validate the address")
	}
	// Now validated, the data is acknowledged for real.
	if a, _ := lastAck(t, e, t0, s); a.Cum != 2 {
		t.Fatalf("Cum %d after validation, want 2", a.Cum)
	}
}

// TestAnswerOnAnotherStream: a forged datagram on one stream (a group
// stream) that the layer above answers on another stream to the same
// address (an event to the member's unicast stream, as a forwarding node
// sends) must neither escape the amplification limit nor validate the
// address, and the answer's peer costs a stranger's memory (a small send
// ring). Once the address proves it receives, through any of its
// streams, the held answer goes out within a retransmission timeout.
func TestAnswerOnAnotherStream(t *testing.T) {
	srv, _ := New(Config{Seed: 7, MTU: 9000, GroupModes: true})
	victim := netip.MustParseAddrPort("10.0.0.66:6")
	fake := craft(wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: 5, Src: 3, Dst: wire.MemberAll, PSN: 5, AckBase: 5, MsgID: 9, Flags: wire.FlagSyn}, make([]byte, 8))
	if _, ok := srv.Step(t0, victim, fake); !ok {
		t.Fatal("group data not delivered")
	}
	answer := PeerID{Addr: victim, Group: 5, Member: 3}
	h := wire.Header{Op: wire.OpEvent}
	if _, err := srv.Send(answer, &h, make([]byte, 4096), 1); err != nil {
		t.Fatal(err)
	}
	if srv.Validated(victim) || srv.Strangers() != 2 {
		t.Fatalf("after the answer: validated %v, %d strangers; want false, 2", srv.Validated(victim), srv.Strangers())
	}
	sent, now := 0, t0
	for range 50 {
		out, _, next := srv.Poll(now, nil)
		for _, o := range out {
			sent += len(o.Buf)
		}
		if next.IsZero() {
			break
		}
		now = next
	}
	if sent > 3*len(fake) {
		t.Fatalf("sent %d bytes to an unverified address for a %d-byte datagram", sent, len(fake))
	}
	for _, p := range srv.groups[5].peers {
		if len(p.ring) > strangerRing {
			t.Fatalf("a stranger holds a send ring of %d records", len(p.ring))
		}
	}

	// The same with a client that answers: its unicast stream to the
	// server validates the address, and the held answer is delivered.
	srv, _ = New(Config{Seed: 7, MTU: 9000, GroupModes: true})
	cli, _ := New(Config{Seed: 8, MTU: 9000, GroupModes: true})
	sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
	cli.SetLocal(5, 3)
	srv.SetLocal(5, wire.MemberAll) // as a forwarding node is in its groups
	if _, err := cli.Send(PeerID{Addr: sa, Group: 5, Member: wire.MemberAll, Mode: wire.ModeMulticast}, &wire.Header{Op: wire.OpData}, make([]byte, 8), 1); err != nil {
		t.Fatal(err)
	}
	delivered, now := false, t0
	held := false
	for i := 0; i < 10000 && !delivered; i++ {
		out, _, _ := cli.Poll(now, nil)
		for _, o := range out {
			if d, ok := srv.Step(now, ca, o.Buf); ok && d.Header.Mode == wire.ModeMulticast && !held {
				held = true
				if _, err := srv.Send(PeerID{Addr: ca, Group: 5, Member: 3}, &wire.Header{Op: wire.OpEvent}, make([]byte, 4096), 2); err != nil {
					t.Fatal(err)
				}
			}
		}
		out, _, _ = srv.Poll(now, nil)
		for _, o := range out {
			if d, ok := cli.Step(now, sa, o.Buf); ok && d.Header.Op == wire.OpEvent && d.MsgDone {
				delivered = true
			}
		}
		now = now.Add(100 * time.Microsecond)
	}
	if !delivered || !srv.Validated(ca) {
		t.Fatalf("answer delivered %v, address validated %v", delivered, srv.Validated(ca))
	}
	if d := now.Sub(t0); d > 2*DefaultInitialRTO {
		t.Fatalf("the held answer took %v", d)
	}
}

// TestStrangersShareOfMessages: answers to strangers take at most a
// quarter of MaxMessages, so a flood of strangers whose answers never go
// out (their budget is spent, their addresses may be forged) leaves room
// for established peers.
func TestStrangersShareOfMessages(t *testing.T) {
	e, _ := New(Config{Seed: 11, MaxMessages: 64})
	refused := 0
	for i := range 100 {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 1000)
		d, ok := e.Step(t0, from, craft(wire.Header{PSN: 7, AckBase: 7, MsgID: 1, Flags: wire.FlagSyn}, make([]byte, 8)))
		if !ok {
			t.Fatalf("stranger %d: request not delivered", i)
		}
		if _, err := e.Send(d.Peer, &wire.Header{Op: wire.OpWrite, Flags: wire.FlagResp, MsgID: 1}, make([]byte, 64), 0); err != nil {
			if !errors.Is(err, ErrQueueFull) {
				t.Fatalf("stranger %d: %v", i, err)
			}
			refused++
		}
	}
	if refused != 100-64/4 {
		t.Fatalf("%d answers to strangers refused, want %d", refused, 100-64/4)
	}
	friend := netip.MustParseAddrPort("10.0.0.5:5")
	for i := range 32 {
		if _, err := e.Send(PeerID{Addr: friend}, &wire.Header{Op: wire.OpWrite}, make([]byte, 8), 0); err != nil {
			t.Fatalf("message %d to an established peer: %v", i, err)
		}
	}
}

// TestHandshakeNotData: a HANDSHAKE packet (the security layer's) that
// reaches an engine is counted unexpected and creates no peer.
func TestHandshakeNotData(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, PSN: 7, AckBase: 7, MsgLen: 40}
	pkt, err := wire.AppendPacket(nil, &h, make([]byte, 40))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Step(time.Unix(1, 0), netip.MustParseAddrPort("10.0.0.9:1"), pkt); ok {
		t.Fatal("a HANDSHAKE packet was delivered as data")
	}
	if st := e.Stats(); st.Unexpected != 1 || st.Peers != 0 {
		t.Fatalf("after a HANDSHAKE packet: %d unexpected, %d peers; want 1, 0", st.Unexpected, st.Peers)
	}
}

// TestSealRequired: a peer's word that it takes sealed datagrams only is
// not authenticated, so it fails nothing: a forged one sent before a
// plain client's first request is answered leaves the request to
// complete, and is forgotten once the stream is acknowledged. On a
// stream that never gets an ACK it is kept (Engine.SealRequired) and
// explains the failure at DeadTimeout (a *PeerError matching
// ErrSealRequired). An address with no stream ignores it.
func TestSealRequired(t *testing.T) {
	word, err := wire.AppendPacket(nil, &wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: 1},
		[]byte{wire.HandshakeSealRequired})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	sealed := netip.MustParseAddrPort("10.0.0.9:1")
	if _, err := e.Send(PeerID{Addr: sealed}, &wire.Header{Op: wire.OpWrite}, make([]byte, 64), 7); err != nil {
		t.Fatal(err)
	}
	e.Poll(now, nil)
	e.Step(now, netip.MustParseAddrPort("10.0.0.8:1"), word) // no stream there
	if st := e.Stats(); st.SealRequired != 0 || st.Unexpected != 1 {
		t.Fatalf("seal-required from an address without a stream: %+v", st)
	}
	e.Step(now, sealed, word)
	if _, done, _ := e.Poll(now, nil); len(done) != 0 {
		t.Fatalf("completions at once after seal-required: %+v", done)
	}
	if st := e.Stats(); st.SealRequired != 1 || st.Peers != 1 || !e.SealRequired(sealed) {
		t.Fatalf("after seal-required: %+v, SealRequired %v", st, e.SealRequired(sealed))
	}
	var done []Completion
	for at := now; len(done) == 0 && at.Before(now.Add(2*DefaultDeadTimeout)); at = at.Add(100 * time.Millisecond) {
		_, done, _ = e.Poll(at, nil)
	}
	var pe *PeerError
	if len(done) != 1 || done[0].Token != 7 || !errors.As(done[0].Err, &pe) || !pe.SealRequired ||
		!errors.Is(done[0].Err, ErrSealRequired) || !errors.Is(done[0].Err, ErrPeerDead) {
		t.Fatalf("completions of a stream told seal-required and never answered: %+v", done)
	}
	if msg := done[0].Err.Error(); !strings.Contains(msg, "takes only sealed datagrams") {
		t.Fatalf("error %q does not say the peer takes only sealed datagrams", msg)
	}

	// A plain client's first request, a forged notice before the answer:
	// the request completes, and the notice is forgotten.
	cli, err := New(Config{Seed: 41})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{t: t, cli: cli, srv: srv, ca: netip.MustParseAddrPort("10.0.0.2:2"), sa: netip.MustParseAddrPort("10.0.0.1:1"), now: t0}
	p.request(8)
	p.cli.Step(p.now, p.sa, word)
	var got [][]byte
	for range 3 {
		got = append(got, p.serve(8)...)
		p.now = p.now.Add(MaxAckDelay)
	}
	if len(got) != 1 {
		t.Fatalf("after a forged seal-required the first request got %d responses, want 1", len(got))
	}
	if st := p.cli.Stats(); st.SealRequired != 1 || st.MessagesFailed != 0 || p.cli.SealRequired(p.sa) {
		t.Fatalf("a first request was failed, or the notice outlived the ACK: %+v, SealRequired %v", st, p.cli.SealRequired(p.sa))
	}

	// A stream that has been acknowledged ignores the word.
	p = newPair(t, Config{}, Config{})
	p.request(8)
	p.cli.Step(p.now, p.sa, word)
	if got := p.serve(8); len(got) != 1 {
		t.Fatalf("after a forged seal-required the working stream delivered %d responses, want 1", len(got))
	}
	if st := p.cli.Stats(); st.SealRequired != 0 {
		t.Fatalf("a working stream counted the notice: %+v", st)
	}
}
