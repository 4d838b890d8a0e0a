package transport

import (
	"net/netip"
	"testing"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

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
		return e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(h, make([]byte, n))}, Admission{})
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
		d, ok := e.Receive(t0, netio.Datagram{Addr: from, Buf: craft(h, make([]byte, 10))}, Admission{})
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
