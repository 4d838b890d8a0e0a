package secure

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// FuzzOpen feeds arbitrary datagrams to an SA's receiving side: it never
// panics, and whatever it refuses leaves the window where it was.
func FuzzOpen(f *testing.F) {
	s, _ := pair(f, AESGCM, true)
	for _, n := range []int{0, 1, 100} {
		pkt, err := s.Seal(packet(f, make([]byte, n)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pkt)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		_, r := pair(t, AESGCM, true)
		var h wire.Header
		if _, _, err := wire.Parse(pkt, &h); err != nil {
			return
		}
		if _, err := r.Open(&h, pkt); err != nil && r.win.Top() != 0 {
			t.Fatalf("refused packet moved the window to %d", r.win.Top())
		}
	})
}

// FuzzLayerReceive feeds arbitrary datagrams, from the peer's address
// and from a stranger's, to a layer with an established session: it
// never panics, holds nothing for a stranger, and whatever arrives, the
// session still carries traffic both ways afterwards (nothing an
// outsider sends ends it).
func FuzzLayerReceive(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(handshakeDatagram(f, notice(1)), true)
	f.Add(handshakeDatagram(f, zeroHello(1)), true)
	f.Add(handshakeDatagram(f, []byte{hsFinish, 0, 0, 0, 1}), true)
	f.Add(handshakeDatagram(f, []byte{hsResponse}), false)
	f.Add(plainPacket(f, 1, "plain"), false)
	f.Fuzz(func(t *testing.T, pkt []byte, fromPeer bool) {
		n, a, b := newNet2(t)
		n.exchange(a, b, 1, time.Second)
		from := netip.MustParseAddrPort("10.66.0.1:9")
		if fromPeer {
			from = addrB
		}
		if len(pkt) >= 5 && pkt[0] == hsUnknown && fromPeer {
			// Name the real SAID too, as a forger who sees the wire does.
			binary.BigEndian.PutUint32(pkt[1:], n.sealedSAID(addrA, addrB))
			pkt = handshakeDatagram(t, pkt[:5])
		}
		if got := a.Receive(n.now, from, bytes.Clone(pkt)); got != nil {
			t.Fatal("a datagram no session sealed was handed up")
		}
		n.pump()
		if !fromPeer && a.peers[from] != nil {
			t.Fatal("a stranger's datagram left state behind")
		}
		n.exchange(a, b, 2, 3*time.Second)
	})
}

// FuzzResponder feeds arbitrary handshake messages to a responder: it
// never panics, never establishes a session from them, and its table
// stays within its bounds.
func FuzzResponder(f *testing.F) {
	a := authority(f, "fabric secret for the fuzz tests")
	in, _ := NewInitiator(issue(f, a, RoleClient, "c", 1), 7, Options{}, newRng(1))
	f.Add(in.Hello())
	f.Add(zeroHello(3))
	f.Add([]byte{hsFinish, 0, 0, 0, 1})
	f.Add([]byte{hsRetry})
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := NewResponder(issue(t, a, RoleSwitch, "sw", 2), Options{}, newRng(2), counterSAID())
		if err != nil {
			t.Fatal(err)
		}
		r.MaxPending = 4
		from := netip.MustParseAddrPort("10.0.0.9:1")
		for i := range 3 {
			out, s, err := r.Handle(t0.Add(time.Duration(i)*time.Millisecond), from, msg)
			if s != nil {
				t.Fatal("a session from a fuzzed message")
			}
			if err == nil && len(out) > 0 && out[0] == hsRetry && len(out) > len(msg) {
				t.Fatalf("a RETRY of %d bytes answers %d", len(out), len(msg))
			}
			if len(out) > 0 && out[0] == hsRetry && len(msg) >= helloLen {
				// Come back with the cookie, as an initiator at from does.
				msg = append(append(bytes.Clone(msg[:helloLen-1]), cookieLen), out[1:]...)
			}
		}
		if r.Pending() > r.MaxPending || r.Pending() > r.MaxPendingPerAddr {
			t.Fatalf("%d pending", r.Pending())
		}
	})
}
