package transport

import (
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// transfer runs n messages of size bytes from a to b and returns the
// virtual time taken and a's stats.
func transfer(t *testing.T, seed int64, l simnet.LinkConfig, cfg Config, n, size int) (time.Duration, Stats, *node, *node, *simnet.Network) {
	t.Helper()
	net := simnet.New(seed)
	cfg.Seed = uint64(seed)
	a := newNode(t, "10.0.0.1:1", cfg)
	cfg.Seed++
	b := newNode(t, "10.0.0.2:1", cfg)
	net.Attach(a.addr, a, l, l)
	net.Attach(b.addr, b, l, l)
	h := wire.Header{Op: wire.OpWrite}
	for i := 0; i < n; i++ {
		if _, err := a.e.Send(PeerID{Addr: b.addr}, &h, make([]byte, size), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	net.Wake(a.addr)
	if err := net.RunUntil(func() bool { return len(a.comps) == n && len(b.done) == n }, time.Hour); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return net.Elapsed(), a.e.Stats(), a, b, net
}

// TestDeterministic: the same seed gives the same run, packet for packet.
func TestDeterministic(t *testing.T) {
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond, Loss: 0.05, Reorder: 0.05, Dup: 0.02}
	t1, s1, _, _, _ := transfer(t, 99, l, Config{MTU: 1500}, 20, 30000)
	t2, s2, _, _, _ := transfer(t, 99, l, Config{MTU: 1500}, 20, 30000)
	if t1 != t2 || s1 != s2 {
		t.Fatalf("seed 99 not reproducible: %v %+v vs %v %+v", t1, s1, t2, s2)
	}
}

// TestLinkRateBound: a lossless bulk transfer over a rate-limited link
// takes close to S/B (delay-based cwnd keeps the pipe full without
// building a large queue).
func TestLinkRateBound(t *testing.T) {
	l := simnet.LinkConfig{Rate: 100e6, Latency: 5 * time.Microsecond}
	const size = 4 << 20
	el, st, a, b, _ := transfer(t, 5, l, Config{MTU: 9000}, 1, size)
	bound := time.Duration(float64(size*8) / 100e6 * float64(time.Second))
	ratio := float64(el) / float64(bound)
	t.Logf("4 MiB at 100 Mbit/s: %v virtual, S/B %v, ratio %.3f, retransmits %d", el, bound, ratio, st.PacketsRetransmitted)
	if st.PacketsRetransmitted != 0 {
		t.Fatalf("retransmissions on a lossless link: %d", st.PacketsRetransmitted)
	}
	// Header overhead alone is 96/8904 ≈ 1.1%; allow 5%.
	if ratio > 1.05 {
		t.Fatalf("transfer took %.3f× S/B", ratio)
	}
	p := a.e.groups[0].peers[peerKey{b.addr, 0, 0}]
	if p.win.Cwnd > 64 {
		t.Fatalf("cwnd grew to %.1f packets on a 100 Mbit/s link: delay signal ignored", p.win.Cwnd)
	}
}

// TestPeerRestart: after the receiver loses its state (a restart), the
// sender's next messages are still delivered (the SYN flag and AckBase
// re-synchronise the receive window).
func TestPeerRestart(t *testing.T) {
	l := simnet.LinkConfig{Rate: 1e9, Latency: 5 * time.Microsecond}
	_, _, a, b, net := transfer(t, 11, l, Config{MTU: 1500}, 3, 5000)
	// b restarts: fresh engine at the same address.
	net.Detach(b.addr)
	b2 := newNode(t, "10.0.0.2:1", Config{MTU: 1500, Seed: 77})
	net.Attach(b2.addr, b2, l, l)
	// b2 talks to a first (a sees a new incarnation with SYN), then a sends.
	h := wire.Header{Op: wire.OpWrite}
	if _, err := b2.e.Send(PeerID{Addr: a.addr}, &h, []byte("hello"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.Send(PeerID{Addr: b.addr}, &h, make([]byte, 4000), 9); err != nil {
		t.Fatal(err)
	}
	net.Wake(a.addr)
	net.Wake(b2.addr)
	if err := net.RunUntil(func() bool { return len(b2.done) == 1 && len(b2.comps) == 1 }, 10*time.Second); err != nil {
		t.Fatalf("after restart: %v (b2 got %d messages)", err, len(b2.done))
	}
}
