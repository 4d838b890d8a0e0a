package transport

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

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
				if del, ok := srv.Receive(now, netio.Datagram{Addr: cliAddr, Buf: d.Buf}, Admission{}); ok && del.MsgDone && del.Header.Flags&wire.FlagResp == 0 {
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
				if del, ok := cli.Receive(now, netio.Datagram{Addr: srvAddr, Buf: d.Buf}, Admission{}); ok && del.MsgDone {
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
		srv.Receive(now, netio.Datagram{Addr: from, Buf: craft(fh, make([]byte, 8))}, Admission{})
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
	d, ok := e.Receive(t0, netio.Datagram{Addr: s, Buf: craft(wire.Header{PSN: 1, AckBase: 1, MsgID: 1}, nil)}, Admission{})
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
		d, _ := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(wire.Header{PSN: 1, AckBase: 1, MsgID: 1}, nil)}, Admission{})
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
				if d, ok := srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{}); ok && d.MsgDone {
					done++
				}
			}
			out, _, _ = srv.Poll(now, nil)
			for _, o := range out {
				cli.Receive(now, netio.Datagram{Addr: sa, Buf: o.Buf}, Admission{})
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

// TestStrangersShareOfMessages: answers to strangers take at most a
// quarter of MaxMessages, so a flood of strangers whose answers never go
// out (their budget is spent, their addresses may be forged) leaves room
// for established peers.
func TestStrangersShareOfMessages(t *testing.T) {
	e, _ := New(Config{Seed: 11, MaxMessages: 64})
	refused := 0
	for i := range 100 {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 1000)
		d, ok := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(wire.Header{PSN: 7, AckBase: 7, MsgID: 1, Flags: wire.FlagSyn}, make([]byte, 8))}, Admission{})
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
