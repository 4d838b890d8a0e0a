package memd

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// sealed encodes h with payload and seals the checksum without any of
// wire.AppendPacket's checks, so that h may hold values Parse rejects;
// tag, if not nil, is appended after the checksummed part.
func sealed(h wire.Header, payload, tag []byte) []byte {
	h.Version = wire.Version
	h.Len = uint16(len(payload))
	pkt := make([]byte, wire.HeaderLen+len(payload), wire.HeaderLen+len(payload)+len(tag))
	h.Encode(pkt)
	copy(pkt[wire.HeaderLen:], payload)
	wire.Seal(pkt)
	return append(pkt, tag...)
}

// hostileDatagrams returns datagrams that must each be dropped and counted
// as Malformed (bad) or Unexpected (odd), plus well-formed requests with
// hostile values that the server must execute or refuse without harm
// (valid).
func hostileDatagrams(rng *rand.Rand) (bad, odd, valid [][]byte) {
	// Random bytes: a random datagram passes the version and checksum
	// checks with probability about 2^-40.
	for range 2000 {
		d := make([]byte, rng.IntN(2*wire.HeaderLen+200))
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		if len(d) > 0 && rng.IntN(2) == 0 {
			d[0] = wire.Version // get past the version check more often
		}
		bad = append(bad, d)
	}
	// Valid packets of every opcode, cut short.
	for range 1000 {
		h := wire.Header{
			Op: wire.Opcode(1 + rng.IntN(int(wire.OpNop))), MsgID: rng.Uint64(),
			Key: rng.Uint64(), Addr: rng.Uint64(), Operand1: rng.Uint64(), PSN: rng.Uint32(),
		}
		payload := make([]byte, rng.IntN(512))
		h.MsgLen = uint32(len(payload))
		pkt, err := wire.AppendPacket(nil, &h, payload)
		if err != nil {
			panic(err)
		}
		bad = append(bad, pkt[:rng.IntN(len(pkt))])
	}
	// Checksum-valid packets with fields Parse refuses.
	base := func() wire.Header {
		return wire.Header{Op: wire.OpWrite, MsgID: rng.Uint64(), Key: rng.Uint64(), PSN: rng.Uint32(), MsgLen: 64}
	}
	payload := make([]byte, 64)
	for range 200 {
		h := base()
		h.Op = wire.Opcode(int(wire.OpData) + 1 + rng.IntN(0xff-int(wire.OpData))) // past the last data opcode
		if h.Op == wire.OpAck || h.Op == wire.OpNack || h.Op == wire.OpHandshake {
			h.Op = 0xff
		}
		bad = append(bad, sealed(h, payload, nil))

		h = base()
		h.Mode = wire.Mode(5 + rng.IntN(251))
		bad = append(bad, sealed(h, payload, nil))

		h = base()
		h.Flags = wire.Flags(1 << (6 + rng.IntN(2))) // undefined flags
		bad = append(bad, sealed(h, payload, nil))

		h = base()
		h.Offset = 1 + uint32(rng.IntN(1<<20)) // Offset+Len beyond MsgLen
		bad = append(bad, sealed(h, payload, nil))

		h = base()
		h.Hop, h.Copies, h.SASeq = 1, uint16(rng.Uint32()), rng.Uint32()
		bad = append(bad, sealed(h, payload, nil))

		// An ACK whose frame does not decode.
		h = base()
		h.Op, h.MsgLen = wire.OpAck, 0
		bad = append(bad, sealed(h, []byte{0xff, 0xff, 0xff}, nil))

		// Well formed, but nothing this node accepts.
		h = base()
		h.Flags = wire.FlagAuth
		odd = append(odd, sealed(h, payload, make([]byte, wire.TagLen)))
		h = base()
		h.Mode = wire.ModeMulticast
		odd = append(odd, sealed(h, payload, nil))

	}
	// Well formed requests with hostile values, in sequence as one peer
	// sends them (the transport drops PSNs outside its window): a piece of
	// a huge message, and a read near 2^64 with a random key.
	psn := rng.Uint32()
	for i := range 400 {
		h := base()
		h.PSN, h.AckBase = psn+uint32(i), psn
		if i%2 == 0 {
			h.MsgLen = 1<<32 - 1
			valid = append(valid, sealed(h, payload, nil))
		} else {
			h.Op, h.MsgLen, h.Addr, h.Operand1 = wire.OpRead, 0, ^uint64(0)-3, 1<<40
			valid = append(valid, sealed(h, nil, nil))
		}
	}
	rng.Shuffle(len(bad), func(i, j int) { bad[i], bad[j] = bad[j], bad[i] })
	return bad, odd, valid
}

// TestHostileInput throws thousands of garbage, truncated and
// checksum-valid but invalid datagrams at a server from a raw UDP socket
// and checks that each is counted where it belongs and that the server
// still serves a client correctly.
func TestHostileInput(t *testing.T) {
	const size = 1 << 20
	srv := start(t, Config{Size: size})
	key := srv.Regions()[0].Key
	ctx := testCtx(t)
	before := srv.Stats()

	raw, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	bad, odd, valid := hostileDatagrams(rand.New(rand.NewPCG(seed, 1)))

	// Send in bursts and wait for the server to have received each burst,
	// so that a full socket buffer cannot lose any and the counts are
	// exact.
	sent := uint64(0)
	send := func(ds [][]byte) {
		t.Helper()
		for len(ds) > 0 {
			n := min(len(ds), 128)
			for _, d := range ds[:n] {
				if _, err := raw.Write(d); err != nil {
					t.Fatal(err)
				}
			}
			sent += uint64(n)
			ds = ds[n:]
			waitFor(t, "server to receive the datagrams", func() bool {
				return srv.Stats().UDP.DatagramsReceived-before.UDP.DatagramsReceived >= sent
			})
		}
	}
	send(bad)
	send(odd)
	send(valid)

	// The server must still serve a client correctly.
	r := dial(t, ctx, srv)
	msg := []byte("still alive after the storm")
	if err := r.Write(ctx, key, size-uint64(len(msg)), msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if err := r.Read(ctx, key, size-uint64(len(msg)), got); err != nil || string(got) != string(msg) {
		t.Fatalf("read back %q, %v", got, err)
	}
	if old, err := r.FetchAdd(ctx, key, 0, 7); err != nil || old != 0 {
		t.Fatalf("fetch-add: old %d, %v", old, err)
	}

	after := srv.Stats()
	tb, ta := before.Node.Transport, after.Node.Transport
	if d := ta.Malformed - tb.Malformed; d != uint64(len(bad)) {
		t.Errorf("Malformed rose by %d, want %d", d, len(bad))
	}
	if d := ta.Unexpected - tb.Unexpected; d != uint64(len(odd)) {
		t.Errorf("Unexpected rose by %d, want %d", d, len(odd))
	}
	// Of the valid hostile requests, the huge-message pieces never
	// complete; every read is refused (bad key or out of bounds).
	if d := after.Node.Server.RequestsRefused - before.Node.Server.RequestsRefused; d != uint64(len(valid)/2) {
		t.Errorf("RequestsRefused rose by %d, want %d", d, len(valid)/2)
	}
	t.Logf("after: %+v", after)
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHostileFloodDuringWork: while a client writes and reads back
// verified data, hostile peers on 32 fresh source ports flood the node
// with requests they never acknowledge (fresh ids, reads of a whole
// datagram with the node's own key, pieces of never-finished writes,
// a forged reply-to the node must ignore from anyone but its switch). The
// client's operations keep working, and pool requests that did not come
// from the node's switch are dropped.
func TestHostileFloodDuringWork(t *testing.T) {
	const size = 1 << 20
	srv := start(t, Config{Size: size})
	key := srv.Regions()[0].Key
	ctx := testCtx(t)
	r := dial(t, ctx, srv)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))

	// 6000 datagrams in all: a third of them reads whose answers wait
	// for acknowledgements that never come, fewer than the node's send
	// queue holds (a per-peer share of it is the transport's bound).
	stop := make(chan struct{})
	flooded := make(chan int)
	frng := rand.New(rand.NewPCG(seed, 3))
	go func() {
		n := 0
		defer func() { flooded <- n }()
		var socks []*net.UDPConn
		for range 32 {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(srv.Addr()))
			if err != nil {
				return
			}
			defer c.Close()
			socks = append(socks, c)
		}
		psn := make([]uint32, len(socks))
		for i := range psn {
			psn[i] = frng.Uint32()
		}
		for round := 0; n < 6000; round++ {
			select {
			case <-stop:
				return
			default:
			}
			for i, c := range socks {
				h := wire.Header{Version: wire.Version, Op: wire.OpRead, MsgID: frng.Uint64(), Key: key, Addr: uint64(frng.IntN(size - 8192)),
					Operand1: 8000, PSN: psn[i], AckBase: psn[i]}
				var payload []byte
				switch round % 3 {
				case 1: // a piece of a message that never completes (a wrong key)
					h.Op, h.Operand1, h.MsgLen, h.Key = wire.OpWrite, 0, 1<<30, frng.Uint64()|1
					payload = make([]byte, 512)
				case 2: // a pool request with a forged reply-to, not from a switch
					h.Mode, h.Flags, h.PSN, h.AckBase = wire.ModePool, wire.FlagReplyTo, 0, 0
					payload = wire.AppendReplyTo(nil, netip.MustParseAddrPort("192.0.2.1:9"))
				}
				if h.MsgLen == 0 {
					h.MsgLen = uint32(len(payload))
				}
				pkt, err := wire.AppendPacket(nil, &h, payload)
				if err != nil {
					return
				}
				if h.Mode != wire.ModePool {
					psn[i]++
				}
				if _, err := c.Write(pkt); err == nil {
					n++
				}
			}
		}
	}()

	for i := range 200 {
		msg := make([]byte, 1+rng.IntN(4096))
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		off := uint64(rng.IntN(size - len(msg)))
		if err := r.Write(ctx, key, off, msg); err != nil {
			close(stop)
			t.Fatalf("write %d during the flood: %v", i, err)
		}
		got := make([]byte, len(msg))
		if err := r.Read(ctx, key, off, got); err != nil || string(got) != string(msg) {
			close(stop)
			t.Fatalf("read %d during the flood: %v (equal %v)", i, err, string(got) == string(msg))
		}
	}
	close(stop)
	n := <-flooded
	st := srv.Stats()
	t.Logf("flood of %d datagrams; node: %+v", n, st)
	if n == 0 {
		t.Fatal("the flood sent nothing")
	}
	if st.Node.Server.Pool.Served != 0 || st.Node.Server.Pool.Dropped == 0 {
		t.Fatalf("node served %d pool requests that did not come from a switch (dropped %d)", st.Node.Server.Pool.Served, st.Node.Server.Pool.Dropped)
	}
}
