package transport

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Tests with crafted, well-formed datagrams: each would crash, freeze or
// exhaust an engine that trusted what a packet says.

var t0 = time.Unix(1000, 0)

// craft seals a data packet with the given header fields.
func craft(h wire.Header, payload []byte) []byte {
	h.Version = wire.Version
	if h.Op == 0 {
		h.Op = wire.OpWrite
	}
	if h.MsgLen == 0 && h.Offset == 0 {
		h.MsgLen = uint32(len(payload))
	}
	pkt, err := wire.AppendPacket(nil, &h, payload)
	if err != nil {
		panic(err)
	}
	return pkt
}

// craftAck seals an ACK frame.
func craftAck(a *wire.Ack) []byte {
	h := wire.Header{Version: wire.Version, Op: wire.OpAck}
	b := make([]byte, wire.HeaderLen+a.EncodedLen())
	h.Len = uint16(a.EncodedLen())
	h.Encode(b)
	a.Encode(b[wire.HeaderLen:])
	wire.Seal(b)
	return b
}

// within runs f and fails the test if it has not returned after limit (a
// generous bound: the operations it guards take microseconds).
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

// trust makes addr an address e contacted itself, so that e's ACKs to it
// are plain ones, not challenges.
func trust(t *testing.T, e *Engine, addr netip.AddrPort) {
	t.Helper()
	h := wire.Header{Op: wire.OpNop}
	if _, err := e.Send(PeerID{Addr: addr}, &h, nil, 0); err != nil {
		t.Fatal(err)
	}
	if !e.Validated(addr) {
		t.Fatal("address contacted is not validated")
	}
}

// lastAck polls e and returns the ACK frame it sends to addr, in an ACK
// packet or riding on data (wire.FlagAck).
func lastAck(t *testing.T, e *Engine, now time.Time, addr netip.AddrPort) (wire.Ack, bool) {
	t.Helper()
	out, _, _ := e.Poll(now, nil)
	var a wire.Ack
	found := false
	for _, d := range out {
		var h wire.Header
		p, _, err := wire.Parse(d.Buf, &h)
		if err == nil && d.Addr == addr && h.Flags&wire.FlagAck != 0 {
			if _, err := wire.SplitAck(p, &a); err != nil {
				t.Fatal(err)
			}
			found = true
			continue
		}
		if err != nil || d.Addr != addr || (h.Op != wire.OpAck && h.Op != wire.OpNack) {
			continue
		}
		if err := a.Decode(p); err != nil {
			t.Fatal(err)
		}
		found = true
	}
	return a, found
}

// TestAmplification: a one-packet request from an address that never
// acknowledges anything (a forged source) gets at most three times its
// bytes back, retransmissions included, and the response fails after
// DeadTimeout; the same request from a real client gets its 1 MiB
// response, held back only until the client echoes the challenge.
func TestAmplification(t *testing.T) {
	srv, _ := New(Config{Seed: 7, MTU: 9000})
	victim := netip.MustParseAddrPort("10.0.0.66:6")
	req := craft(wire.Header{Op: wire.OpRead, PSN: 5, AckBase: 5, MsgID: 9, Flags: wire.FlagSyn}, nil)
	d, ok := srv.Receive(t0, netio.Datagram{Addr: victim, Buf: req}, Admission{})
	if !ok {
		t.Fatal("request not delivered")
	}
	rh := wire.Header{Op: wire.OpRead, Flags: wire.FlagResp, MsgID: 9}
	if _, err := srv.Send(d.Peer, &rh, make([]byte, 1<<20), 1); err != nil {
		t.Fatal(err)
	}
	sent := 0
	var failed error
	now := t0
	for i := 0; i < 100000 && failed == nil; i++ {
		out, comps, next := srv.Poll(now, nil)
		for _, o := range out {
			sent += len(o.Buf)
		}
		for _, c := range comps {
			failed = c.Err
		}
		if next.IsZero() {
			break
		}
		now = next
	}
	if sent > 3*len(req) {
		t.Fatalf("sent %d bytes to an unverified address for a %d-byte request", sent, len(req))
	}
	if !errors.Is(failed, ErrPeerDead) {
		t.Fatalf("response to a silent stranger: %v", failed)
	}

	// A real client: READ 1 MiB, then WRITE 1 MiB as its first message
	// to a fresh server.
	for _, read := range []bool{true, false} {
		srv, _ := New(Config{Seed: 8, MTU: 9000})
		cli, _ := New(Config{Seed: 9, MTU: 9000})
		sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
		req, resp := 0, 1<<20
		if !read {
			req, resp = resp, 0
		}
		h := wire.Header{Op: wire.OpRead}
		if _, err := cli.Send(PeerID{Addr: sa}, &h, make([]byte, req), 1); err != nil {
			t.Fatal(err)
		}
		got, done := 0, false
		now := t0
		for i := 0; i < 10000 && !done; i++ {
			now = now.Add(100 * time.Microsecond)
			out, _, _ := cli.Poll(now, nil)
			for _, o := range out {
				if d, ok := srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{}); ok && d.MsgDone && d.Header.Flags&wire.FlagResp == 0 {
					rh := wire.Header{Op: wire.OpRead, Flags: wire.FlagResp, MsgID: d.Header.MsgID}
					if _, err := srv.Send(d.Peer, &rh, make([]byte, resp), 2); err != nil {
						t.Fatal(err)
					}
				}
			}
			out, _, _ = srv.Poll(now, nil)
			for _, o := range out {
				if d, ok := cli.Receive(now, netio.Datagram{Addr: sa, Buf: o.Buf}, Admission{}); ok {
					got += len(d.Payload)
					done = d.MsgDone
				}
			}
		}
		if !done || got != resp {
			t.Fatalf("read %v: response done %v, %d of %d bytes", read, done, got, resp)
		}
		// The client's ACK of the response.
		out, _, _ := cli.Poll(now.Add(time.Millisecond), nil)
		for _, o := range out {
			srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{})
		}
		if !srv.Validated(ca) {
			t.Fatalf("read %v: client address not validated after it acknowledged data", read)
		}
		if read && srv.Stats().AmplificationLimited == 0 {
			t.Fatal("first response to an unvalidated client not limited")
		}
	}
}

// TestAmplificationKeepsPackets: a response that does not fit the
// budget of an unvalidated requester waits whole for the echo of the
// challenge instead of going out cut to fit: a one-packet response stays
// one packet (two would each be exposed to loss, and a join reply whose
// second half was lost again and again kept a member from heartbeating
// until it was declared dead), and it arrives one round trip later than
// to a validated address.
func TestAmplificationKeepsPackets(t *testing.T) {
	srv, _ := New(Config{Seed: 21, MTU: 9000})
	cli, _ := New(Config{Seed: 22, MTU: 9000})
	sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
	const reqLen, respLen = 64, 300 // the response: more than 3x the request less two challenges
	h := wire.Header{Op: wire.OpRead}
	if _, err := cli.Send(PeerID{Addr: sa}, &h, make([]byte, reqLen), 1); err != nil {
		t.Fatal(err)
	}
	const rtt = 100 * time.Microsecond
	now := t0
	got, done, sentAt, doneAt := 0, false, time.Time{}, time.Time{}
	for i := 0; i < 100 && !done; i++ {
		out, _, _ := cli.Poll(now, nil)
		now = now.Add(rtt / 2)
		for _, o := range out {
			if d, ok := srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{}); ok && d.MsgDone && d.Header.Flags&wire.FlagResp == 0 {
				rh := wire.Header{Op: wire.OpRead, Flags: wire.FlagResp, MsgID: d.Header.MsgID}
				if _, err := srv.Send(d.Peer, &rh, make([]byte, respLen), 2); err != nil {
					t.Fatal(err)
				}
				sentAt = now
			}
		}
		out, _, _ = srv.Poll(now, nil)
		now = now.Add(rtt / 2)
		for _, o := range out {
			var ph wire.Header
			if p, _, err := wire.Parse(o.Buf, &ph); err == nil && ph.Op == wire.OpRead {
				if ph.Flags&wire.FlagAck != 0 {
					var a wire.Ack
					p, _ = wire.SplitAck(p, &a)
				}
				if len(p) != respLen {
					t.Fatalf("response sent in a packet of %d of its %d bytes", len(p), respLen)
				}
			}
			if d, ok := cli.Receive(now, netio.Datagram{Addr: sa, Buf: o.Buf}, Admission{}); ok {
				got += len(d.Payload)
				done, doneAt = d.MsgDone, now
			}
		}
	}
	if !done || got != respLen {
		t.Fatalf("response done %v, %d of %d bytes", done, got, respLen)
	}
	if srv.Stats().AmplificationLimited == 0 {
		t.Fatal("the response was not held back by the budget")
	}
	if took := doneAt.Sub(sentAt); took > 2*rtt {
		t.Fatalf("response took %v from Send to arrival, want at most one extra round trip (%v)", took, 2*rtt)
	}
}

// TestAckProofNeeded: ACKs that acknowledge nothing really sent (a blind
// guess from a forged source) neither validate a stranger's address nor
// are applied to it; the echo of the challenge in the engine's ACK does.
func TestAckProofNeeded(t *testing.T) {
	e, _ := New(Config{Seed: 14})
	s := netip.MustParseAddrPort("10.0.0.5:5")
	d, _ := e.Receive(t0, netio.Datagram{Addr: s, Buf: craft(wire.Header{PSN: 1, AckBase: 1, MsgID: 1}, make([]byte, 200))}, Admission{})
	rh := wire.Header{Op: wire.OpWrite, Flags: wire.FlagResp, MsgID: 1}
	if _, err := e.Send(d.Peer, &rh, make([]byte, 64), 0); err != nil {
		t.Fatal(err)
	}
	out, _, _ := e.Poll(t0, nil)
	challenge, found := uint32(0), false
	for _, o := range out {
		var h wire.Header
		p, _, err := wire.Parse(o.Buf, &h)
		if err != nil || h.Op != wire.OpAck {
			continue
		}
		var a wire.Ack
		if a.Decode(p) != nil || h.Flags&wire.FlagSyn == 0 || a.Cum != 1 || a.NBlocks != 0 {
			t.Fatalf("ACK to a stranger is not a challenge: %+v %+v", h, a)
		}
		challenge, found = h.PSN, true
	}
	if !found {
		t.Fatal("no challenge sent")
	}
	var x uint32 = 1
	for range 1000 {
		x = x*1664525 + 1013904223
		if x-challenge < 1<<16 || challenge-x < 1<<16 {
			continue
		}
		a := wire.Ack{Cum: x, Window: 64, NBlocks: 1}
		a.Blocks[0] = wire.SackBlock{Start: x + 1, End: x + 1<<31}
		e.Receive(t0, netio.Datagram{Addr: s, Buf: craftAck(&a)}, Admission{})
	}
	if e.Validated(s) || e.Strangers() != 1 {
		t.Fatalf("blind ACKs validated the address (strangers %d)", e.Strangers())
	}
	a := wire.Ack{Cum: challenge, Window: 64}
	e.Receive(t0, netio.Datagram{Addr: s, Buf: craftAck(&a)}, Admission{})
	if !e.Validated(s) || e.Strangers() != 0 {
		t.Fatal("the echo of the challenge did not validate the address")
	}
	// Now validated, the data is acknowledged for real.
	if a, _ := lastAck(t, e, t0, s); a.Cum != 2 {
		t.Fatalf("Cum %d after validation, want 2", a.Cum)
	}
}

// TestAnswerOnAnotherStream: a forged datagram on one stream (a group
// stream) that the layer above answers on another stream to the same
// address (an event to the member's unicast stream, as a forwarding node
// sends) must neither escape the amplification limit nor validate the
// address, and the answer's peer costs a stranger's memory (a small send
// ring). Once the address proves it receives, through any of its
// streams, the held answer goes out within a retransmission timeout.
func TestAnswerOnAnotherStream(t *testing.T) {
	srv, _ := New(Config{Seed: 7, MTU: 9000, GroupModes: true})
	victim := netip.MustParseAddrPort("10.0.0.66:6")
	fake := craft(wire.Header{Op: wire.OpData, Mode: wire.ModeMulticast, Group: 5, Src: 3, Dst: wire.MemberAll, PSN: 5, AckBase: 5, MsgID: 9, Flags: wire.FlagSyn}, make([]byte, 8))
	if _, ok := srv.Receive(t0, netio.Datagram{Addr: victim, Buf: fake}, Admission{}); !ok {
		t.Fatal("group data not delivered")
	}
	answer := PeerID{Addr: victim, Group: 5, Member: 3}
	h := wire.Header{Op: wire.OpEvent}
	if _, err := srv.Send(answer, &h, make([]byte, 4096), 1); err != nil {
		t.Fatal(err)
	}
	if srv.Validated(victim) || srv.Strangers() != 2 {
		t.Fatalf("after the answer: validated %v, %d strangers; want false, 2", srv.Validated(victim), srv.Strangers())
	}
	sent, now := 0, t0
	for range 50 {
		out, _, next := srv.Poll(now, nil)
		for _, o := range out {
			sent += len(o.Buf)
		}
		if next.IsZero() {
			break
		}
		now = next
	}
	if sent > 3*len(fake) {
		t.Fatalf("sent %d bytes to an unverified address for a %d-byte datagram", sent, len(fake))
	}
	for _, p := range srv.groups[5].peers {
		if len(p.ring) > strangerRing {
			t.Fatalf("a stranger holds a send ring of %d records", len(p.ring))
		}
	}

	// The same with a client that answers: its unicast stream to the
	// server validates the address, and the held answer is delivered.
	srv, _ = New(Config{Seed: 7, MTU: 9000, GroupModes: true})
	cli, _ := New(Config{Seed: 8, MTU: 9000, GroupModes: true})
	sa, ca := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
	cli.SetLocal(5, 3)
	srv.SetLocal(5, wire.MemberAll) // as a forwarding node is in its groups
	if _, err := cli.Send(PeerID{Addr: sa, Group: 5, Member: wire.MemberAll, Mode: wire.ModeMulticast}, &wire.Header{Op: wire.OpData}, make([]byte, 8), 1); err != nil {
		t.Fatal(err)
	}
	delivered, now := false, t0
	held := false
	for i := 0; i < 10000 && !delivered; i++ {
		out, _, _ := cli.Poll(now, nil)
		for _, o := range out {
			if d, ok := srv.Receive(now, netio.Datagram{Addr: ca, Buf: o.Buf}, Admission{}); ok && d.Header.Mode == wire.ModeMulticast && !held {
				held = true
				if _, err := srv.Send(PeerID{Addr: ca, Group: 5, Member: 3}, &wire.Header{Op: wire.OpEvent}, make([]byte, 4096), 2); err != nil {
					t.Fatal(err)
				}
			}
		}
		out, _, _ = srv.Poll(now, nil)
		for _, o := range out {
			if d, ok := cli.Receive(now, netio.Datagram{Addr: sa, Buf: o.Buf}, Admission{}); ok && d.Header.Op == wire.OpEvent && d.MsgDone {
				delivered = true
			}
		}
		now = now.Add(100 * time.Microsecond)
	}
	if !delivered || !srv.Validated(ca) {
		t.Fatalf("answer delivered %v, address validated %v", delivered, srv.Validated(ca))
	}
	if d := now.Sub(t0); d > 2*DefaultInitialRTO {
		t.Fatalf("the held answer took %v", d)
	}
}

// TestHandshakeNotData: a HANDSHAKE packet (the security layer's) that
// reaches an engine is counted unexpected and creates no peer.
func TestHandshakeNotData(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := wire.Header{Version: wire.Version, Op: wire.OpHandshake, PSN: 7, AckBase: 7, MsgLen: 40}
	pkt, err := wire.AppendPacket(nil, &h, make([]byte, 40))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Receive(time.Unix(1, 0), netio.Datagram{Addr: netip.MustParseAddrPort("10.0.0.9:1"), Buf: pkt}, Admission{}); ok {
		t.Fatal("a HANDSHAKE packet was delivered as data")
	}
	if st := e.Stats(); st.Unexpected != 1 || st.Peers != 0 {
		t.Fatalf("after a HANDSHAKE packet: %d unexpected, %d peers; want 1, 0", st.Unexpected, st.Peers)
	}
}

// TestSealRequired: a peer's word that it takes sealed datagrams only is
// not authenticated, so it fails nothing: a forged one sent before a
// plain client's first request is answered leaves the request to
// complete, and is forgotten once the stream is acknowledged. On a
// stream that never gets an ACK it is kept (Engine.SealRequired) and
// explains the failure at DeadTimeout (a *PeerError matching
// ErrSealRequired). An address with no stream ignores it.
func TestSealRequired(t *testing.T) {
	word, err := wire.AppendPacket(nil, &wire.Header{Version: wire.Version, Op: wire.OpHandshake, MsgLen: 1},
		[]byte{wire.HandshakeSealRequired})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	sealed := netip.MustParseAddrPort("10.0.0.9:1")
	if _, err := e.Send(PeerID{Addr: sealed}, &wire.Header{Op: wire.OpWrite}, make([]byte, 64), 7); err != nil {
		t.Fatal(err)
	}
	e.Poll(now, nil)
	e.Receive(now, netio.Datagram{Addr: netip.MustParseAddrPort("10.0.0.8:1"), Buf: word}, Admission{}) // no stream there
	if st := e.Stats(); st.SealRequired != 0 || st.Unexpected != 1 {
		t.Fatalf("seal-required from an address without a stream: %+v", st)
	}
	e.Receive(now, netio.Datagram{Addr: sealed, Buf: word}, Admission{})
	if _, done, _ := e.Poll(now, nil); len(done) != 0 {
		t.Fatalf("completions at once after seal-required: %+v", done)
	}
	if st := e.Stats(); st.SealRequired != 1 || st.Peers != 1 || !e.SealRequired(sealed) {
		t.Fatalf("after seal-required: %+v, SealRequired %v", st, e.SealRequired(sealed))
	}
	var done []Completion
	for at := now; len(done) == 0 && at.Before(now.Add(2*DefaultDeadTimeout)); at = at.Add(100 * time.Millisecond) {
		_, done, _ = e.Poll(at, nil)
	}
	var pe *PeerError
	if len(done) != 1 || done[0].Token != 7 || !errors.As(done[0].Err, &pe) || !pe.SealRequired ||
		!errors.Is(done[0].Err, ErrSealRequired) || !errors.Is(done[0].Err, ErrPeerDead) {
		t.Fatalf("completions of a stream told seal-required and never answered: %+v", done)
	}
	if msg := done[0].Err.Error(); !strings.Contains(msg, "takes only sealed datagrams") {
		t.Fatalf("error %q does not say the peer takes only sealed datagrams", msg)
	}

	// A plain client's first request, a forged notice before the answer:
	// the request completes, and the notice is forgotten.
	cli, err := New(Config{Seed: 41})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{t: t, cli: cli, srv: srv, ca: netip.MustParseAddrPort("10.0.0.2:2"), sa: netip.MustParseAddrPort("10.0.0.1:1"), now: t0}
	p.request(8)
	p.cli.Receive(p.now, netio.Datagram{Addr: p.sa, Buf: word}, Admission{})
	var got [][]byte
	for range 3 {
		got = append(got, p.serve(8)...)
		p.now = p.now.Add(MaxAckDelay)
	}
	if len(got) != 1 {
		t.Fatalf("after a forged seal-required the first request got %d responses, want 1", len(got))
	}
	if st := p.cli.Stats(); st.SealRequired != 1 || st.MessagesFailed != 0 || p.cli.SealRequired(p.sa) {
		t.Fatalf("a first request was failed, or the notice outlived the ACK: %+v, SealRequired %v", st, p.cli.SealRequired(p.sa))
	}

	// A stream that has been acknowledged ignores the word.
	p = newPair(t, Config{}, Config{})
	p.request(8)
	p.cli.Receive(p.now, netio.Datagram{Addr: p.sa, Buf: word}, Admission{})
	if got := p.serve(8); len(got) != 1 {
		t.Fatalf("after a forged seal-required the working stream delivered %d responses, want 1", len(got))
	}
	if st := p.cli.Stats(); st.SealRequired != 0 {
		t.Fatalf("a working stream counted the notice: %+v", st)
	}
}
