package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// TestAckQueueDelay: a receiver reports in each ACK how long the echoed
// packet queued on its way (Ack.QDelay, µs + 1): its one-way delay less
// the lowest of a full-size packet on the stream, whatever the clocks'
// offset; a small packet's shorter delay reports no queueing. ACK
// datagrams are marked Control, data packets are not.
func TestAckQueueDelay(t *testing.T) {
	a, err := New(Config{Seed: 1, InitialCwnd: 64})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	aAddr := netip.MustParseAddrPort("10.0.0.1:1")
	bAddr := netip.MustParseAddrPort("10.0.0.2:1")
	seg := a.SegmentSize()
	msg := make([]byte, 4*seg+100) // four full packets, then a small one
	if _, err := a.Send(PeerID{Addr: bAddr}, &wire.Header{Op: wire.OpWrite}, msg, 0); err != nil {
		t.Fatal(err)
	}
	out, _, _ := a.Poll(t0, nil)
	if len(out) != 5 {
		t.Fatalf("sender sent %d datagrams, want 5", len(out))
	}
	for i, d := range out {
		if d.Control {
			t.Errorf("data packet %d marked Control", i)
		}
	}
	// The receiver's clock runs 3 s ahead of the sender's; the packets
	// arrive 1 ms (the base), 3.5 ms, 1.2 ms, 1 ms and, small, 0.2 ms after
	// they left.
	offset := 3 * time.Second
	arrive := []time.Duration{time.Millisecond, 3500 * time.Microsecond, 1200 * time.Microsecond, time.Millisecond, 200 * time.Microsecond}
	want := []uint32{1, 2501, 201, 1, 1}
	for i, d := range out {
		now := t0.Add(offset + arrive[i])
		b.Receive(now, netio.Datagram{Addr: aAddr, Buf: d.Buf}, Admission{})
		acks, _, _ := b.Poll(now, nil)
		for _, d := range acks {
			if !d.Control {
				t.Errorf("packet %d: the receiver's ACK datagram is not marked Control", i)
			}
		}
		a := ackIn(t, acks)
		if a.QDelay != want[i] {
			t.Errorf("packet %d, %v on its way: ACK reports QDelay %d, want %d", i, arrive[i], a.QDelay, want[i])
		}
	}
}

// TestAckQueueDelayKernelArrival: a packet that the kernel received on
// time but the receiving process stepped 4 ms later (it waited for a CPU)
// reports no queueing when Receive is given the kernel's receive time
// (the datagram's RxTime), and the ACK's own delay still counts the 4 ms, so the
// sender's timeout covers the wait; without it, the wait reads as 4 ms
// of queueing in the network.
func TestAckQueueDelayKernelArrival(t *testing.T) {
	for _, kernel := range []bool{true, false} {
		a, _ := New(Config{Seed: 1, InitialCwnd: 64})
		b, _ := New(Config{Seed: 2})
		aAddr := netip.MustParseAddrPort("10.0.0.1:1")
		bAddr := netip.MustParseAddrPort("10.0.0.2:1")
		seg := a.SegmentSize()
		if _, err := a.Send(PeerID{Addr: bAddr}, &wire.Header{Op: wire.OpWrite}, make([]byte, 2*seg), 0); err != nil {
			t.Fatal(err)
		}
		out, _, _ := a.Poll(t0, nil)
		if len(out) != 2 {
			t.Fatalf("sender sent %d datagrams, want 2", len(out))
		}
		// Both arrive 1 ms after they left; the second is stepped 4 ms
		// after it arrived.
		arrive := t0.Add(time.Millisecond)
		b.Receive(arrive, netio.Datagram{Addr: aAddr, Buf: out[0].Buf, RxTime: arrive.UnixNano()}, Admission{})
		b.Poll(arrive, nil)
		late := arrive.Add(4 * time.Millisecond)
		var rx int64 // unknown
		if kernel {
			rx = arrive.UnixNano()
		}
		b.Receive(late, netio.Datagram{Addr: aAddr, Buf: out[1].Buf, RxTime: rx}, Admission{})
		acks, _, _ := b.Poll(late, nil)
		ack := ackIn(t, acks)
		wantQ := uint32(1) // no queueing
		if !kernel {
			wantQ = 4001
		}
		if ack.QDelay != wantQ {
			t.Errorf("kernel arrival %v: QDelay %d, want %d", kernel, ack.QDelay, wantQ)
		}
		if kernel && ack.AckDelay != 0 {
			// The ACK goes out at Receive's time, as the packet was taken
			// then: its delay is counted from there, not from the kernel's
			// receive time (the sender sees the wait as part of the RTT).
			t.Errorf("AckDelay %v, want 0 (counted from Receive)", time.Duration(ack.AckDelay))
		}
	}
}

// ackIn decodes the last ACK among ds.
func ackIn(t *testing.T, ds []netio.Datagram) wire.Ack {
	t.Helper()
	var ack wire.Ack
	found := false
	for _, d := range ds {
		var h wire.Header
		payload, _, err := wire.Parse(d.Buf, &h)
		if err != nil {
			t.Fatal(err)
		}
		if h.Op == wire.OpAck {
			if err := ack.Decode(payload); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("the receiver sent no ACK")
	}
	return ack
}
