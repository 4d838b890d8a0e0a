package wire

import (
	"errors"
	"net/netip"
	"testing"
)

func TestFenceTrailer(t *testing.T) {
	f := Fence{ID: 7, Token: 1<<40 | 3}
	b := AppendFence([]byte("data"), f)
	if len(b) != 4+FenceLen {
		t.Fatalf("trailer of %d bytes", len(b)-4)
	}
	p, got, err := SplitFence(b)
	if err != nil || string(p) != "data" || got != f {
		t.Fatalf("got %q %+v %v", p, got, err)
	}
	for _, bad := range [][]byte{make([]byte, FenceLen-1), AppendFence(nil, Fence{ID: 1})} {
		if _, _, err := SplitFence(bad); !errors.Is(err, ErrFence) {
			t.Errorf("%x: err %v, want ErrFence", bad, err)
		}
	}
}

// TestFenceFlag checks where FlagFence may appear: on pool requests of
// the ops that change memory (and the raise, which needs it), with room
// for the trailer (and the reply-to trailer after it).
func TestFenceFlag(t *testing.T) {
	fence := AppendFence(nil, Fence{ID: 1, Token: 2})
	to := netip.MustParseAddrPort("10.0.0.1:9")
	cases := []struct {
		name    string
		h       Header
		payload []byte
		want    error
	}{
		{"fenced write", Header{Op: OpWrite, Mode: ModePool, Flags: FlagFence}, append([]byte("x"), fence...), nil},
		{"forwarded fenced cas", Header{Op: OpCAS, Mode: ModePool, Flags: FlagFence | FlagReplyTo}, AppendReplyTo(fence, to), nil},
		{"raise", Header{Op: OpFence, Mode: ModePool, Flags: FlagFence}, fence, nil},
		{"raise answer", Header{Op: OpFence, Mode: ModePool, Flags: FlagResp}, nil, nil},
		{"raise without its fence", Header{Op: OpFence, Mode: ModePool}, fence, ErrFlags},
		{"fenced read", Header{Op: OpRead, Mode: ModePool, Flags: FlagFence}, fence, ErrFlags},
		{"fenced chain", Header{Op: OpChain, Mode: ModePool, Flags: FlagFence}, fence, nil},
		{"forwarded fenced chain", Header{Op: OpChain, Mode: ModePool, Flags: FlagFence | FlagReplyTo, Hop: 1}, AppendReplyTo(fence, to), nil},
		{"fenced optimizer step", Header{Op: OpOptim, Mode: ModePool, Flags: FlagFence}, fence, ErrFlags},
		{"fenced answer", Header{Op: OpWrite, Mode: ModePool, Flags: FlagFence | FlagResp}, fence, ErrFlags},
		{"fenced unicast write", Header{Op: OpWrite, Flags: FlagFence}, fence, ErrFlags},
		{"short trailer", Header{Op: OpWrite, Mode: ModePool, Flags: FlagFence}, fence[:FenceLen-1], ErrFlags},
		{"no room for both trailers", Header{Op: OpWrite, Mode: ModePool, Flags: FlagFence | FlagReplyTo}, AppendReplyTo(nil, to), ErrFlags},
		{"raise outside pool mode", Header{Op: OpFence, Flags: FlagFence}, fence, ErrFlags},
		{"raise answer outside pool mode", Header{Op: OpFence, Flags: FlagResp}, nil, ErrMode},
	}
	for _, c := range cases {
		h := c.h
		h.Version, h.MsgLen = Version, uint32(len(c.payload))
		pkt, err := AppendPacket(nil, &h, c.payload)
		if err != nil {
			t.Fatal(err)
		}
		var g Header
		if _, _, err := Parse(pkt, &g); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if len(fence) != FenceLen || !OpFence.IsData() || OpFence.String() != "fence" || StatusFenced.String() == "status(13)" {
		t.Fatalf("fence op, status or trailer not wired up")
	}
}

func TestFenceList(t *testing.T) {
	if FenceList(nil) != nil {
		t.Fatal("an empty table lists fences")
	}
	got := FenceList(map[uint32]uint64{9: 1, 2: 7, 5: 3})
	want := []Fence{{2, 7}, {5, 3}, {9, 1}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}
