package secure

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// handshakeDatagram wraps a HANDSHAKE message in a packet, as a forger
// would send it.
func handshakeDatagram(t testing.TB, msg []byte) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: uint32(len(msg))}
	b, err := wire.AppendPacket(nil, &h, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// notice is a forged unknown-SA notice naming said.
func notice(said uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{hsUnknown}, said)
}

// zeroHello is a HELLO whose ephemeral key is all zeroes (the lowest
// there is, and no valid X25519 share), without a cookie.
func zeroHello(said uint32) []byte {
	b := append([]byte{hsHello}, make([]byte, ephLen)...)
	b = binary.BigEndian.AppendUint32(b, said)
	return append(b, 0)
}

// sealedSAID is the SAID of the last sealed datagram from → to captured.
func (n *net2) sealedSAID(from, to netip.AddrPort) uint32 {
	for i := len(n.captured) - 1; i >= 0; i-- {
		d := n.captured[i]
		var h wire.Header
		if _, _, err := wire.Parse(d.Buf, &h); err == nil && d.Addr == from && h.Flags&wire.FlagAuth != 0 {
			return h.SAID
		}
	}
	n.t.Fatal("no sealed datagram captured")
	return 0
}

// exchange sends a datagram each way and checks both arrive within
// limit of virtual time (Tick running every 50 ms).
func (n *net2) exchange(a, b *Layer, id uint64, limit time.Duration) {
	n.t.Helper()
	gotA, gotB := len(n.got[addrA]), len(n.got[addrB])
	if err := a.Send(n.now, addrB, plainPacket(n.t, id, "a to b")); err != nil {
		n.t.Fatal(err)
	}
	if err := b.Send(n.now, addrA, plainPacket(n.t, id, "b to a")); err != nil {
		n.t.Fatal(err)
	}
	n.pump()
	for d := time.Duration(0); d < limit && (len(n.got[addrA]) == gotA || len(n.got[addrB]) == gotB); d += 50 * time.Millisecond {
		n.tick(50 * time.Millisecond)
	}
	if len(n.got[addrA]) != gotA+1 || len(n.got[addrB]) != gotB+1 {
		n.t.Fatalf("datagram %d: %d reached A, %d reached B within %v (A %+v, B %+v)", id,
			len(n.got[addrA])-gotA, len(n.got[addrB])-gotB, limit, a.Stats(), b.Stats())
	}
}

// TestLayerForgedNoticeAndHello: the two datagrams that used to cut a
// session for good — a forged unknown-SA notice naming the SAID every
// sealed datagram carries in clear, then a HELLO with an all-zero
// ephemeral key from the peer's address — end nothing: the session
// stands (its datagrams wait for one new handshake, which the real peer
// completes), and traffic flows both ways, in either order of the two and
// repeated every second for a minute.
func TestLayerForgedNoticeAndHello(t *testing.T) {
	for _, order := range []string{"notice, hello", "hello, notice", "hello only", "notice only"} {
		t.Run(order, func(t *testing.T) {
			n, a, b := newNet2(t)
			n.exchange(a, b, 1, time.Second)
			for i := range 60 {
				said := n.sealedSAID(addrA, addrB)
				switch order {
				case "notice, hello":
					n.deliver(addrB, addrA, handshakeDatagram(t, notice(said)))
					n.deliver(addrB, addrA, handshakeDatagram(t, zeroHello(77)))
				case "hello, notice":
					n.deliver(addrB, addrA, handshakeDatagram(t, zeroHello(77)))
					n.deliver(addrB, addrA, handshakeDatagram(t, notice(said)))
				case "hello only":
					n.deliver(addrB, addrA, handshakeDatagram(t, zeroHello(77)))
				case "notice only":
					n.deliver(addrB, addrA, handshakeDatagram(t, notice(said)))
				}
				n.exchange(a, b, uint64(2+i), time.Second)
				n.tick(time.Second)
			}
			for _, l := range []*Layer{a, b} {
				if st := l.Stats(); st.SessionsLost != 0 || st.DroppedQueue != 0 || st.Peers != 1 {
					t.Fatalf("after a minute of forgeries: %+v", st)
				}
			}
			if hs := a.Stats().Handshakes; hs > 61 {
				t.Fatalf("%d handshakes in a minute: forged notices start more than one a second", hs)
			}
		})
	}
}

// TestLayerNoticeFlood: a flood of forged notices (every SAID near the
// real one, as a blind forger who read a SAID from a RESPONSE would
// spray) starts at most one handshake a second and loses nothing.
func TestLayerNoticeFlood(t *testing.T) {
	n, a, b := newNet2(t)
	n.exchange(a, b, 1, time.Second)
	said := n.sealedSAID(addrA, addrB)
	for round := range 10 {
		for d := range uint32(301) {
			n.deliver(addrB, addrA, handshakeDatagram(t, notice(said-150+d)))
			n.deliver(addrB, addrA, handshakeDatagram(t, zeroHello(said-150+d)))
		}
		n.exchange(a, b, uint64(2+round), time.Second)
		said = n.sealedSAID(addrA, addrB)
		n.tick(100 * time.Millisecond)
	}
	if st := a.Stats(); st.SessionsReset > 10 || st.SessionsLost != 0 || st.DroppedQueue != 0 {
		t.Fatalf("after the flood: %+v", st)
	}
}

// TestLayerTieBreakNeedsCookie: while this side's handshake is under
// way, a HELLO from the peer's address without a cookie (which a forger
// who cannot receive there cannot get) does not make it give way, and
// the handshake completes once the peer answers.
func TestLayerTieBreakNeedsCookie(t *testing.T) {
	n, a, b := newNet2(t)
	silent := true
	n.drop = func(from, to netip.AddrPort, _ []byte) bool { return silent && from == addrB }
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "held")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	n.deliver(addrB, addrA, handshakeDatagram(t, zeroHello(5)))
	var low [ephLen]byte
	low[ephLen-1] = 1 // a low key that is no valid share either
	h := append(append([]byte{hsHello}, low[:]...), 0, 0, 0, 6, 0)
	n.deliver(addrB, addrA, handshakeDatagram(t, h))
	if p := a.peers[addrB]; p == nil || p.ini == nil {
		t.Fatal("a HELLO without a cookie made this side give up its handshake")
	}
	silent = false
	for range 20 {
		n.tick(100 * time.Millisecond)
	}
	if len(n.got[addrB]) != 1 {
		t.Fatalf("%d arrived (A %+v, B %+v)", len(n.got[addrB]), a.Stats(), b.Stats())
	}
}

// TestLayerRestartsAfterGivingWay: both sides open at once, this side
// gives way to the peer's handshake, and the peer's last message is
// lost for good (the peer then forgets it): Tick starts this side's own
// handshake again, and what it held arrives.
func TestLayerRestartsAfterGivingWay(t *testing.T) {
	n, a, b := newNet2(t)
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "a to b")); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(n.now, addrA, plainPacket(t, 1, "b to a")); err != nil {
		t.Fatal(err)
	}
	// Lose every FINISH for two seconds: whichever side gave way is
	// left without a session until it starts again.
	lose := true
	n.drop = func(from, to netip.AddrPort, buf []byte) bool {
		var h wire.Header
		p, _, err := wire.Parse(buf, &h)
		return lose && err == nil && h.Op == wire.OpHandshake && len(p) > 0 && p[0] == hsFinish
	}
	n.pump()
	for range 20 {
		n.tick(100 * time.Millisecond)
	}
	lose = false
	for range 100 {
		n.tick(100 * time.Millisecond)
	}
	// What the side that gave way held arrives (a datagram the other
	// side sealed for the session whose FINISH was lost is lost, as on
	// the wire), and the session carries traffic both ways.
	ra, rb := a.Stats().HandshakeRestarts, b.Stats().HandshakeRestarts
	if ra+rb == 0 || ra > 0 && len(n.got[addrB]) != 1 || rb > 0 && len(n.got[addrA]) != 1 {
		t.Fatalf("%d and %d arrived (A %+v, B %+v)", len(n.got[addrA]), len(n.got[addrB]), a.Stats(), b.Stats())
	}
	n.exchange(a, b, 2, time.Second)
}

// TestResponderBounds: a cookie admits one handshake (its SAID is bound
// into it); one host's half-open handshakes are bounded, its oldest
// replaced, while another host's handshake still goes through.
func TestResponderBounds(t *testing.T) {
	a := authority(t, "fabric secret for the layer tests")
	r, err := NewResponder(issue(t, a, RoleSwitch, "sw0", 1), Options{}, newRng(3), counterSAID())
	if err != nil {
		t.Fatal(err)
	}
	ini := issue(t, a, RoleClient, "c", 2)
	host := netip.MustParseAddr("10.5.0.1")
	open := func(from netip.AddrPort, said uint32, seed byte) []byte {
		in, err := NewInitiator(ini, said, Options{}, newRng(seed))
		if err != nil {
			t.Fatal(err)
		}
		retry, _, err := r.Handle(t0, from, in.Hello())
		if err != nil || retry[0] != hsRetry {
			t.Fatalf("first HELLO: %v", err)
		}
		hello, _, err := in.Handle(t0, retry)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := r.Handle(t0, from, hello)
		if err != nil {
			t.Fatal(err)
		}
		return append(out, hello...)
	}
	// One cookie, another SAID: a RETRY, no state.
	in, _ := NewInitiator(ini, 1, Options{}, newRng(9))
	from := netip.AddrPortFrom(host, 1)
	retry, _, _ := r.Handle(t0, from, in.Hello())
	hello, _, _ := in.Handle(t0, retry)
	forged := bytes.Clone(hello)
	binary.BigEndian.PutUint32(forged[1+ephLen:], 2)
	if out, _, err := r.Handle(t0, from, forged); err != nil || out[0] != hsRetry || r.Pending() != 0 {
		t.Fatalf("a cookie reused for another SAID: %v, %d pending", err, r.Pending())
	}
	for i := range 3 * DefaultPendingPerAddr {
		if out := open(netip.AddrPortFrom(host, uint16(100+i)), uint32(i+1), byte(i)); out[0] != hsResponse {
			t.Fatalf("handshake %d: no RESPONSE", i)
		}
	}
	if r.Pending() != DefaultPendingPerAddr || len(r.byAddr[host]) != DefaultPendingPerAddr {
		t.Fatalf("%d half-open from one host (%d listed), want %d", r.Pending(), len(r.byAddr[host]), DefaultPendingPerAddr)
	}
	if out := open(netip.MustParseAddrPort("10.5.0.2:1"), 1, 99); out[0] != hsResponse || r.Pending() != DefaultPendingPerAddr+1 {
		t.Fatalf("another host: %d pending", r.Pending())
	}
}

func counterSAID() func() uint32 {
	var n uint32
	return func() uint32 { n++; return n }
}

// TestLayerSessionBound: one credential opening sessions from many
// addresses keeps at most MaxSessionsPerName of them, its least recently
// active evicted, and another credential's session is untouched.
func TestLayerSessionBound(t *testing.T) {
	n, a, b := newNet2(t)
	b.MaxSessionsPerName = 3
	n.exchange(a, b, 1, time.Second)
	auth := authority(t, "fabric secret for the layer tests")
	insider := issue(t, auth, RoleClient, "evil", 40)
	for i := range 6 {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 6, 0, byte(i)}), 1)
		n.l[addr] = n.layer(insider, byte(50+i))
		if err := n.l[addr].Send(n.now, addrB, plainPacket(t, 1, "x")); err != nil {
			t.Fatal(err)
		}
		n.pump()
		n.tick(time.Millisecond)
	}
	if st := b.Stats(); st.Peers != 4 || st.SessionsEvicted != 3 {
		t.Fatalf("B after 6 sessions of one credential: %+v", st)
	}
	n.exchange(a, b, 2, time.Second)
	if st := b.Stats(); st.Handshakes != 7 {
		t.Fatalf("the switch's session was touched: %+v", st)
	}
}

// TestLayerPolicy: a session whose peer's credential is revoked, or
// expires, while it runs is closed at the next sweep (within a minute),
// and no new session is established with that credential; another
// peer's session goes on.
func TestLayerPolicy(t *testing.T) {
	auth := authority(t, "fabric secret for the layer tests")
	for _, how := range []string{"revoked", "expired"} {
		t.Run(how, func(t *testing.T) {
			n, a, b := newNet2(t)
			pol := NewPolicy(auth.Public())
			a.Policy, a.SessionIdle, b.SessionIdle = pol, 24*time.Hour, 24*time.Hour
			mortal, err := auth.IssueBetween(RoleClient, "mortal", t0.Add(-time.Hour), t0.Add(time.Hour), newRng(70))
			if err != nil {
				t.Fatal(err)
			}
			addrC := netip.MustParseAddrPort("10.0.0.3:1")
			c := n.layer(mortal, 71)
			n.l[addrC] = c
			n.exchange(a, b, 1, time.Second)
			if err := c.Send(n.now, addrA, plainPacket(t, 1, "from c")); err != nil {
				t.Fatal(err)
			}
			n.pump()
			if len(n.got[addrA]) != 2 {
				t.Fatalf("%d arrived at A", len(n.got[addrA]))
			}
			switch how {
			case "revoked":
				rl, err := auth.Revoke(nil, n.now, HashKey(mortal.Cert.Key))
				if err != nil {
					t.Fatal(err)
				}
				if err := pol.Load(rl); err != nil {
					t.Fatal(err)
				}
			case "expired":
				n.tick(time.Hour + ClockSkew - time.Minute)
			}
			for range 61 {
				n.tick(time.Second)
			}
			if st := a.Stats(); st.SessionsRevoked != 1 {
				t.Fatalf("A after the %s credential: %+v", how, st)
			}
			if _, ok := a.Peer(addrC); ok {
				t.Fatal("the session with the revoked peer is still there")
			}
			got := len(n.got[addrA])
			if err := c.Send(n.now, addrA, plainPacket(t, 2, "after")); err != nil {
				t.Fatal(err)
			}
			for range 30 {
				n.tick(time.Second)
			}
			if len(n.got[addrA]) != got {
				t.Fatal("a datagram of the revoked peer reached the core")
			}
			n.exchange(a, b, 2, time.Second)
		})
	}
}

// TestResponderRatePerAddr: past the cookie, one IP address starts at
// most BurstPerAddr handshakes at once and RatePerAddr a second after
// that (each costs a key exchange and a signature); another address is
// not held back.
func TestResponderRatePerAddr(t *testing.T) {
	a := authority(t, "fabric secret for the layer tests")
	r, err := NewResponder(issue(t, a, RoleSwitch, "sw0", 1), Options{}, newRng(3), counterSAID())
	if err != nil {
		t.Fatal(err)
	}
	r.MaxPendingPerAddr = 1000
	ini := issue(t, a, RoleClient, "c", 2)
	open := func(now time.Time, from netip.AddrPort, said uint32) error {
		in, err := NewInitiator(ini, said, Options{}, newRng(byte(said)))
		if err != nil {
			t.Fatal(err)
		}
		retry, _, _ := r.Handle(now, from, in.Hello())
		hello, _, err := in.Handle(now, retry)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = r.Handle(now, from, hello)
		return err
	}
	busy, n := 0, DefaultBurstPerAddr+36
	for i := range n {
		if err := open(t0, netip.AddrPortFrom(netip.MustParseAddr("10.5.0.1"), uint16(i+1)), uint32(i+1)); errors.Is(err, ErrBusy) {
			busy++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if busy != n-DefaultBurstPerAddr {
		t.Fatalf("%d of %d refused at once, want %d", busy, n, n-DefaultBurstPerAddr)
	}
	if err := open(t0, netip.MustParseAddrPort("10.5.0.2:1"), 500); err != nil {
		t.Fatalf("another address: %v", err)
	}
	later := t0.Add(500 * time.Millisecond)
	ok := 0
	for i := range DefaultRatePerAddr {
		if open(later, netip.AddrPortFrom(netip.MustParseAddr("10.5.0.1"), uint16(2000+i)), uint32(2000+i)) == nil {
			ok++
		}
	}
	if ok != DefaultRatePerAddr/2 {
		t.Fatalf("%d admitted half a second later, want %d", ok, DefaultRatePerAddr/2)
	}
}

// TestLayerLogsRefusedHandshakes: a peer of another fabric is refused,
// and the refusal logged at WARN with the peer and why, at most one line
// a second however many arrive.
func TestLayerLogsRefusedHandshakes(t *testing.T) {
	n, a, b := newNet2(t)
	var logs bytes.Buffer
	b.Log = slog.New(slog.NewTextHandler(&logs, nil))
	other := issue(t, authority(t, "another fabric's secret entirely"), RoleClient, "stranger", 60)
	for i := range 5 {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 6, 1, byte(i)}), 1)
		n.l[addr] = n.layer(other, byte(61+i))
		if err := b.Send(n.now, addr, plainPacket(t, 1, "x")); err != nil {
			t.Fatal(err)
		}
		n.pump()
	}
	if got := strings.Count(logs.String(), "level=WARN msg=\"secure: handshake refused\""); got != 1 || !strings.Contains(logs.String(), "not signed by this fabric's authority") {
		t.Fatalf("%d WARN lines for 5 refusals in one second:\n%s", got, logs.String())
	}
	n.tick(2 * time.Second)
	if err := b.Send(n.now, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 6, 1, 9}), 1), plainPacket(t, 2, "y")); err != nil {
		t.Fatal(err)
	}
	n.l[netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 6, 1, 9}), 1)] = n.layer(other, 70)
	n.tick(time.Second)
	if got := strings.Count(logs.String(), "secure: handshake refused"); got < 2 || !strings.Contains(logs.String(), "more_since_last=") {
		t.Fatalf("no second line after a second:\n%s", logs.String())
	}
	_ = a
}
