package wire

import (
	"bytes"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts
// re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	h := sampleHeader()
	pkt, _ := AppendPacket(nil, &h, []byte("payload"))
	f.Add(pkt)
	f.Add(pkt[:HeaderLen])
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
