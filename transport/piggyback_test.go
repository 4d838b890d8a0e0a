package transport

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// pair is a client and a server engine wired by hand: what one Polls
// out, the test hands to the other's Receive, and counts.
type pair struct {
	t        *testing.T
	cli, srv *Engine
	ca, sa   netip.AddrPort
	now      time.Time
	// datagrams each way, and the ACKs among them that rode on data.
	cliOut, srvOut       int
	cliAcks, srvAcks     int // ACK packets of their own
	cliRiding, srvRiding int
	srvFirst             wire.Opcode // opcode of the first datagram of the server's last Poll
}

func newPair(t *testing.T, cliCfg, srvCfg Config) *pair {
	t.Helper()
	cliCfg.Seed, srvCfg.Seed = 41, 42
	cli, err := New(cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{t: t, cli: cli, srv: srv, ca: netip.MustParseAddrPort("10.0.0.2:2"),
		sa: netip.MustParseAddrPort("10.0.0.1:1"), now: t0}
	// A first exchange validates the client's address at the server (a
	// challenge and its echo) and leaves nothing pending: the counts
	// start after it.
	p.request(8)
	for range 3 {
		p.serve(8)
		p.now = p.now.Add(MaxAckDelay)
	}
	p.serve(0)
	if !srv.Validated(p.ca) {
		t.Fatal("the client's address is not validated after the first exchange")
	}
	p.cliOut, p.srvOut, p.cliAcks, p.srvAcks, p.cliRiding, p.srvRiding = 0, 0, 0, 0, 0, 0
	return p
}

// count tallies one datagram.
func count(t *testing.T, d netio.Datagram, out, acks, riding *int) {
	var h wire.Header
	if _, _, err := wire.Parse(d.Buf, &h); err != nil {
		t.Fatalf("engine sent a datagram that does not parse: %v", err)
	}
	*out++
	switch {
	case h.Op == wire.OpAck || h.Op == wire.OpNack:
		*acks++
	case h.Flags&wire.FlagAck != 0:
		*riding++
	}
}

// serve polls both engines once each, the server answering every
// request with a response of respLen bytes, and returns the response
// payloads the client got. The client then polls again at once, as an
// endpoint does after every receive: what it sends then (ACKs) reaches
// the server too.
func (p *pair) serve(respLen int) (got [][]byte) {
	out, _, _ := p.cli.Poll(p.now, nil)
	for _, d := range out {
		count(p.t, d, &p.cliOut, &p.cliAcks, &p.cliRiding)
		if dl, ok := p.srv.Receive(p.now, netio.Datagram{Addr: p.ca, Buf: d.Buf}, Admission{}); ok && dl.MsgDone && dl.Header.Flags&wire.FlagResp == 0 {
			rh := wire.Header{Op: dl.Header.Op, Flags: wire.FlagResp, MsgID: dl.Header.MsgID}
			if _, err := p.srv.Send(dl.Peer, &rh, make([]byte, respLen), 0); err != nil {
				p.t.Fatal(err)
			}
		}
	}
	out, _, _ = p.srv.Poll(p.now, nil)
	if len(out) > 0 {
		p.srvFirst = wire.Opcode(out[0].Buf[1])
	}
	for _, d := range out {
		count(p.t, d, &p.srvOut, &p.srvAcks, &p.srvRiding)
		if dl, ok := p.cli.Receive(p.now, netio.Datagram{Addr: p.sa, Buf: d.Buf}, Admission{}); ok {
			got = append(got, dl.Payload)
		}
	}
	out, _, _ = p.cli.Poll(p.now, nil)
	for _, d := range out {
		count(p.t, d, &p.cliOut, &p.cliAcks, &p.cliRiding)
		p.srv.Receive(p.now, netio.Datagram{Addr: p.ca, Buf: d.Buf}, Admission{})
	}
	return got
}

func (p *pair) request(n int) {
	h := wire.Header{Op: wire.OpRead}
	if _, err := p.cli.Send(PeerID{Addr: p.sa}, &h, make([]byte, n), 1); err != nil {
		p.t.Fatal(err)
	}
}

// TestPiggybackedAcks: on the point-to-point group a request and its
// one-packet response cost two datagrams: the server's ACK of the
// request rides on the response, and the client's ACK of the response,
// held up to MaxAckDelay, rides on the next request. A response nobody
// follows is acknowledged on its own by MaxAckDelay (or at once after
// FlushAcks); with
// ImmediateAcks at once; a response of several packets at once.
func TestPiggybackedAcks(t *testing.T) {
	t.Run("request-response", func(t *testing.T) {
		p := newPair(t, Config{}, Config{})
		const ops = 20
		for i := range ops {
			p.request(64)
			if got := p.serve(100); len(got) != 1 || len(got[0]) != 100 {
				t.Fatalf("op %d: client got %d payloads", i, len(got))
			}
			p.now = p.now.Add(20 * time.Microsecond)
		}
		// Two datagrams per exchange, each carrying an ACK (the first
		// request has no response to acknowledge).
		if p.cliOut != ops || p.srvOut != ops || p.cliAcks != 0 || p.srvAcks != 0 {
			t.Fatalf("client sent %d (%d ACKs alone), server %d (%d ACKs alone); want %d and 0 each",
				p.cliOut, p.cliAcks, p.srvOut, p.srvAcks, ops)
		}
		if p.srvRiding != ops || p.cliRiding != ops-1 {
			t.Fatalf("ACKs riding: server %d, client %d; want %d and %d", p.srvRiding, p.cliRiding, ops, ops-1)
		}
		if st := p.cli.Stats(); st.PacketsRetransmitted != 0 || st.AcksPiggybacked < ops-1 {
			t.Fatalf("client stats %+v", st)
		}
		if st := p.srv.Stats(); st.PacketsRetransmitted != 0 || st.AcksPiggybacked < ops {
			t.Fatalf("server stats %+v", st)
		}
		// The last response's ACK is still held: Poll asks to be called
		// when it is due, and then sends it alone.
		_, _, next := p.cli.Poll(p.now, nil)
		if want := p.now.Add(MaxAckDelay - 20*time.Microsecond); next.IsZero() || next.After(want) {
			t.Fatalf("client asks for Poll at %v, want by %v", next.Sub(t0), want.Sub(t0))
		}
		// FlushAcks (what a closing endpoint does) sends it now.
		p.cli.FlushAcks()
		p.serve(0)
		if p.cliAcks != 1 {
			t.Fatalf("%d ACKs alone after FlushAcks, want 1", p.cliAcks)
		}
		if pr := p.srv.lookup(PeerID{Addr: p.ca}); pr == nil || pr.sndUna != pr.sndNxt {
			t.Fatal("the server's responses are not all acknowledged")
		}
	})
	t.Run("held until due", func(t *testing.T) {
		p := newPair(t, Config{}, Config{})
		p.request(64)
		p.serve(100)
		if p.cliAcks != 0 {
			t.Fatalf("%d ACKs alone at once, want the ACK held", p.cliAcks)
		}
		_, _, next := p.cli.Poll(p.now, nil)
		if next != p.now.Add(MaxAckDelay) {
			t.Fatalf("client asks for Poll in %v, want %v", next.Sub(p.now), MaxAckDelay)
		}
		p.now = next
		p.serve(0)
		if p.cliAcks != 1 {
			t.Fatalf("%d ACKs alone at the deadline, want 1", p.cliAcks)
		}
	})
	t.Run("immediate", func(t *testing.T) {
		p := newPair(t, Config{ImmediateAcks: true}, Config{})
		for range 5 {
			p.request(64)
			p.serve(100)
			p.now = p.now.Add(20 * time.Microsecond)
		}
		// Every response is acknowledged on its own at the client's next
		// Poll, before the next request is even sent.
		if p.cliAcks != 5 || p.cliRiding != 0 || p.srvAcks != 0 || p.srvRiding != 5 {
			t.Fatalf("client: %d ACKs alone, %d riding; server: %d alone, %d riding", p.cliAcks, p.cliRiding, p.srvAcks, p.srvRiding)
		}
	})
	t.Run("multi-packet response", func(t *testing.T) {
		p := newPair(t, Config{MTU: 1000}, Config{MTU: 1000})
		p.request(64)
		if got := p.serve(3000); len(got) != 4 {
			t.Fatalf("%d fragments, want 4", len(got))
		}
		// Full-size packets have no room for the server's ACK of the
		// request: it goes alone (and first), not after the data.
		if p.srvAcks != 1 || p.srvRiding != 0 || p.srvFirst != wire.OpAck {
			t.Fatalf("server: %d ACKs alone, %d riding, first sent %v; want 1, 0 and the ACK", p.srvAcks, p.srvRiding, p.srvFirst)
		}
		// Nothing is held: the ACK of a stream of packets goes at once.
		if p.cliAcks != 1 {
			t.Fatalf("%d ACKs alone after a 4-packet response, want 1", p.cliAcks)
		}
		if pr := p.cli.lookup(PeerID{Addr: p.sa}); pr == nil || pr.ackPending {
			t.Fatal("an ACK is still pending")
		}
	})
}

// TestPiggybackedAckHostile: an ACK riding on data is checked as an ACK
// packet is: one that acknowledges what was never sent completes nothing,
// while the data it rides on is delivered; a frame that does not decode
// drops the packet.
func TestPiggybackedAckHostile(t *testing.T) {
	e, _ := New(Config{Seed: 5})
	to := netip.MustParseAddrPort("10.0.0.9:9")
	h := wire.Header{Op: wire.OpRead}
	if _, err := e.Send(PeerID{Addr: to}, &h, make([]byte, 8), 7); err != nil {
		t.Fatal(err)
	}
	out, _, _ := e.Poll(t0, nil)
	var sent wire.Header
	if _, _, err := wire.Parse(out[0].Buf, &sent); err != nil {
		t.Fatal(err)
	}
	psn := sent.PSN
	ride := func(a wire.Ack, payload []byte) []byte {
		dh := wire.Header{Version: wire.Version, Op: wire.OpWrite, PSN: 100, AckBase: 100, MsgID: 9, MsgLen: uint32(len(payload))}
		pkt, err := wire.AppendPacketAck(nil, &dh, payload, &a, true)
		if err != nil {
			t.Fatal(err)
		}
		return pkt
	}
	// Forged: acknowledges 2^31 PSNs ahead of what was sent.
	d, ok := e.Receive(t0, netio.Datagram{Addr: to, Buf: ride(wire.Ack{Cum: psn + 1<<31, Window: 1024}, []byte("data"))}, Admission{})
	if !ok || string(d.Payload) != "data" || d.Header.Flags&wire.FlagAck != 0 || d.Header.Len != 4 {
		t.Fatalf("data under a forged ACK: ok %v, payload %q, header %+v", ok, d.Payload, d.Header)
	}
	if _, comps, _ := e.Poll(t0, nil); len(comps) != 0 {
		t.Fatalf("a forged ACK riding on data completed %+v", comps)
	}
	// A frame that says it has a SACK block and holds none: the packet
	// is malformed.
	bad := ride(wire.Ack{Cum: psn + 1, Window: 1024}, []byte("more"))
	bad[len(bad)-4] = 1 // the frame's NBlocks
	wire.Seal(bad)
	before := e.Stats().Malformed
	if _, ok := e.Receive(t0, netio.Datagram{Addr: to, Buf: bad}, Admission{}); ok || e.Stats().Malformed != before+1 {
		t.Fatalf("bad frame: delivered %v, Malformed %d (was %d)", ok, e.Stats().Malformed, before)
	}
	// The real ACK, riding on data, completes the request.
	if _, ok := e.Receive(t0, netio.Datagram{Addr: to, Buf: ride(wire.Ack{Cum: psn + 1, Window: 1024}, []byte("last"))}, Admission{}); ok {
		t.Fatal("a duplicate data packet was delivered again")
	}
	if _, comps, _ := e.Poll(t0, nil); len(comps) != 1 || comps[0].Token != 7 || comps[0].Err != nil {
		t.Fatalf("completions %+v", comps)
	}
}

// TestGatherShared: with SetGather, a SendFragmentShared payload goes out
// as the datagram's Tail — the same bytes, not a copy — after a header of
// its own; joined, it is the packet the receiver takes. Plain Sends and
// the engine without SetGather still send whole packets.
func TestGatherShared(t *testing.T) {
	a, _ := New(Config{MTU: 1500, Seed: 1})
	c, _ := New(Config{MTU: 1500, Seed: 2})
	aAddr := netip.MustParseAddrPort("10.0.0.1:1")
	cAddr := netip.MustParseAddrPort("10.0.0.2:1")
	// Above wire's minimum length for header-only checksums.
	payload := make([]byte, 1200)
	for i := range payload {
		payload[i] = byte(i)
	}
	now := time.Unix(1, 0)
	for _, gather := range []bool{true, false} {
		a.SetGather(gather)
		id := uint64(7)
		if gather {
			id = 8
		}
		h := wire.Header{Op: wire.OpWrite, MsgID: id, MsgLen: 1200}
		if _, err := a.SendFragmentShared(PeerID{Addr: cAddr}, &h, payload, wire.PayloadCRC(payload), 0); err != nil {
			t.Fatal(err)
		}
		out, _, _ := a.Poll(now, nil)
		if len(out) != 1 {
			t.Fatalf("gather=%v: %d datagrams", gather, len(out))
		}
		d := out[0]
		if gather != (len(d.Tail) > 0) || gather && (len(d.Buf) != wire.HeaderLen || &d.Tail[0] != &payload[0]) {
			t.Fatalf("gather=%v: Buf %d bytes, Tail %d bytes", gather, len(d.Buf), len(d.Tail))
		}
		del, ok := c.Receive(now, netio.Datagram{Addr: aAddr, Buf: d.Joined(nil)}, Admission{})
		if !ok || !bytes.Equal(del.Payload, payload) || del.Header.MsgID != id {
			t.Fatalf("gather=%v: delivered %v, %d bytes", gather, ok, len(del.Payload))
		}
		now = now.Add(time.Millisecond)
	}
	// A plain Send is copied even with SetGather.
	a.SetGather(true)
	h := wire.Header{Op: wire.OpWrite}
	if _, err := a.Send(PeerID{Addr: cAddr}, &h, payload, 0); err != nil {
		t.Fatal(err)
	}
	out, _, _ := a.Poll(now, nil)
	for _, d := range out {
		if len(d.Tail) > 0 {
			t.Fatalf("a plain Send went out with a Tail")
		}
	}
}
