package fabric_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// tapSwitch is the simulated switch with a hook that sees each datagram
// before the switch does.
type tapSwitch struct {
	*fabric.Switch
	tap func(now time.Time, d netio.Datagram)
}

func (s *tapSwitch) Receive(now time.Time, d netio.Datagram) {
	if s.tap != nil {
		s.tap(now, d)
	}
	s.Switch.Receive(now, d)
}

// TestSimMulticastForgedStart: one datagram forged in a member's name —
// the first packet of its multicast stream, at a sequence number 2^20
// ahead of where the member's stream will start — reaches the switch just
// before the member's first real multicast packet. The switch starts its
// merge window there and replicates it, so every receiver starts its
// receive window there too. The real stream then arrives behind them
// all: the switch challenges its sender, which echoes (and takes the
// challenge for the switch's word that its stream is known), so the
// packets the receivers get no longer carry SYN. They used to take them
// for duplicates of what they had, acknowledge the forged point forever,
// and the sender heard nothing for 5 s. Now a receiver challenges an
// AckBase that far behind its window, the switch echoes for the sender,
// and the multicast completes.
func TestSimMulticastForgedStart(t *testing.T) {
	const seed = 5
	f := newSimFabric(t, seed, impaired(0), fabric.Config{})
	tap := &tapSwitch{Switch: f.sw}
	f.net.Detach(f.swAddr)
	f.net.Attach(f.swAddr, tap, f.link, f.link)
	ms := f.addMembers(3)
	gid := f.join("forged", ms)
	forged := false
	tap.tap = func(now time.Time, d netio.Datagram) {
		var h wire.Header
		if forged || d.Addr != ms[0].addr {
			return
		}
		if _, _, err := wire.Parse(d.Buf, &h); err != nil || h.Mode != wire.ModeMulticast || h.Op != wire.OpData {
			return
		}
		forged = true
		at := h.AckBase + 1<<20
		fh := wire.Header{Version: wire.Version, Op: wire.OpData, Mode: wire.ModeMulticast, Flags: wire.FlagSyn,
			Group: gid, Src: h.Src, Dst: wire.MemberAll, PSN: at, AckBase: at, MsgID: 1 << 40, MsgLen: 64, TS: h.TS}
		pkt, err := wire.AppendPacket(nil, &fh, make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		f.sw.Receive(now, netio.Datagram{Addr: ms[0].addr, Buf: pkt})
	}
	multicastRound(f, gid, ms, 0, randBytes(rand.New(rand.NewPCG(seed, 1)), 30000))
	if !forged {
		t.Fatal("no multicast packet seen")
	}
	for i, m := range ms[1:] {
		if st := m.core.Stats().Transport; st.Resets != 1 {
			t.Errorf("member %d: %d window restarts, want 1", i+1, st.Resets)
		}
	}
	t.Logf("switch: %d restarts challenged, %d done", f.sw.Stats().MulticastRestartsRefused, f.sw.Stats().MulticastResets)
}
