package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

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
	within(t, time.Second, "Receive with 32 huge SACK blocks", func() { e.Receive(t0, netio.Datagram{Addr: to, Buf: pkt}, Admission{}) })
	// The blocks cover the 10 packets in flight, but the ACK does not fit
	// what was sent (its cumulative point is 2^31 away): a blind forgery,
	// ignored. The receiver's real ACK completes the message.
	if _, comps, _ := e.Poll(t0, nil); len(comps) != 0 {
		t.Fatalf("a forged ACK completed %+v", comps)
	}
	e.Receive(t0, netio.Datagram{Addr: to, Buf: craftAck(&wire.Ack{Cum: psn0 + 10, Window: 1024})}, Admission{})
	_, comps, _ := e.Poll(t0, nil)
	if len(comps) != 1 || comps[0].Err != nil || comps[0].Token != 5 {
		t.Fatalf("completions %+v", comps)
	}
}
