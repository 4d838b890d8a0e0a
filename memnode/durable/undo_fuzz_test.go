package durable

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ndma/ndma/memnode"
)

// FuzzParseUndo feeds ParseUndo arbitrary bytes, seeded with records of
// none to three spans and a torn one: it never panics, refuses what is
// not a record with ErrUndo, accepts only spans inside the memory, and
// what it accepts, written again, reads back the same.
func FuzzParseUndo(f *testing.F) {
	mem := make([]byte, 4096)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	f.Add(appendUndo(nil, 1, nil, mem))
	f.Add(appendUndo(nil, 9, []memnode.Span{{Off: 100, Len: 8}}, mem))
	three := appendUndo(nil, 1<<40, []memnode.Span{{Off: 0, Len: 64}, {Off: 1024, Len: 64}, {Off: 4032, Len: 64}}, mem)
	f.Add(three)
	torn := append([]byte(nil), three...)
	torn[40] ^= 1
	f.Add(torn)
	f.Add(three[:len(three)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseUndo(b, uint64(len(mem)))
		if err != nil {
			if !errors.Is(err, ErrUndo) {
				t.Fatalf("an error not wrapping ErrUndo: %v", err)
			}
			return
		}
		if u.Seq == 0 || len(u.Spans) > MaxUndoSpans || len(u.Spans) != len(u.Old) {
			t.Fatalf("accepted: seq %d, %d spans, %d images", u.Seq, len(u.Spans), len(u.Old))
		}
		img := make([]byte, len(mem))
		for i, s := range u.Spans {
			if s.Off+s.Len > uint64(len(mem)) || uint64(len(u.Old[i])) != s.Len {
				t.Fatalf("span %d: %+v with %d bytes, memory %d", i, s, len(u.Old[i]), len(mem))
			}
			copy(img[s.Off:], u.Old[i])
		}
		again := appendUndo(nil, u.Seq, u.Spans, img)
		back, err := ParseUndo(again, uint64(len(mem)))
		if err != nil || back.Seq != u.Seq || len(back.Spans) != len(u.Spans) {
			t.Fatalf("written again: %v, %+v", err, back)
		}
		for i := range back.Spans {
			// Spans may overlap: compare with what the image holds.
			s := back.Spans[i]
			if back.Spans[i] != u.Spans[i] || !bytes.Equal(back.Old[i], img[s.Off:s.Off+s.Len]) {
				t.Fatalf("span %d written again: %+v", i, back.Spans[i])
			}
		}
	})
}
