package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts
// re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	h := sampleHeader()
	pkt, _ := AppendPacket(nil, &h, []byte("payload"))
	f.Add(pkt)
	f.Add(pkt[:HeaderLen])
	fh := Header{Version: Version, Op: OpWrite, Mode: ModePool, Flags: FlagFence | FlagReplyTo}
	fp := AppendReplyTo(AppendFence([]byte("value"), Fence{ID: 2, Token: 9}), netip.MustParseAddrPort("10.0.0.1:9"))
	fh.MsgLen = uint32(len(fp))
	fpkt, _ := AppendPacket(nil, &fh, fp)
	f.Add(fpkt)
	f.Fuzz(func(t *testing.T, b []byte) {
		var g Header
		p, tag, err := Parse(b, &g)
		if err != nil {
			return
		}
		out, err := AppendPacket(nil, &g, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tag...)
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encode differs")
		}
	})
}

// FuzzAck checks that Ack.Decode never panics and round-trips.
func FuzzAck(f *testing.F) {
	a := Ack{Cum: 10, Window: 64, NBlocks: 1}
	a.Blocks[0] = SackBlock{12, 15}
	b := make([]byte, a.EncodedLen())
	a.Encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var g Ack
		if g.Decode(b) != nil {
			return
		}
		out := make([]byte, g.EncodedLen())
		g.Encode(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encode differs")
		}
	})
}

// FuzzPoolPayload checks that the pool payload parsers (reply-to and
// fence trailers, chain hop list, optimizer parameters) never panic on
// any header and payload, that a fence SplitFence accepts encodes back
// to its trailer, and that what SplitChain accepts is consistent with
// the header.
func FuzzPoolPayload(f *testing.F) {
	hops := AppendChain(nil, []ChainHop{{Addr: 8, Op: ChainLoad}, {Addr: 64, Op: ChainStore}})
	f.Add(uint64(16), uint64(2), uint8(0), AppendReplyTo(hops, netip.MustParseAddrPort("10.0.0.1:9")))
	f.Add(uint64(3), uint64(3), uint8(1), append(AppendChain(nil, []ChainHop{{Addr: 8, Op: ChainDelta},
		{Addr: 64, Op: ChainGFAccumulate, Coef: 3}, {Addr: 8, Op: ChainGFAccumulate, Coef: 1}}), 1, 2, 3))
	f.Add(uint64(0), uint64(0), uint8(0), AppendOptim(nil, &OptimParams{Algo: OptimAdam, Step: 1, LR: 1, Eps: 1}))
	f.Add(uint64(0), uint64(0), uint8(0), AppendFence([]byte("value"), Fence{ID: 3, Token: 1<<32 | 9}))
	f.Fuzz(func(t *testing.T, op1, op2 uint64, hop uint8, payload []byte) {
		h := Header{Op: OpChain, Mode: ModePool, Operand1: op1, Operand2: op2, Hop: hop}
		_, _, _ = SplitReplyTo(payload)
		if rest, fc, err := SplitFence(payload); err == nil {
			if fc.Token == 0 || !bytes.Equal(AppendFence(rest, fc), payload) {
				t.Fatalf("fence %+v does not round-trip", fc)
			}
		}
		_, _ = ParseOptim(payload)
		hs, data, err := SplitChain(&h, payload)
		if err != nil {
			return
		}
		if len(hs) != int(op2)*ChainHopLen || (data != nil && uint64(len(data)) != op1) || int(hop) >= int(op2) {
			t.Fatalf("accepted inconsistent chain: %d hop bytes, %d data bytes, header %d/%d/%d", len(hs), len(data), op1, op2, hop)
		}
		// Every hop accepted is well formed and encodes back to its bytes.
		dec := make([]ChainHop, int(op2))
		for i := range dec {
			dec[i] = ChainHopAt(hs, i)
			if err := dec[i].Check(); err != nil {
				t.Fatalf("accepted hop %d: %v", i, err)
			}
		}
		if !bytes.Equal(AppendChain(nil, dec), hs) {
			t.Fatalf("hop list does not round-trip")
		}
	})
}
