package hostile

import (
	"testing"

	"github.com/ndma/ndma/wire"
)

// TestWellFormed checks that every kind passes the decoder (it is the
// stateful receive paths these datagrams are aimed at, not wire.Parse)
// and says what it claims to.
func TestWellFormed(t *testing.T) {
	g := New(Config{Seed: 1, Groups: []uint32{7}, Members: []uint16{1, 2}})
	var h wire.Header
	var a wire.Ack
	var prev wire.Header
	for i := 0; i < 10*int(Kinds+1); i++ { // a contradiction takes two datagrams
		pkt := g.Next()
		payload, _, err := wire.Parse(pkt, &h)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		switch {
		case h.Op == wire.OpAck:
			if err := a.Decode(payload); err != nil || a.NBlocks != wire.MaxSackBlocks {
				t.Fatalf("wide SACK: %v, %d blocks", err, a.NBlocks)
			}
			if span := a.Blocks[wire.MaxSackBlocks-1].End - a.Cum; span < 1<<31-64 {
				t.Fatalf("SACK blocks span %d PSNs", span)
			}
		case h.MsgID == prev.MsgID && h.MsgLen != prev.MsgLen:
			if h.Offset < prev.MsgLen {
				t.Fatalf("second fragment at %d inside the first message of %d bytes", h.Offset, prev.MsgLen)
			}
		}
		prev = h
	}
	for k := range Kinds {
		if g.Count(k) != 10 {
			t.Errorf("%v: %d datagrams, want 10", k, g.Count(k))
		}
	}
}

// TestDeterministic checks that a seed gives the same datagrams.
func TestDeterministic(t *testing.T) {
	a, b := New(Config{Seed: 9}), New(Config{Seed: 9})
	for i := range 100 {
		if string(a.Next()) != string(b.Next()) {
			t.Fatalf("datagram %d differs", i)
		}
	}
}
