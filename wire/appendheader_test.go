package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestAppendHeader: the header AppendHeader seals, followed by the
// payload, is the packet AppendPacket builds, and parses.
func TestAppendHeader(t *testing.T) {
	payload := make([]byte, 1000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, n := range []int{0, 1, 1000} {
		h := Header{Version: Version, Op: OpData, Mode: ModeAggregate, Group: 3, Src: 1, Dst: 2, PSN: 9, MsgID: 4, MsgLen: 1000, Dtype: DtypeF32, Alu: AluAdd}
		h2 := h
		want, err := AppendPacket(nil, &h, payload[:n])
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := AppendHeader(make([]byte, 0, HeaderLen), &h2, payload[:n])
		if err != nil {
			t.Fatal(err)
		}
		got := append(append([]byte{}, hdr...), payload[:n]...)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: header and payload differ from AppendPacket's packet", n)
		}
		var ph Header
		if _, _, err := Parse(got, &ph); err != nil || ph.Len != uint16(n) {
			t.Fatalf("%d bytes: %v, Len %d", n, err, ph.Len)
		}
	}
	if _, err := AppendHeader(nil, &Header{Version: Version}, make([]byte, MaxPayload+1)); err != ErrTooLarge {
		t.Errorf("oversized payload: %v", err)
	}
}

func TestAppendHeaderAllocs(t *testing.T) {
	buf, payload := make([]byte, 0, HeaderLen), make([]byte, 1000)
	h := Header{Version: Version, Op: OpData}
	if n := testing.AllocsPerRun(10, func() { _, _ = AppendHeader(buf, &h, payload) }); n != 0 {
		t.Errorf("%v allocs", n)
	}
}

// TestAppendHeaderShared: with the payload's CRC computed once, the
// checksum AppendHeaderShared seals for any header equals AppendHeader's,
// for lengths with tables and without.
func TestAppendHeaderShared(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 100, 1023, 1024, 4096, 8904, 8905} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		pc := PayloadCRC(payload)
		for range 20 {
			h := Header{Version: Version, Op: OpData, Mode: ModeAggregate, Group: rng.Uint32(), Src: 1, Dst: uint16(rng.Uint32()),
				PSN: rng.Uint32(), AckBase: rng.Uint32(), MsgID: rng.Uint64(), MsgLen: uint32(n), TS: rng.Uint64(), Dtype: DtypeF32, Alu: AluAdd}
			h2 := h
			want, _ := AppendHeader(nil, &h, payload)
			got, err := AppendHeaderShared(nil, &h2, payload, pc)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%d bytes: %v, header differs", n, err)
			}
		}
	}
}
