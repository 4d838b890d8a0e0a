package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// BenchmarkEnginePacket measures the engine's per-packet cost on both
// sides (segment, encode, parse, dedup, ACK, completion) with no network:
// b.N counts 8 KiB data packets delivered (ACKs are coalesced per Poll). allocs/op counts
// per-packet allocations; the one outMsg per message is amortised over
// 128 packets.
func BenchmarkEnginePacket(b *testing.B) {
	cfg := Config{MTU: 8192 + wire.HeaderLen, Seed: 1}
	a, _ := New(cfg)
	cfg.Seed = 2
	c, _ := New(cfg)
	aAddr := netip.MustParseAddrPort("10.0.0.1:1")
	cAddr := netip.MustParseAddrPort("10.0.0.2:1")
	msg := make([]byte, 128*8192)
	h := wire.Header{Op: wire.OpWrite}
	now := time.Unix(1, 0)
	var out []netio.Datagram
	queued := 0
	b.SetBytes(8192)
	b.ReportAllocs()
	b.ResetTimer()
	for delivered := 0; delivered < b.N; {
		if queued < 256 {
			if _, err := a.Send(PeerID{Addr: cAddr}, &h, msg, 0); err != nil {
				b.Fatal(err)
			}
			queued += 128
		}
		now = now.Add(time.Microsecond)
		out, _, _ = a.Poll(now, out[:0])
		for _, d := range out {
			if _, ok := c.Receive(now, netio.Datagram{Addr: aAddr, Buf: d.Buf}, Admission{}); ok {
				delivered++
				queued--
			}
		}
		out, _, _ = c.Poll(now, out[:0])
		for _, d := range out {
			a.Receive(now, netio.Datagram{Addr: cAddr, Buf: d.Buf}, Admission{})
		}
	}
}

// TestEngineSteadyStateAllocs checks the per-packet path allocates nothing
// once warm (message structs aside).
func TestEngineSteadyStateAllocs(t *testing.T) {
	cfg := Config{MTU: 1500, Seed: 1, InitialCwnd: 4, MaxCwnd: 4}
	a, _ := New(cfg)
	cfg.Seed = 2
	c, _ := New(cfg)
	aAddr := netip.MustParseAddrPort("10.0.0.1:1")
	cAddr := netip.MustParseAddrPort("10.0.0.2:1")
	msg := make([]byte, 1<<24)
	h := wire.Header{Op: wire.OpWrite}
	if _, err := a.Send(PeerID{Addr: cAddr}, &h, msg, 0); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	var out []netio.Datagram
	step := func() {
		now = now.Add(time.Microsecond)
		out, _, _ = a.Poll(now, out[:0])
		for _, d := range out {
			c.Receive(now, netio.Datagram{Addr: aAddr, Buf: d.Buf}, Admission{})
		}
		out, _, _ = c.Poll(now, out[:0])
		for _, d := range out {
			a.Receive(now, netio.Datagram{Addr: cAddr, Buf: d.Buf}, Admission{})
		}
	}
	for range 100 {
		step()
	}
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("%v allocs per round trip", n)
	}
}

// TestEngineMessageAllocs: in steady state a one-packet message, sent and
// acknowledged, allocates nothing: finished messages are reused.
func TestEngineMessageAllocs(t *testing.T) {
	cfg := Config{MTU: 1500, Seed: 1}
	a, _ := New(cfg)
	cfg.Seed = 2
	c, _ := New(cfg)
	aAddr := netip.MustParseAddrPort("10.0.0.1:1")
	cAddr := netip.MustParseAddrPort("10.0.0.2:1")
	payload := make([]byte, 1000)
	h := wire.Header{Op: wire.OpWrite}
	now := time.Unix(1, 0)
	var out []netio.Datagram
	var comps []Completion
	done := 0
	round := func() {
		if _, err := a.Send(PeerID{Addr: cAddr}, &h, payload, 0); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			now = now.Add(2 * time.Millisecond) // past the receiver's ACK delay
			out, comps, _ = a.Poll(now, out[:0])
			done += len(comps)
			for _, d := range out {
				c.Receive(now, netio.Datagram{Addr: aAddr, Buf: d.Buf}, Admission{})
			}
			out, _, _ = c.Poll(now, out[:0])
			for _, d := range out {
				a.Receive(now, netio.Datagram{Addr: cAddr, Buf: d.Buf}, Admission{})
			}
		}
	}
	for range 100 {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%v allocs per message", n)
	}
	if done < 300 {
		t.Fatalf("%d messages completed", done)
	}
}
