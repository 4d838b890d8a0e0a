package fabric_test

import (
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// mcastDataAt is mcastData with the sender's timestamp.
func mcastDataAt(t testing.TB, group uint32, psn, ackBase uint32, flags wire.Flags, ts time.Time) []byte {
	return packet(t, wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: group, Src: 0, Dst: wire.MemberAll,
		PSN: psn, AckBase: ackBase, MsgID: 1, MsgLen: 64, Flags: flags, TS: uint64(ts.UnixNano())}, make([]byte, 64))
}

// echoRTT is the RTT a sender computes from merged ACK a received at now
// (as transport does: now - EchoTS - AckDelay); ok is false if a echoes
// no timestamp.
func echoRTT(a wire.Ack, now time.Time) (time.Duration, bool) {
	if a.EchoTS == 0 {
		return 0, false
	}
	return time.Duration(now.UnixNano()-int64(a.EchoTS)) - time.Duration(a.AckDelay), true
}

// TestSwitchMergedAckEchoesNoStaleTimestamp: a merged ACK that the switch
// sends long after the receivers' ACK it echoes — the re-acknowledgement
// of a retransmission every member already has, or the ACK released when
// a member that held it back leaves — must not make the sender measure
// the wait as a round trip (a stale sample pins its RTO at the maximum,
// and every loss after a member's death then costs MaxRTO).
func TestSwitchMergedAckEchoesNoStaleTimestamp(t *testing.T) {
	f := newBenchFabric(t, 3)
	sw, g := f.sw, f.group
	sender := f.addrs[0]
	var out []netio.Datagram
	poll := func() []netio.Datagram {
		out, _ = sw.Poll(f.now, out[:0])
		return out
	}
	const base = 1000
	t0 := f.now
	sw.Receive(t0, netio.Datagram{Addr: sender, Buf: mcastDataAt(t, g, base, base, wire.FlagSyn, t0)})
	poll()
	for m := uint16(1); m <= 2; m++ {
		f.now = f.now.Add(10 * time.Microsecond)
		sw.Receive(f.now, netio.Datagram{Addr: f.addrs[m], Buf: mcastAck(t, g, m, 0, &wire.Ack{Cum: base + 1, Window: 1024, EchoTS: uint64(t0.UnixNano())})})
	}
	acks := mergedAcks(t, poll(), sender)
	if len(acks) != 1 || acks[0].Cum != base+1 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, base+1)
	}

	// The sender missed that ACK and resends the packet 300 ms later:
	// the re-acknowledgement echoes the copy that just arrived.
	f.now = f.now.Add(300 * time.Millisecond)
	sw.Receive(f.now, netio.Datagram{Addr: sender, Buf: mcastDataAt(t, g, base, base, wire.FlagRetx, f.now)})
	acks = mergedAcks(t, poll(), sender)
	if len(acks) != 1 || acks[0].Cum != base+1 {
		t.Fatalf("re-acknowledgement %+v, want one with Cum %d", acks, base+1)
	}
	if rtt, ok := echoRTT(acks[0], f.now); ok && rtt > time.Millisecond {
		t.Fatalf("re-acknowledgement of a retransmission: the sender measures an RTT of %v (EchoTS %d, AckDelay %d)",
			rtt, acks[0].EchoTS, acks[0].AckDelay)
	}

	// The next packet: member 1 acknowledges it, member 2 never does and
	// leaves 400 ms later; the ACK that releases the packet must not echo
	// a timestamp as if it had just arrived.
	t1 := f.now.Add(time.Millisecond)
	f.now = t1
	sw.Receive(t1, netio.Datagram{Addr: sender, Buf: mcastDataAt(t, g, base+1, base+1, 0, t1)})
	poll()
	f.now = f.now.Add(10 * time.Microsecond)
	sw.Receive(f.now, netio.Datagram{Addr: f.addrs[1], Buf: mcastAck(t, g, 1, 0, &wire.Ack{Cum: base + 2, Window: 1024, EchoTS: uint64(t1.UnixNano())})})
	if acks := mergedAcks(t, poll(), sender); len(acks) != 0 {
		t.Fatalf("merged ACK %+v before member 2 has the packet", acks)
	}
	f.now = f.now.Add(400 * time.Millisecond)
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.Leave, Group: g, Member: 2}, []byte("bench"))
	if err != nil {
		t.Fatal(err)
	}
	leave := &endpoint.Op{Kind: endpoint.KindControl, Peer: benchSwitchAddr, Buf: buf}
	if err := f.cores[2].Post(f.now, leave); err != nil {
		t.Fatal(err)
	}
	// Pump as benchFabric.pump does, looking at the switch's output.
	var released []wire.Ack
	var coreOut []netio.Datagram
	for i := 0; i < 1000 && len(released) == 0; i++ {
		f.now = f.now.Add(time.Microsecond)
		released = mergedAcks(t, poll(), sender)
		for _, d := range out {
			if m, ok := f.byAdr[d.Addr]; ok {
				f.cores[m].Receive(f.now, netio.Datagram{Addr: benchSwitchAddr, Buf: d.Buf})
			}
		}
		for m, c := range f.cores {
			coreOut, _, _ = c.Poll(f.now, coreOut[:0])
			for _, d := range coreOut {
				if d.Addr == benchSwitchAddr {
					sw.Receive(f.now, netio.Datagram{Addr: f.addrs[m], Buf: d.Buf})
				}
			}
		}
	}
	if len(released) == 0 || released[0].Cum != base+2 {
		t.Fatalf("no merged ACK with Cum %d after member 2 left: %+v (switch %+v)", base+2, released, sw.Stats())
	}
	if rtt, ok := echoRTT(released[0], f.now); ok && rtt > time.Millisecond {
		t.Fatalf("ACK released by a departed member: the sender measures an RTT of %v (EchoTS %d, AckDelay %d)",
			rtt, released[0].EchoTS, released[0].AckDelay)
	}
}

// TestSwitchMergedAckCarriesQueueDelay: the merged ACK carries the
// forward queueing (QDelay) that the receiver whose ACK moved it
// measured, beside that ACK's echoed timestamp: the slowest receiver's
// path, which the sender's delay signal is then built on. The merged ACK
// is marked Control, the data's replicas are not.
func TestSwitchMergedAckCarriesQueueDelay(t *testing.T) {
	f := newBenchFabric(t, 3)
	sw, g := f.sw, f.group
	sender := f.addrs[0]
	var out []netio.Datagram
	const base = 1000
	t0 := f.now
	sw.Receive(t0, netio.Datagram{Addr: sender, Buf: mcastDataAt(t, g, base, base, wire.FlagSyn, t0)})
	out, _ = sw.Poll(f.now, out[:0])
	for _, d := range out {
		if d.Control {
			t.Errorf("replica to %v marked Control", d.Addr)
		}
	}
	f.now = f.now.Add(10 * time.Microsecond)
	sw.Receive(f.now, netio.Datagram{Addr: f.addrs[1], Buf: mcastAck(t, g, 1, 0, &wire.Ack{Cum: base + 1, Window: 1024, EchoTS: uint64(t0.UnixNano()), QDelay: 1 + 40})})
	f.now = f.now.Add(3 * time.Millisecond)
	sw.Receive(f.now, netio.Datagram{Addr: f.addrs[2], Buf: mcastAck(t, g, 2, 0, &wire.Ack{Cum: base + 1, Window: 1024, EchoTS: uint64(t0.UnixNano()), QDelay: 1 + 2900})})
	out, _ = sw.Poll(f.now, out[:0])
	for _, d := range out {
		if d.Addr == sender && !d.Control {
			t.Errorf("merged ACK datagram not marked Control")
		}
	}
	acks := mergedAcks(t, out, sender)
	if len(acks) != 1 || acks[0].Cum != base+1 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, base+1)
	}
	if acks[0].QDelay != 1+2900 {
		t.Fatalf("merged ACK reports QDelay %d, want the slowest receiver's %d", acks[0].QDelay, 1+2900)
	}
}

// TestSwitchForwardedAckIsControl: a member's unicast ACK to another
// member leaves the switch marked Control; its data does not.
func TestSwitchForwardedAckIsControl(t *testing.T) {
	f := newBenchFabric(t, 3)
	sw, g := f.sw, f.group
	frame := make([]byte, (&wire.Ack{}).EncodedLen())
	(&wire.Ack{Cum: 7, Window: 1024}).Encode(frame)
	sw.Receive(f.now, netio.Datagram{Addr: f.addrs[0], Buf: packet(t, wire.Header{Op: wire.OpAck, Mode: wire.ModeUnicast, Group: g, Src: 0, Dst: 1}, frame)})
	sw.Receive(f.now, netio.Datagram{Addr: f.addrs[0], Buf: packet(t, wire.Header{Op: wire.OpWrite, Mode: wire.ModeUnicast, Group: g, Src: 0, Dst: 1, MsgLen: 4}, []byte("data"))})
	out, _ := sw.Poll(f.now, nil)
	if len(out) != 2 || out[0].Addr != f.addrs[1] || !out[0].Control || out[1].Control {
		t.Fatalf("forwarded %d datagrams (%+v); want the ACK to member 1 marked Control, then the data unmarked", len(out), out)
	}
}
