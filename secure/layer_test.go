package secure

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// net2 connects two layers (and what a third party injects) with a
// virtual clock; drop decides which datagrams are lost.
type net2 struct {
	t        *testing.T
	now      time.Time
	l        map[netip.AddrPort]*Layer
	got      map[netip.AddrPort][][]byte // plain packets handed up, by receiver
	from     map[netip.AddrPort][]netip.AddrPort
	drop     func(from, to netip.AddrPort, b []byte) bool
	captured []Datagram // every datagram sent, with its sender in Addr
}

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:7471")
	addrB = netip.MustParseAddrPort("10.0.0.2:7470")
)

func newNet2(t *testing.T) (*net2, *Layer, *Layer) {
	a := authority(t, "fabric secret for the layer tests")
	n := &net2{t: t, now: t0, l: map[netip.AddrPort]*Layer{}, got: map[netip.AddrPort][][]byte{}, from: map[netip.AddrPort][]netip.AddrPort{}}
	n.l[addrA] = n.layer(issue(t, a, RoleSwitch, "sw0", 1), 11)
	n.l[addrB] = n.layer(issue(t, a, RoleMemoryNode, "mem0", 2), 12)
	return n, n.l[addrA], n.l[addrB]
}

func (n *net2) layer(id *Identity, seed byte) *Layer {
	l, err := NewLayer(id, Options{}, newRng(seed))
	if err != nil {
		n.t.Fatal(err)
	}
	return l
}

// pump delivers datagrams until none is left.
func (n *net2) pump() {
	for range 100 {
		moved := false
		for src, l := range n.l {
			for _, d := range l.Take(nil) {
				moved = true
				n.captured = append(n.captured, Datagram{Addr: src, Buf: bytes.Clone(d.Buf)})
				if n.drop != nil && n.drop(src, d.Addr, d.Buf) {
					continue
				}
				n.deliver(src, d.Addr, d.Buf)
			}
		}
		if !moved {
			return
		}
	}
	n.t.Fatal("datagrams still moving after 100 rounds")
}

func (n *net2) deliver(src, dst netip.AddrPort, b []byte) {
	if l := n.l[dst]; l != nil {
		if plain := l.Receive(n.now, src, bytes.Clone(b)); plain != nil {
			n.got[dst] = append(n.got[dst], bytes.Clone(plain))
			n.from[dst] = append(n.from[dst], src)
		}
	}
}

// tick advances the clock by d and runs both layers' timers.
func (n *net2) tick(d time.Duration) {
	n.now = n.now.Add(d)
	for _, l := range n.l {
		l.Tick(n.now)
	}
	n.pump()
}

func plainPacket(t testing.TB, id uint64, text string) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpWrite, MsgID: id, MsgLen: uint32(len(text))}
	b, err := wire.AppendPacket(nil, &h, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLayerSession: datagrams sent before any session are held while a
// handshake opens one, then arrive sealed and are handed up exactly as
// sent, in order; each side knows the other's certified identity; the
// payload never crosses in clear.
func TestLayerSession(t *testing.T) {
	n, a, b := newNet2(t)
	var sent [][]byte
	for i := range 3 {
		p := plainPacket(t, uint64(i+1), fmt.Sprintf("region bytes %d", i))
		sent = append(sent, p)
		if err := a.Send(n.now, addrB, p); err != nil {
			t.Fatal(err)
		}
	}
	n.pump()
	if len(n.got[addrB]) != 3 {
		t.Fatalf("%d datagrams arrived, want 3 (stats A %+v, B %+v)", len(n.got[addrB]), a.Stats(), b.Stats())
	}
	for i, p := range n.got[addrB] {
		// All but the CRC32C, which a plain packet out of the layer
		// does not carry (the tag covered every byte).
		if len(p) != len(sent[i]) || !bytes.Equal(p[:92], sent[i][:92]) || !bytes.Equal(p[wire.HeaderLen:], sent[i][wire.HeaderLen:]) {
			t.Fatalf("datagram %d arrived changed", i)
		}
		var h wire.Header
		if _, _, err := wire.ParseVerified(p, &h); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}
	for _, d := range n.captured {
		if bytes.Contains(d.Buf, []byte("region bytes")) {
			t.Fatal("a payload crossed in clear")
		}
	}
	if c, ok := b.Peer(addrA); !ok || c.Role != RoleSwitch || c.Name != "sw0" {
		t.Fatalf("B sees A as %+v, %v", c, ok)
	}
	if c, ok := a.Peer(addrB); !ok || c.Role != RoleMemoryNode || c.Name != "mem0" {
		t.Fatalf("A sees B as %+v, %v", c, ok)
	}
	// The answer goes back in the same session: no new handshake.
	if err := b.Send(n.now, addrA, plainPacket(t, 9, "answer")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	if len(n.got[addrA]) != 1 || a.Stats().Handshakes != 1 || b.Stats().Handshakes != 1 {
		t.Fatalf("answer: %d arrived; handshakes A %d, B %d", len(n.got[addrA]), a.Stats().Handshakes, b.Stats().Handshakes)
	}
}

// TestLayerRefuses: a party that sees every packet but holds no
// credential of the session gets nothing accepted: unsealed datagrams, a
// replay of each captured datagram (from the same or another address),
// and tampered ones are dropped and counted, and none reaches the core.
func TestLayerRefuses(t *testing.T) {
	n, a, b := newNet2(t)
	for i := range 5 {
		if err := a.Send(n.now, addrB, plainPacket(t, uint64(i+1), "fetch-add once")); err != nil {
			t.Fatal(err)
		}
	}
	n.pump()
	if len(n.got[addrB]) != 5 {
		t.Fatalf("%d arrived", len(n.got[addrB]))
	}
	before := len(n.got[addrB])
	captured := n.captured
	evil := netip.MustParseAddrPort("10.6.6.6:4791")
	for _, d := range captured {
		if d.Addr != addrA {
			continue
		}
		n.deliver(addrA, addrB, d.Buf) // replayed as A
		n.deliver(evil, addrB, d.Buf)  // replayed from elsewhere
		bad := bytes.Clone(d.Buf)
		bad[len(bad)-1] ^= 1
		n.deliver(addrA, addrB, bad)
	}
	n.deliver(addrA, addrB, plainPacket(t, 99, "unsealed"))
	if len(n.got[addrB]) != before {
		t.Fatalf("%d replayed, forged or unsealed datagrams handed up", len(n.got[addrB])-before)
	}
	st := b.Stats()
	if st.DroppedReplay == 0 || st.DroppedNoSA == 0 || st.DroppedPlain == 0 || st.DroppedAuth+st.DroppedReplay+st.HandshakesFailed == 0 {
		t.Fatalf("refusals not counted: %+v", st)
	}
	if _, ok := b.Peer(evil); ok || b.Stats().Peers != 1 {
		t.Fatalf("B keeps state for the replaying address: %d peers", b.Stats().Peers)
	}
}

// TestLayerLossAndRestart: a lost HELLO is sent again; a peer that
// restarted (its sessions gone) tells the sender, which opens a new
// session: what it sends from then on arrives.
func TestLayerLossAndRestart(t *testing.T) {
	n, a, _ := newNet2(t)
	lost := 0
	n.drop = func(from, to netip.AddrPort, buf []byte) bool {
		if lost < 2 && buf[1] == byte(wire.OpHandshake) {
			lost++
			return true
		}
		return false
	}
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "first")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	for range 10 {
		n.tick(DefaultHandshakeRetry)
	}
	if len(n.got[addrB]) != 1 {
		t.Fatalf("after two lost handshake messages: %d arrived (A %+v)", len(n.got[addrB]), a.Stats())
	}
	// B restarts.
	n.l[addrB] = n.layer(issue(t, authority(t, "fabric secret for the layer tests"), RoleMemoryNode, "mem0", 3), 13)
	if err := a.Send(n.now, addrB, plainPacket(t, 2, "lost: sealed for the old session")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	if err := a.Send(n.now, addrB, plainPacket(t, 3, "after the restart")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	got := n.got[addrB]
	if a.Stats().SessionsReset != 1 || len(got) != 2 || !bytes.Contains(got[1], []byte("after the restart")) {
		t.Fatalf("after B's restart: %d sessions reset, %d arrived", a.Stats().SessionsReset, len(got))
	}
}

// TestLayerSimultaneousOpen: both sides send first; one handshake wins
// and data flows both ways.
func TestLayerSimultaneousOpen(t *testing.T) {
	n, a, b := newNet2(t)
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "a to b")); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(n.now, addrA, plainPacket(t, 1, "b to a")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	n.tick(DefaultHandshakeRetry)
	if len(n.got[addrA]) != 1 || len(n.got[addrB]) != 1 {
		t.Fatalf("simultaneous open: %d and %d arrived (A %+v, B %+v)", len(n.got[addrA]), len(n.got[addrB]), a.Stats(), b.Stats())
	}
}

// TestLayerBounds: HELLOs without a cookie leave no state; datagrams held
// for a handshake are bounded and dropped when it gives up; the peer
// table is bounded.
func TestLayerBounds(t *testing.T) {
	n, a, b := newNet2(t)
	ini := issue(t, authority(t, "fabric secret for the layer tests"), RoleClient, "c", 9)
	for i := range 1000 {
		in, _ := NewInitiator(ini, uint32(i+1), Options{}, newRng(byte(i)))
		h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: uint32(len(in.Hello()))}
		pkt, _ := wire.AppendPacket(nil, &h, in.Hello())
		b.Receive(n.now, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 1), pkt)
	}
	if b.Stats().Peers != 0 || b.res.Pending() != 0 {
		t.Fatalf("1000 HELLOs without cookies left %d peers, %d pending", b.Stats().Peers, b.res.Pending())
	}
	b.Take(nil)
	// Nobody answers at C: the held datagrams are bounded and dropped
	// at the give-up time.
	c := netip.MustParseAddrPort("10.0.0.3:1")
	a.MaxQueued = 4
	errs := 0
	for i := range 6 {
		if a.Send(n.now, c, plainPacket(t, uint64(i), "x")) != nil {
			errs++
		}
	}
	if errs != 2 {
		t.Fatalf("%d of 6 sends refused with 4 allowed", errs)
	}
	a.Take(nil)
	a.Tick(n.now.Add(DefaultHandshakeGiveUp + time.Second))
	if a.Stats().Peers != 0 || a.Stats().DroppedQueue != 6 {
		t.Fatalf("after the give-up: %+v", a.Stats())
	}
	a.MaxPeers = 2
	for i := range 3 {
		err := a.Send(n.now, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 8, 0, byte(i)}), 1), plainPacket(t, 1, "x"))
		if i < 2 && err != nil || i == 2 && err == nil {
			t.Fatalf("peer %d with 2 allowed: %v", i, err)
		}
	}
}

// TestLayerRecycleAllocs: datagrams are sealed into buffers that Recycle gives
// back, so a steady flow allocates nothing; a HELLO whose datagram was
// recycled (and its buffer reused) is still sent again intact.
func TestLayerRecycleAllocs(t *testing.T) {
	n, a, b := newNet2(t)
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "held")); err != nil {
		t.Fatal(err)
	}
	// The first HELLO is lost; its buffer goes back and is reused.
	hello := a.Take(nil)
	if len(hello) != 1 {
		t.Fatalf("%d datagrams to send, want the HELLO", len(hello))
	}
	first := bytes.Clone(hello[0].Buf)
	a.Recycle(hello)
	if err := a.Send(n.now, netip.MustParseAddrPort("10.0.0.9:1"), plainPacket(t, 2, "to a stranger: overwrites a recycled buffer")); err != nil {
		t.Fatal(err)
	}
	a.Recycle(a.Take(nil))
	if d := a.Deadline(); d.IsZero() || d.After(n.now.Add(DefaultHandshakeRetry)) {
		t.Fatalf("deadline %v with a HELLO to resend at %v", d, n.now.Add(DefaultHandshakeRetry))
	}
	n.now = n.now.Add(DefaultHandshakeRetry)
	a.Tick(n.now)
	for _, d := range a.Take(nil) {
		if d.Addr == addrB && !bytes.Equal(d.Buf, first) {
			t.Fatal("the HELLO sent again is not the HELLO")
		}
		n.deliver(addrA, addrB, d.Buf)
	}
	n.pump()
	if len(n.got[addrB]) != 1 || !bytes.Contains(n.got[addrB][0], []byte("held")) {
		t.Fatalf("after the HELLO was sent again: %d arrived (A %+v, B %+v)", len(n.got[addrB]), a.Stats(), b.Stats())
	}

	pkt := plainPacket(t, 3, string(make([]byte, 8000)))
	var out []Datagram
	roundTrip := func() {
		if err := a.Send(n.now, addrB, pkt); err != nil {
			t.Fatal(err)
		}
		out = a.Take(out[:0])
		for _, d := range out {
			if b.Receive(n.now, addrA, d.Buf) == nil {
				t.Fatalf("datagram not opened: %+v", b.Stats())
			}
		}
		a.Recycle(out)
	}
	roundTrip()
	if allocs := testing.AllocsPerRun(100, roundTrip); allocs != 0 {
		t.Fatalf("%.1f allocations per datagram sealed, sent, opened and recycled", allocs)
	}
}

// TestLayerDeadline: Deadline says when Tick has work; ticking only then
// still forgets an idle session.
func TestLayerDeadline(t *testing.T) {
	n, a, b := newNet2(t)
	if !a.Deadline().IsZero() {
		t.Fatalf("deadline %v with nothing to do", a.Deadline())
	}
	a.SessionIdle, b.SessionIdle = time.Minute, time.Minute
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	if a.Stats().Peers != 1 || a.Deadline().IsZero() {
		t.Fatalf("after a session opened: %d peers, deadline %v", a.Stats().Peers, a.Deadline())
	}
	for i := 0; i < 20 && a.Stats().Peers > 0; i++ {
		n.now = a.Deadline()
		a.Tick(n.now)
	}
	if a.Stats().Peers != 0 || n.now.Sub(t0) > 2*time.Minute {
		t.Fatalf("idle session kept: %d peers at %v", a.Stats().Peers, n.now.Sub(t0))
	}
}

// BenchmarkLayerSeal: one 8 KiB datagram sealed, taken, opened and its
// buffer recycled.
func BenchmarkLayerSeal(b *testing.B) {
	n, x, y := newNet2(&testing.T{})
	if err := x.Send(n.now, addrB, plainPacket(b, 1, "open")); err != nil {
		b.Fatal(err)
	}
	n.pump()
	pkt := plainPacket(b, 2, string(make([]byte, 8192)))
	var out []Datagram
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		_ = x.Send(n.now, addrB, pkt)
		out = x.Take(out[:0])
		for _, d := range out {
			y.Receive(n.now, addrA, d.Buf)
		}
		x.Recycle(out)
	}
}

// TestLayerRekey: a session that has sealed RekeyPackets datagrams is
// replaced by a new handshake while traffic goes on: nothing is lost,
// datagrams sealed under the old keys and still on their way are opened
// for Drain, and after it they are refused.
func TestLayerRekey(t *testing.T) {
	n, a, b := newNet2(t)
	a.RekeyPackets = 5
	for i := range 20 {
		if err := a.Send(n.now, addrB, plainPacket(t, uint64(i+1), fmt.Sprintf("datagram %d", i))); err != nil {
			t.Fatal(err)
		}
		n.pump()
	}
	if len(n.got[addrB]) != 20 {
		t.Fatalf("%d of 20 arrived across rekeys (A %+v, B %+v)", len(n.got[addrB]), a.Stats(), b.Stats())
	}
	if a.Stats().Rekeys < 3 || b.Stats().DroppedNoSA+b.Stats().DroppedAuth+b.Stats().DroppedReplay != 0 {
		t.Fatalf("rekeys %d; B dropped %+v", a.Stats().Rekeys, b.Stats())
	}
	// Datagrams sealed under the current keys, held on the way while a
	// rekey completes, still open; after the drain they are refused.
	a.RekeyPackets = a.peers[addrB].sess.Send.Seq() + 3
	var held []Datagram
	for i := range 3 {
		if err := a.Send(n.now, addrB, plainPacket(t, uint64(100+i), "late")); err != nil {
			t.Fatal(err)
		}
		for _, d := range a.Take(nil) {
			if d.Buf[1] == byte(wire.OpHandshake) {
				n.deliver(addrA, addrB, d.Buf)
			} else {
				held = append(held, Datagram{Addr: d.Addr, Buf: bytes.Clone(d.Buf)})
			}
		}
	}
	n.pump() // the rekey's handshake completes
	got := len(n.got[addrB])
	n.deliver(addrA, addrB, held[0].Buf)
	if len(n.got[addrB]) != got+1 {
		t.Fatal("a datagram sealed under the old keys was refused during the drain")
	}
	n.tick(DefaultDrain + time.Minute)
	n.deliver(addrA, addrB, held[1].Buf)
	if len(n.got[addrB]) != got+1 {
		t.Fatal("a datagram sealed under the old keys opened after the drain")
	}
}

// TestLayerLateHandshakeTwin: an answer to a handshake that already
// completed (the twin of one taken, as a resent HELLO brings) is ignored
// and counted a duplicate, not a failed handshake: the session stands.
func TestLayerLateHandshakeTwin(t *testing.T) {
	n, a, _ := newNet2(t)
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "first")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	if len(n.got[addrB]) != 1 {
		t.Fatalf("%d arrived", len(n.got[addrB]))
	}
	var answers [][]byte
	for _, d := range n.captured {
		if d.Addr == addrB && d.Buf[1] == byte(wire.OpHandshake) {
			answers = append(answers, d.Buf)
		}
	}
	if len(answers) == 0 {
		t.Fatal("no handshake answer captured")
	}
	before := a.Stats()
	for _, b := range answers {
		n.deliver(addrB, addrA, b)
	}
	st := a.Stats()
	if st.HandshakesFailed != before.HandshakesFailed || st.HandshakeDuplicates != before.HandshakeDuplicates+uint64(len(answers)) {
		t.Fatalf("late twins of %d answers: failed %d -> %d, duplicates %d -> %d", len(answers),
			before.HandshakesFailed, st.HandshakesFailed, before.HandshakeDuplicates, st.HandshakeDuplicates)
	}
	if err := a.Send(n.now, addrB, plainPacket(t, 2, "second")); err != nil {
		t.Fatal(err)
	}
	n.pump()
	if len(n.got[addrB]) != 2 {
		t.Fatalf("after the twins: %d arrived", len(n.got[addrB]))
	}
}

// TestLayerSealRequired: an unsealed datagram is answered with a one-byte
// HANDSHAKE that says only sealed datagrams are taken, never more than a
// byte larger than what it answers; the answers are bounded per source
// and per second.
func TestLayerSealRequired(t *testing.T) {
	n, _, b := newNet2(t)
	stranger := netip.MustParseAddrPort("10.9.9.9:1")
	pkt := plainPacket(t, 1, "x")
	b.Receive(n.now, stranger, bytes.Clone(pkt))
	out := b.Take(nil)
	if len(out) != 1 || out[0].Addr != stranger || len(out[0].Buf) > len(pkt) {
		t.Fatalf("answer to an unsealed datagram: %d datagrams", len(out))
	}
	var h wire.Header
	payload, _, err := wire.Parse(out[0].Buf, &h)
	if err != nil || h.Op != wire.OpHandshake || len(payload) != 1 || payload[0] != wire.HandshakeSealRequired {
		t.Fatalf("answer %v %v %x", err, h.Op, payload)
	}
	b.Recycle(out)
	// A header-only one (a NOP) is answered too: the answer is one byte
	// longer, and bounded per source and per second.
	nop := plainPacket(t, 2, "")
	b.Receive(n.now, stranger, bytes.Clone(nop))
	if out := b.Take(nil); len(out) != 1 || len(out[0].Buf) != len(nop)+1 {
		t.Fatalf("a header-only unsealed datagram: %d answers", len(out))
	}
	for i := range 10 * answerRate {
		b.Receive(n.now, stranger, plainPacket(t, uint64(3+i), "flood"))
	}
	if out := b.Take(nil); len(out) != answerPerSource-2 {
		t.Fatalf("%d answers to one source's flood in one second, want %d", len(out), answerPerSource-2)
	}
	for i := range 10 * answerRate {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 7, byte(i >> 8), byte(i)}), 9)
		b.Receive(n.now, src, plainPacket(t, uint64(3+i), "flood"))
	}
	if out := b.Take(nil); len(out) != answerRate-answerPerSource {
		t.Fatalf("%d answers to a flood from many sources in one second, want %d", len(out), answerRate-answerPerSource)
	}
	if st := b.Stats(); st.DroppedPlain != 2+20*answerRate || st.Peers != 0 {
		t.Fatalf("after the flood: %+v", st)
	}
	// The next second, the source is answered again.
	b.Receive(n.now.Add(time.Second), stranger, bytes.Clone(nop))
	if out := b.Take(nil); len(out) != 1 {
		t.Fatalf("the next second: %d answers", len(out))
	}
}

// TestLayerFlushKeepsControl: a datagram Flush seals keeps its Control
// mark (an ACK stays one for a network that queues control first).
func TestLayerFlushKeepsControl(t *testing.T) {
	n, a, _ := newNet2(t)
	if err := a.Send(n.now, addrB, plainPacket(t, 1, "open")); err != nil {
		t.Fatal(err)
	}
	n.pump() // the handshake: a session to B from here on
	out := []Datagram{
		{Addr: addrB, Buf: plainPacket(t, 2, "data")},
		{Addr: addrB, Buf: plainPacket(t, 3, "ack"), Control: true},
	}
	var written []Datagram
	a.Flush(n.now, out, nil, func(ds []Datagram) { written = append(written, ds...) })
	if len(written) != 2 || written[0].Control || !written[1].Control {
		t.Fatalf("Flush wrote %d datagrams, Control %v; want 2, [false true]", len(written), func() []bool {
			var c []bool
			for _, d := range written {
				c = append(c, d.Control)
			}
			return c
		}())
	}
}

// TestLayerTickOrder: the HELLOs Tick sends again go out in the order
// of their peers' addresses, whatever order the handshakes began in (a
// simulation replays from its seed only if they do).
func TestLayerTickOrder(t *testing.T) {
	n, a, _ := newNet2(t)
	var peers []netip.AddrPort
	for _, i := range []int{7, 3, 9, 1, 5, 8, 2, 6, 4} {
		p := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), 7470)
		peers = append(peers, p)
		if err := a.Send(n.now, p, plainPacket(t, uint64(i), "to a peer that does not answer")); err != nil {
			t.Fatal(err)
		}
	}
	a.Recycle(a.Take(nil)) // the first HELLOs, lost
	n.now = n.now.Add(DefaultHandshakeRetry)
	a.Tick(n.now)
	var got []netip.AddrPort
	for _, d := range a.Take(nil) {
		got = append(got, d.Addr)
	}
	want := slices.SortedFunc(slices.Values(peers), netip.AddrPort.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("HELLOs sent again to %v, want %v", got, want)
	}
}
