package wire

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func sampleHeader() Header {
	return Header{
		Version: Version, Op: OpVector, Mode: ModeUnicast, Flags: FlagResp | FlagRetx,
		Group: 7, Src: 3, Dst: 9, SAID: 0, PSN: 0xfffffff0, AckBase: 0xffffffe0,
		MsgID: 0x0102030405060708, Offset: 8192, MsgLen: 9000,
		Status: StatusOK, Dtype: DtypeF64, Alu: AluMax,
		Addr: 1 << 40, Key: 0xdeadbeefcafef00d, Operand1: 11, Operand2: 12, TS: 123456789,
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := sampleHeader()
	payload := bytes.Repeat([]byte{0xab}, 100)
	pkt, err := AppendPacket(nil, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkt) != HeaderLen+100 || h.PacketLen() != len(pkt) {
		t.Fatalf("len %d", len(pkt))
	}
	var g Header
	p, tag, err := Parse(pkt, &g)
	if err != nil {
		t.Fatal(err)
	}
	if g != h {
		t.Fatalf("decoded %+v\nwant %+v", g, h)
	}
	if !bytes.Equal(p, payload) || tag != nil {
		t.Fatal("payload mismatch")
	}
}

func TestParseRejects(t *testing.T) {
	h := sampleHeader()
	good, _ := AppendPacket(nil, &h, make([]byte, 64))
	mutate := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	reseal := func(f func(h *Header)) []byte {
		h2 := sampleHeader()
		f(&h2)
		b, _ := AppendPacket(nil, &h2, make([]byte, 64))
		return b
	}
	cases := []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"short header", good[:HeaderLen-1], ErrShort},
		{"truncated payload", good[:len(good)-1], ErrShort},
		{"trailing bytes", append(append([]byte(nil), good...), 0), ErrLength},
		{"version", mutate(func(b []byte) []byte { b[0] = 2; return b }), ErrVersion},
		{"bit flip header", mutate(func(b []byte) []byte { b[50] ^= 1; return b }), ErrChecksum},
		{"bit flip payload", mutate(func(b []byte) []byte { b[HeaderLen+3] ^= 0x80; return b }), ErrChecksum},
		{"bad opcode", reseal(func(h *Header) { h.Op = 0x7f }), ErrOpcode},
		{"bad mode", reseal(func(h *Header) { h.Mode = 9 }), ErrMode},
		{"bad flags", reseal(func(h *Header) { h.Flags = 0x80 }), ErrFlags},
		{"reserved", reseal(func(h *Header) { h.SASeq = 1 }), ErrReserved},
		{"hop", reseal(func(h *Header) { h.Hop = 1 }), ErrReserved},
		{"offset beyond message", reseal(func(h *Header) { h.Offset = 9000 }), ErrLength},
		{"auth without tag", reseal(func(h *Header) { h.Flags |= FlagAuth }), ErrShort},
		{"reply-to outside pool mode", reseal(func(h *Header) { h.Flags |= FlagReplyTo }), ErrFlags},
		{"ack riding on a group's data", reseal(func(h *Header) { h.Flags |= FlagAck; h.Group = 3 }), ErrFlags},
		{"ack riding on multicast", reseal(func(h *Header) { h.Flags |= FlagAck; h.Group, h.Mode = 0, ModeMulticast }), ErrFlags},
		{"ack riding on a pool message", reseal(func(h *Header) { h.Flags |= FlagAck; h.Group, h.Mode = 0, ModePool }), ErrFlags},
		{"ack riding on an ACK", func() []byte {
			h2 := Header{Version: Version, Op: OpAck, Flags: FlagAck}
			b, _ := AppendPacket(nil, &h2, make([]byte, AckFixedLen))
			return b
		}(), ErrFlags},
		{"ack riding, too short", func() []byte {
			h2 := Header{Version: Version, Op: OpWrite, Flags: FlagAck, MsgLen: 8}
			b, _ := AppendPacket(nil, &h2, make([]byte, AckFixedLen-1))
			return b
		}(), ErrFlags},
		{"reply-to too short", func() []byte {
			h2 := sampleHeader()
			h2.Mode, h2.Flags, h2.Offset, h2.MsgLen = ModePool, FlagReplyTo, 0, ReplyToLen-1
			b, _ := AppendPacket(nil, &h2, make([]byte, ReplyToLen-1))
			return b
		}(), ErrFlags},
	}
	for _, c := range cases {
		var g Header
		_, _, err := Parse(c.pkt, &g)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
}

func TestAuthTagCarried(t *testing.T) {
	h := sampleHeader()
	h.Flags |= FlagAuth
	h.SAID = 42
	pkt, _ := AppendPacket(nil, &h, []byte("hello"))
	tag := bytes.Repeat([]byte{7}, TagLen)
	pkt = append(pkt, tag...)
	var g Header
	p, gt, err := Parse(pkt, &g)
	if err != nil || string(p) != "hello" || !bytes.Equal(gt, tag) || g.SAID != 42 {
		t.Fatalf("err=%v p=%q tag=%x", err, p, gt)
	}
}

// A sealed packet's CRC32C covers its header only (the tag covers the
// payload): a changed header byte fails the checksum, a changed payload
// byte is left to the tag.
func TestAuthChecksumCoversHeader(t *testing.T) {
	h := sampleHeader()
	h.Flags |= FlagAuth
	h.SAID = 42
	pkt, _ := AppendPacket(nil, &h, []byte("hello"))
	pkt = append(pkt, make([]byte, TagLen)...)
	var g Header
	b := bytes.Clone(pkt)
	b[HeaderLen] ^= 1
	if _, _, err := Parse(b, &g); err != nil {
		t.Fatalf("payload byte changed: %v, want the packet to parse", err)
	}
	b = bytes.Clone(pkt)
	b[50] ^= 1
	if _, _, err := Parse(b, &g); !errors.Is(err, ErrChecksum) {
		t.Fatalf("header byte changed: %v, want %v", err, ErrChecksum)
	}
}

// AppendPacketUnchecked leaves the checksum out: Parse refuses the packet,
// ParseVerified (for what a security layer opened) takes it and still
// checks everything else.
func TestParseVerified(t *testing.T) {
	h := sampleHeader()
	pkt, err := AppendPacketUnchecked(nil, &h, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	var g Header
	if _, _, err := Parse(pkt, &g); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Parse: %v, want %v", err, ErrChecksum)
	}
	p, _, err := ParseVerified(pkt, &g)
	if err != nil || string(p) != "hello" || g != h {
		t.Fatalf("ParseVerified: %q, %v", p, err)
	}
	pkt[1] = 0xee // unknown opcode
	if _, _, err := ParseVerified(pkt, &g); !errors.Is(err, ErrOpcode) {
		t.Fatalf("ParseVerified of a bad opcode: %v, want %v", err, ErrOpcode)
	}
	if _, _, err := ParseVerified(pkt[:HeaderLen+2], &g); !errors.Is(err, ErrShort) {
		t.Fatalf("ParseVerified of a cut packet: %v, want %v", err, ErrShort)
	}
}

func TestAckRoundTrip(t *testing.T) {
	a := Ack{Cum: 0xfffffffe, Window: 1024, EchoTS: 99, AckDelay: 5, NBlocks: 3}
	a.Blocks[0] = SackBlock{0xffffffff, 2}
	a.Blocks[1] = SackBlock{5, 9}
	a.Blocks[2] = SackBlock{20, 21}
	b := make([]byte, a.EncodedLen())
	a.Encode(b)
	var g Ack
	if err := g.Decode(b); err != nil {
		t.Fatal(err)
	}
	if g != a {
		t.Fatalf("got %+v want %+v", g, a)
	}
	bad := [][]byte{
		nil, b[:AckFixedLen-1], b[:len(b)-1], append(append([]byte(nil), b...), 0),
	}
	for i, x := range bad {
		if err := g.Decode(x); !errors.Is(err, ErrAckFrame) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	// A block at or below Cum, or empty, is malformed.
	a.Blocks[1] = SackBlock{9, 9}
	a.Encode(b)
	if err := g.Decode(b); !errors.Is(err, ErrAckFrame) {
		t.Errorf("empty block accepted")
	}
}

func TestStatusIsError(t *testing.T) {
	var err error = StatusBadKey
	if !errors.Is(err, StatusBadKey) || errors.Is(err, StatusOutOfBounds) {
		t.Fatal("status errors.Is")
	}
	if Status(200).Known() || !StatusBusy.Known() {
		t.Fatal("Known")
	}
	_ = Status(200).Error()
}

func TestSeqLess(t *testing.T) {
	if !SeqLess(0xffffffff, 0) || SeqLess(0, 0xffffffff) || SeqLess(5, 5) {
		t.Fatal("SeqLess wrap")
	}
}

func TestCodecAllocs(t *testing.T) {
	h := sampleHeader()
	h.Offset = 0
	buf := make([]byte, 2048)
	payload := make([]byte, 1024)
	var g Header
	n := testing.AllocsPerRun(100, func() {
		pkt, _ := AppendPacket(buf, &h, payload)
		_, _, _ = Parse(pkt, &g)
		var a Ack
		a.NBlocks = 2
		a.Blocks[0] = SackBlock{1, 2}
		a.Blocks[1] = SackBlock{3, 4}
		k := a.Encode(buf)
		_ = a.Decode(buf[:k])
	})
	if n != 0 {
		t.Fatalf("%v allocs per run", n)
	}
}

func TestRandomCorruptionNeverPanics(t *testing.T) {
	seed := uint64(1)
	r := rand.New(rand.NewPCG(seed, 0))
	h := sampleHeader()
	good, _ := AppendPacket(nil, &h, make([]byte, 300))
	var g Header
	for i := 0; i < 20000; i++ {
		b := append([]byte(nil), good[:r.IntN(len(good)+1)]...)
		for j := r.IntN(4); j >= 0 && len(b) > 0; j-- {
			b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
		}
		if _, _, err := Parse(b, &g); err == nil && len(b) != len(good) {
			t.Fatalf("seed %d: accepted a truncated packet", seed)
		}
	}
}

func BenchmarkEncodeParse1K(b *testing.B) {
	h := sampleHeader()
	h.Offset = 0
	buf := make([]byte, 2048)
	payload := make([]byte, 1024)
	var g Header
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		pkt, _ := AppendPacket(buf, &h, payload)
		if _, _, err := Parse(pkt, &g); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReplyTo(t *testing.T) {
	for _, s := range []string{"10.9.0.3:7000", "[fd00::5]:65535", "127.0.0.1:1"} {
		ap := netip.MustParseAddrPort(s)
		b := AppendReplyTo([]byte("data"), ap)
		if len(b) != 4+ReplyToLen {
			t.Fatalf("%s: trailer of %d bytes", s, len(b)-4)
		}
		p, got, err := SplitReplyTo(b)
		if err != nil || string(p) != "data" || got != ap {
			t.Errorf("%s: got %q %v %v", s, p, got, err)
		}
	}
	for _, bad := range [][]byte{
		make([]byte, ReplyToLen-1),                               // short
		make([]byte, ReplyToLen),                                 // unspecified address
		AppendReplyTo(nil, netip.MustParseAddrPort("1.2.3.4:0")), // zero port
	} {
		if _, _, err := SplitReplyTo(bad); !errors.Is(err, ErrReplyTo) {
			t.Errorf("%x: err %v, want ErrReplyTo", bad, err)
		}
	}
	// A pool request with its trailer parses.
	h := Header{Version: Version, Op: OpRead, Mode: ModePool, Flags: FlagReplyTo, MsgLen: ReplyToLen}
	pkt, _ := AppendPacket(nil, &h, AppendReplyTo(nil, netip.MustParseAddrPort("10.0.0.1:9")))
	var g Header
	if _, _, err := Parse(pkt, &g); err != nil || g.Mode != ModePool {
		t.Fatalf("pool request with reply-to: %v", err)
	}
}

func TestSplitChain(t *testing.T) {
	hops := AppendChain(nil, []ChainHop{{Addr: 64, Op: ChainLoad}, {Addr: 1 << 40, Op: ChainApply}, {Addr: 8, Op: ChainStore}})
	h := Header{Op: OpChain, Mode: ModePool, Operand1: 16, Operand2: 3}
	if hs, data, err := SplitChain(&h, hops); err != nil || data != nil || len(hs) != 3*ChainHopLen || ChainHopAt(hs, 1) != (ChainHop{Addr: 1 << 40, Op: ChainApply}) {
		t.Fatalf("load hop: %v", err)
	}
	h.Hop = 1
	withData := append(append([]byte(nil), hops...), make([]byte, 16)...)
	if _, data, err := SplitChain(&h, withData); err != nil || len(data) != 16 {
		t.Fatalf("apply hop: %v", err)
	}
	bad := func(name string, h Header, p []byte) {
		t.Helper()
		if _, _, err := SplitChain(&h, p); !errors.Is(err, ErrChain) {
			t.Errorf("%s: %v, want ErrChain", name, err)
		}
	}
	bad("no hops", Header{Operand1: 16}, hops)
	bad("too many hops", Header{Operand1: 16, Operand2: MaxChainHops + 1}, hops)
	bad("hop past the list", Header{Operand1: 16, Operand2: 3, Hop: 3}, hops)
	bad("short list", Header{Operand1: 16, Operand2: 3}, hops[:40])
	bad("zero length", Header{Operand2: 3}, hops)
	bad("data of the wrong length", Header{Operand1: 16, Operand2: 3, Hop: 1}, append(append([]byte(nil), hops...), 1, 2, 3))
	bad("load with data", Header{Operand1: 16, Operand2: 3}, withData)
	bad("apply without data", Header{Operand1: 16, Operand2: 3, Hop: 1}, hops)
	odd := append([]byte(nil), hops...)
	odd[8] = 9
	bad("unknown op", Header{Operand1: 16, Operand2: 3}, odd)
	odd = append([]byte(nil), hops...)
	odd[15] = 1
	bad("padding", Header{Operand1: 16, Operand2: 3}, odd)
	odd = append([]byte(nil), hops...)
	odd[ChainHopLen+9] = 7
	bad("coefficient on an apply", Header{Operand1: 16, Operand2: 3}, odd)
	gf := AppendChain(nil, []ChainHop{{Addr: 64, Op: ChainDelta}, {Addr: 128, Op: ChainGFAccumulate, Coef: 0x8e}})
	gh := Header{Operand1: 4, Operand2: 2, Hop: 1}
	if hs, _, err := SplitChain(&gh, append(append([]byte(nil), gf...), 1, 2, 3, 4)); err != nil || ChainHopAt(hs, 1) != (ChainHop{Addr: 128, Op: ChainGFAccumulate, Coef: 0x8e}) {
		t.Fatalf("gfaccumulate hop: %v", err)
	}
	bad("delta without data", Header{Operand1: 4, Operand2: 2}, gf)
	odd = append([]byte(nil), gf...)
	odd[ChainHopLen+9] = 0
	bad("gfaccumulate with coefficient zero", Header{Operand1: 4, Operand2: 2, Hop: 1}, append(odd, 1, 2, 3, 4))
	for _, c := range []ChainHop{{Op: ChainGFAccumulate}, {Op: ChainStore, Coef: 1}, {Op: chainOpCount}} {
		if err := c.Check(); !errors.Is(err, ErrChain) {
			t.Errorf("%+v: %v, want ErrChain", c, err)
		}
	}
	// CHAIN outside pool mode, and Hop on other opcodes, do not parse.
	for _, h := range []Header{{Version: Version, Op: OpChain}, {Version: Version, Op: OpRead, Mode: ModePool, Hop: 1}} {
		pkt, _ := AppendPacket(nil, &h, nil)
		var g Header
		if _, _, err := Parse(pkt, &g); err == nil {
			t.Errorf("%+v parsed", h)
		}
	}
}

func TestOptimParams(t *testing.T) {
	p := OptimParams{Algo: OptimAdam, Step: 7, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	b := AppendOptim(nil, &p)
	if len(b) != OptimParamsLen {
		t.Fatalf("%d bytes", len(b))
	}
	if got, err := ParseOptim(append(b, 1, 2, 3, 4)); err != nil || got != p {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for name, q := range map[string]OptimParams{
		"algo":      {Algo: 3, LR: 1},
		"lr":        {Algo: OptimSGD, LR: -1},
		"beta":      {Algo: OptimSGD, LR: 1, Beta1: 1},
		"adam eps":  {Algo: OptimAdam, LR: 1, Step: 1},
		"adam step": {Algo: OptimAdam, LR: 1, Eps: 1e-8},
		"nan":       {Algo: OptimSGD, LR: float32(math.NaN())},
	} {
		if _, err := ParseOptim(AppendOptim(nil, &q)); !errors.Is(err, ErrOptim) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ParseOptim(b[:31]); !errors.Is(err, ErrOptim) {
		t.Error("short: no error")
	}
	b[30] = 1
	if _, err := ParseOptim(b); !errors.Is(err, ErrOptim) {
		t.Error("padding: no error")
	}
}

// TestAckRiding: a data packet carries an ACK frame after its payload;
// the frame's length does not count against the message (Offset+data
// within MsgLen); SplitAck gives both back; frames with SACK blocks
// neither go in nor come out.
func TestAckRiding(t *testing.T) {
	a := Ack{Cum: 77, Window: 1024, EchoTS: 123456789, AckDelay: 4000}
	h := Header{Version: Version, Op: OpRead, Flags: FlagResp, MsgID: 5, Offset: 0, MsgLen: 10, TS: 9}
	pkt, err := AppendPacketAck(nil, &h, []byte("0123456789"), &a, true)
	if err != nil {
		t.Fatal(err)
	}
	var g Header
	payload, _, err := Parse(pkt, &g)
	if err != nil {
		t.Fatal(err)
	}
	if g.Flags != FlagResp|FlagAck || int(g.Len) != 10+AckFixedLen {
		t.Fatalf("header flags %v, Len %d", g.Flags, g.Len)
	}
	var b Ack
	data, err := SplitAck(payload, &b)
	if err != nil || string(data) != "0123456789" || b.Cum != a.Cum || b.Window != a.Window || b.EchoTS != a.EchoTS || b.AckDelay != a.AckDelay || b.NBlocks != 0 {
		t.Fatalf("SplitAck: %q, %+v, %v", data, b, err)
	}
	// Anycast streams (engine to engine through the switch) carry them
	// too, in any group; EngineToEngine says which streams do.
	ah := h
	ah.Group, ah.Mode = 9, ModeAnycast
	apkt, err := AppendPacketAck(nil, &ah, []byte("0123456789"), &a, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Parse(apkt, &g); err != nil || g.Flags&FlagAck == 0 {
		t.Fatalf("anycast packet with a riding ACK: %v, flags %v", err, g.Flags)
	}
	for _, c := range []struct {
		m    Mode
		g    uint32
		want bool
	}{{ModeUnicast, 0, true}, {ModeAnycast, 0, true}, {ModeAnycast, 7, true}, {ModeUnicast, 7, false}, {ModeMulticast, 7, false}, {ModeAggregate, 7, true}, {ModePool, 0, false}} {
		if got := EngineToEngine(c.m, c.g); got != c.want {
			t.Errorf("EngineToEngine(%v, %d) = %v, want %v", c.m, c.g, got, c.want)
		}
	}
	// Unchecked: no CRC, for a security layer to seal.
	u, _ := AppendPacketAck(nil, &h, []byte("0123456789"), &a, false)
	if _, _, err := ParseVerified(u, &g); err != nil {
		t.Fatalf("unchecked: %v", err)
	}
	a.NBlocks, a.Blocks[0] = 1, SackBlock{Start: 80, End: 81}
	if _, err := AppendPacketAck(nil, &h, nil, &a, true); !errors.Is(err, ErrAckFrame) {
		t.Fatalf("a frame with SACK blocks went in: %v", err)
	}
	frame := make([]byte, a.EncodedLen())
	a.Encode(frame)
	frame = frame[:AckFixedLen] // says one block, holds none
	if _, err := SplitAck(append([]byte("xy"), frame...), &b); !errors.Is(err, ErrAckFrame) {
		t.Fatalf("a trailer with SACK blocks came out: %v", err)
	}
	if _, err := SplitAck(make([]byte, AckFixedLen-1), &b); !errors.Is(err, ErrAckFrame) {
		t.Fatalf("a short trailer came out: %v", err)
	}
}
