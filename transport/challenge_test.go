package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

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
	if _, ok := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(h, make([]byte, 8))}, Admission{}); !ok {
		t.Fatal("first packet not delivered")
	}
	lastAck(t, e, t0, from)
	far := uint32(101 + (1<<31 - 2))
	h = wire.Header{PSN: far, AckBase: far, MsgID: 2}
	var ok bool
	within(t, time.Second, "Receive with a far AckBase", func() {
		_, ok = e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(h, make([]byte, 8))}, Admission{})
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
	e.Receive(t0, netio.Datagram{Addr: from, Buf: craftAck(&wire.Ack{Cum: nonce + 2, Window: 1024})}, Admission{})
	if _, ok := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(h, make([]byte, 8))}, Admission{}); ok {
		t.Fatal("window restarted on a wrong echo")
	}
	e.Receive(t0, netio.Datagram{Addr: from, Buf: craftAck(&wire.Ack{Cum: nonce, Window: 1024})}, Admission{})
	if _, ok := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(h, make([]byte, 8))}, Admission{}); !ok {
		t.Fatal("packet at the new AckBase not delivered after the echo")
	}
	if a, _ := lastAck(t, e, t0, from); a.Cum != far+1 || a.NBlocks != 0 {
		t.Fatalf("after the jump: Cum %d blocks %d, want Cum %d", a.Cum, a.NBlocks, far+1)
	}
	// A short jump: PSN far+10 arrives, then AckBase moves to far+10.
	base := far + 1
	e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(wire.Header{PSN: base + 9, AckBase: base, MsgID: 3}, make([]byte, 8))}, Admission{})
	if a, _ := lastAck(t, e, t0, from); a.Cum != base || a.NBlocks != 1 {
		t.Fatalf("gap: Cum %d blocks %d", a.Cum, a.NBlocks)
	}
	if _, ok := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(wire.Header{PSN: base + 10, AckBase: base + 9, MsgID: 4}, make([]byte, 8))}, Admission{}); !ok {
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
				if _, ok := srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{}); ok {
					delivered++
				}
			}
			out, _, _ = srv.Poll(now, nil)
			for _, o := range out {
				cli.Receive(now, netio.Datagram{Addr: sa, Buf: o.Buf}, Admission{})
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
		srv.Receive(now, netio.Datagram{Addr: ca, Buf: craft(h, make([]byte, 8))}, Admission{})
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
						srv.Receive(now, netio.Datagram{Addr: ca, Buf: craft(wire.Header{PSN: at, AckBase: at, MsgID: 1 << 40, Flags: wire.FlagSyn}, make([]byte, 8))}, Admission{})
					}
					if h.Op == wire.OpWrite && !c.dropSyn && h.Flags&wire.FlagSyn == 0 && delivered == 0 {
						t.Fatal("a resend lost its SYN before the receiver acknowledged anything")
					}
					if h.Op == wire.OpWrite && c.dropSyn && h.Flags&wire.FlagSyn != 0 && echoed {
						h.Flags &^= wire.FlagSyn
						o.Buf = craft(h, payload)
					}
					if d, ok := srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{}); ok && d.Header.MsgID != 1<<40 {
						delivered++
					}
				}
				out, _, _ = srv.Poll(now, nil)
				for _, o := range out {
					var h wire.Header
					if _, _, err := wire.Parse(o.Buf, &h); err == nil && h.Op == wire.OpAck && h.Flags&wire.FlagSyn != 0 && nonce == 0 {
						nonce = h.PSN
					}
					cli.Receive(now, netio.Datagram{Addr: sa, Buf: o.Buf}, Admission{})
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
