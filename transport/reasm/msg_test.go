package reasm

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestMsgAgainstBitmap: random fragments of random messages, checked and
// recorded by Msg and by a naive per-byte bitmap; they agree on which
// fragments fit and when the message is complete, and Msg never tracks
// more than MaxRanges ranges.
func TestMsgAgainstBitmap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		msgLen := uint32(1 + rng.IntN(300))
		var m Msg
		m.Start(msgLen)
		have := make([]bool, msgLen)
		for range 60 {
			off := uint32(rng.IntN(int(msgLen) + 2))
			n := rng.IntN(40)
			ok, room := m.Check(msgLen, off, n)
			want := uint64(off)+uint64(n) <= uint64(msgLen)
			for i := off; want && i < off+uint32(n); i++ {
				want = !have[i]
			}
			if ok != want {
				t.Fatalf("round %d: Check(%d, +%d) ok %v, the bitmap says %v", round, off, n, ok, want)
			}
			if !ok || !room {
				continue
			}
			m.Add(off, off+uint32(n))
			for i := off; i < off+uint32(n); i++ {
				have[i] = true
			}
			if int(m.n) > MaxRanges {
				t.Fatalf("round %d: %d ranges", round, m.n)
			}
			all := !bytes.Contains(boolBytes(have), []byte{0})
			if m.Complete() != all {
				t.Fatalf("round %d: Complete %v, the bitmap says %v", round, m.Complete(), all)
			}
		}
		if ok, _ := m.Check(msgLen+1, 0, 1); ok {
			t.Fatal("a fragment with another MsgLen fits")
		}
	}
}

func boolBytes(b []bool) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		if v {
			out[i] = 1
		}
	}
	return out
}

// TestBufferKeepsThenMoves: fragments kept before the buffer is known
// land in it on MoveTo; a refused fragment writes nothing, and a message
// the transport calls done that is not complete here is broken.
func TestBufferKeepsThenMoves(t *testing.T) {
	var b Buffer
	if _, ok := b.Place(4, 0, []byte("ab")); ok {
		t.Fatal("a fragment placed before StartInto")
	}
	b.StartInto(6, nil)
	if done, ok := b.Place(6, 4, []byte("ef")); !ok || done {
		t.Fatalf("first fragment: done %v ok %v", done, ok)
	}
	if _, ok := b.Place(6, 3, []byte("xx")); ok {
		t.Fatal("overlapping fragment placed")
	}
	if _, ok := b.Place(7, 0, []byte("x")); ok {
		t.Fatal("fragment with another MsgLen placed")
	}
	if b.Kept() != 2 || !b.Broken(true) || b.Broken(false) {
		t.Fatalf("kept %d, broken %v", b.Kept(), b.Broken(true))
	}
	buf := make([]byte, 6)
	b.MoveTo(buf)
	if _, ok := b.Place(6, 0, []byte("abcdefg")); ok {
		t.Fatal("fragment past the message placed")
	}
	if done, ok := b.Place(6, 0, []byte("abcd")); !ok || !done {
		t.Fatalf("last fragment: done %v ok %v", done, ok)
	}
	if string(buf) != "abcdef" || b.Kept() != 0 || &b.Bytes()[0] != &buf[0] {
		t.Fatalf("buffer %q", buf)
	}
	var z Buffer
	z.StartInto(0, nil)
	if done, ok := z.Place(0, 0, nil); !ok || !done {
		t.Fatal("empty message not complete")
	}
}
