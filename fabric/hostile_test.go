package fabric_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Crafted, well-formed datagrams against the sans-I/O Switch: each must
// cost bounded work and leave the switch's state consistent.

// promptly runs fn and fails the test if it has not returned within a
// generous CPU bound (1 s) — the hostile inputs below used to cost seconds
// to minutes. fn runs on its own goroutine so that a regression fails the
// test instead of hanging it.
func promptly(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatalf("%s did not return within 1s", what)
	}
}

// mcastData is a sealed multicast data packet from member src.
func mcastData(t testing.TB, group uint32, src uint16, psn, ackBase uint32, flags wire.Flags) []byte {
	return packet(t, wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: group, Src: src, Dst: wire.MemberAll,
		PSN: psn, AckBase: ackBase, MsgID: 1, MsgLen: 64, Flags: flags}, make([]byte, 64))
}

// mcastAck is a sealed ACK from member src for sender's multicast stream.
func mcastAck(t testing.TB, group uint32, src, sender uint16, a *wire.Ack) []byte {
	frame := make([]byte, a.EncodedLen())
	a.Encode(frame)
	return packet(t, wire.Header{Op: wire.OpAck, Mode: wire.ModeMulticast, Group: group, Src: src, Dst: sender}, frame)
}

// mergedAcks returns the merged ACKs among out that go to addr.
func mergedAcks(t testing.TB, out []netio.Datagram, to netip.AddrPort) []wire.Ack {
	t.Helper()
	var acks []wire.Ack
	for _, d := range out {
		if d.Addr != to {
			continue
		}
		var h wire.Header
		payload, _, err := wire.Parse(d.Buf, &h)
		if err != nil || h.Mode != wire.ModeMulticast || (h.Op != wire.OpAck && h.Op != wire.OpNack) {
			continue
		}
		var a wire.Ack
		if err := a.Decode(payload); err != nil {
			t.Fatalf("merged ACK: %v", err)
		}
		acks = append(acks, a)
	}
	return acks
}

// replicas counts the datagrams in out not addressed to the sender.
func replicas(out []netio.Datagram, sender netip.AddrPort) int {
	n := 0
	for _, d := range out {
		if d.Addr != sender {
			n++
		}
	}
	return n
}

// TestSwitchMulticastFarSequence feeds a multicast stream a data packet
// whose AckBase is 2^31-1 ahead (the sender "abandoned" two billion
// packets) and members' ACKs whose cumulative points and SACK blocks lie
// far from anything forwarded. The switch must handle each in bounded work
// (a jump of a window or more resets the window), and the forged ACKs must
// not corrupt the merged state: afterwards the real members' ACKs still
// move the merged ACK exactly as far as every member has got.
func TestSwitchMulticastFarSequence(t *testing.T) {
	f := newBenchFabric(t, 3)
	sw, now, g := f.sw, f.now, f.group
	sender := f.addrs[0]
	var out []netio.Datagram
	poll := func() []netio.Datagram {
		out, _ = sw.Poll(now, out[:0])
		return out
	}
	const base = 1000
	sw.Step(now, sender, mcastData(t, g, 0, base, base, 0))
	if n := replicas(poll(), sender); n != 2 {
		t.Fatalf("first packet: %d replicas, want 2", n)
	}

	// AckBase far ahead, and the packet at it.
	far := uint32(base + 1<<31 - 1)
	promptly(t, "a data packet with AckBase 2^31-1 ahead", func() {
		sw.Step(now, sender, mcastData(t, g, 0, far, far, 0))
	})
	if n := replicas(poll(), sender); n != 2 {
		t.Fatalf("packet after the jump: %d replicas, want 2", n)
	}
	if st := sw.Stats(); st.MulticastResets != 1 {
		t.Fatalf("MulticastResets = %d, want 1", st.MulticastResets)
	}

	// Forged ACKs from member 1: cumulative point far ahead, then SACK
	// blocks far away, wrapping around, wider than the window.
	hostile := []wire.Ack{
		{Cum: far + 1<<30, Window: 1024},
		{Cum: far - 1<<30, Window: 1024},
		{Cum: far, Window: 1024, NBlocks: 3, Blocks: [wire.MaxSackBlocks]wire.SackBlock{
			{Start: far + 5, End: far + 1<<31 - 1},
			{Start: far + 1<<30, End: far + 1<<30 + 1<<20},
			{Start: far + 1<<31 + 1<<30, End: far + 1<<31 + 1<<30 + 10}}},
	}
	for i := range hostile {
		promptly(t, "a crafted ACK", func() {
			sw.Step(now, f.addrs[1], mcastAck(t, g, 1, 0, &hostile[i]))
		})
	}
	poll()

	// Real traffic: packets far+1 and far+2; member 1 acknowledges both,
	// member 2 only the first. The merged ACK must say far+2 (member 2
	// lacks far+2), whatever the forged ACKs claimed.
	for _, psn := range []uint32{far + 1, far + 2} {
		sw.Step(now, sender, mcastData(t, g, 0, psn, far, 0))
	}
	if n := replicas(poll(), sender); n != 4 {
		t.Fatalf("two packets: %d replicas, want 4 (the forged ACKs must not count as member 1 having them)", n)
	}
	sw.Step(now, f.addrs[1], mcastAck(t, g, 1, 0, &wire.Ack{Cum: far + 3, Window: 1024}))
	sw.Step(now, f.addrs[2], mcastAck(t, g, 2, 0, &wire.Ack{Cum: far + 2, Window: 1024}))
	acks := mergedAcks(t, poll(), sender)
	if len(acks) != 1 || acks[0].Cum != far+2 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, far+2)
	}
	sw.Step(now, f.addrs[2], mcastAck(t, g, 2, 0, &wire.Ack{Cum: far + 3, Window: 1024}))
	acks = mergedAcks(t, poll(), sender)
	if len(acks) != 1 || acks[0].Cum != far+3 {
		t.Fatalf("merged ACKs %+v, want one with Cum %d", acks, far+3)
	}
	if st := sw.Stats(); st.MulticastAcksIgnored < 2 {
		t.Fatalf("MulticastAcksIgnored = %d, want at least 2", st.MulticastAcksIgnored)
	}

	// A SYN far behind restarts the stream, in bounded work too.
	promptly(t, "a SYN with AckBase 2^31 behind", func() {
		sw.Step(now, sender, mcastData(t, g, 0, base, base, wire.FlagSyn))
	})
	if n := replicas(poll(), sender); n != 2 {
		t.Fatalf("after the SYN: %d replicas, want 2", n)
	}
}
