package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// TestStallAllowance: on a stream whose ACKs a switch merges, once no
// progress has come for the base RTT (at least stallQuiet) the sender may
// have a window's worth more in flight per base RTT of silence, at most
// stallWindows windows more, and stallDeadline says when the next packet may go;
// progress ends the allowance. Unicast streams get none.
func TestStallAllowance(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	p := newPeer(e, PeerID{Mode: wire.ModeMulticast, Group: 1})
	p.win.Cwnd, p.win.Base, p.rtt.Min = 4, 2*time.Millisecond, time.Millisecond
	p.sndNxt = p.sndUna + 10
	p.inflight = 4
	p.lastProgress = t0
	p.qhead = &outMsg{}
	for _, c := range []struct {
		after time.Duration // since the last progress
		limit int
		next  time.Duration // stallDeadline, since the last progress; 0: none
	}{
		{0, 4, 2500 * time.Microsecond},                    // base 2 ms, then one more each 0.5 ms
		{2 * time.Millisecond, 4, 2500 * time.Microsecond}, // quiet for the base RTT: no allowance yet
		{2500 * time.Microsecond, 5, 3 * time.Millisecond}, // a quarter base RTT: a quarter window
		{3999 * time.Microsecond, 7, 4 * time.Millisecond}, // 1.999 ms: 3.998 packets, rounded down
		{4 * time.Millisecond, 8, 4500 * time.Microsecond}, // a base RTT of silence: a window more
		{7999 * time.Microsecond, 15, 8 * time.Millisecond},
		{8 * time.Millisecond, 16, 0}, // stallWindows base RTTs: three windows more
		{time.Second, 16, 0},          // and no more
	} {
		e.now = t0.Add(c.after)
		if got := p.sendLimit(); got != c.limit {
			t.Errorf("%v after progress: limit %d, want %d", c.after, got, c.limit)
		}
		p.inflight = c.limit // sent up to it
		want := time.Time{}
		if c.next != 0 {
			want = t0.Add(c.next)
		}
		if got := p.stallDeadline(); !got.Equal(want) {
			t.Errorf("%v after progress, %d in flight: next at %v, want %v", c.after, p.inflight, got.Sub(t0), c.next)
		}
	}
	// Progress: back to the window.
	p.lastProgress = e.now
	if got := p.sendLimit(); got != 4 {
		t.Errorf("after progress: limit %d, want the window 4", got)
	}
	// A short base RTT waits stallQuiet.
	p.win.Base = 50 * time.Microsecond
	e.now = p.lastProgress.Add(stallQuiet)
	if got := p.sendLimit(); got != 4 {
		t.Errorf("base 50µs, silent %v: limit %d, want 4", stallQuiet, got)
	}
	e.now = e.now.Add(50 * time.Microsecond)
	if got := p.sendLimit(); got != 8 {
		t.Errorf("base 50µs, silent %v: limit %d, want 8", stallQuiet+50*time.Microsecond, got)
	}
	// Aggregation streams get it; unicast, anycast and idle streams do not.
	p.id.Mode = wire.ModeAggregate
	if got := p.sendLimit(); got != 8 {
		t.Errorf("aggregate: limit %d, want 8", got)
	}
	for _, m := range []wire.Mode{wire.ModeUnicast, wire.ModeAnycast} {
		p.id.Mode = m
		if got := p.sendLimit(); got != 4 {
			t.Errorf("%v: limit %d, want the window 4", m, got)
		}
	}
	p.id.Mode = wire.ModeMulticast
	p.sndUna = p.sndNxt
	if got := p.sendLimit(); got != 4 {
		t.Errorf("nothing in flight: limit %d, want 4", got)
	}
}

// TestStallUnicast: a unicast stream to a receiver that is not scheduled
// (simnet's Stall: what arrives waits in its buffer) keeps to its window
// while the ACKs stop, and every byte arrives once.
func TestStallUnicast(t *testing.T) {
	const seed = 7
	t.Logf("seed %d", seed)
	net := simnet.New(seed)
	cfg := Config{MTU: 9000, Seed: seed}
	a := newNode(t, "10.0.0.1:1", cfg)
	cfg.Seed++
	b := newNode(t, "10.0.0.2:1", cfg)
	l := link(100e6, 5*time.Microsecond, 0, 0, 0, 0)
	net.Attach(a.addr, a, l, l)
	net.Attach(b.addr, b, l, l)
	msg := bytes.Repeat([]byte("stall"), 1<<20/5)
	h := wire.Header{Op: wire.OpWrite}
	id := PeerID{Addr: b.addr}
	if _, err := a.e.Send(id, &h, msg, 1); err != nil {
		t.Fatal(err)
	}
	net.Wake(a.addr)
	net.RunFor(30 * time.Millisecond) // past slow start, well short of the end
	p := a.e.lookup(id)
	if p == nil || p.win.Base == 0 || len(a.comps) != 0 {
		t.Fatalf("no transfer in progress to stall (peer %v, completions %d)", p != nil, len(a.comps))
	}
	cwnd := p.cwndPkts()
	const stall = 20 * time.Millisecond
	net.Stall(b.addr, stall)
	peak := 0
	for range 1000 {
		net.RunFor(stall / 1000)
		peak = max(peak, int(p.sndNxt-p.sndUna))
	}
	t.Logf("window %d packets: at most %d unacknowledged during a %v stall", cwnd, peak, stall)
	if peak > cwnd+1 {
		t.Errorf("%d packets unacknowledged during the stall, window %d", peak, cwnd)
	}
	if err := net.RunUntil(func() bool { return len(a.comps) == 1 && len(b.done) == 1 }, time.Minute); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if a.comps[0].Err != nil {
		t.Fatal(a.comps[0].Err)
	}
	for _, got := range b.done {
		if !bytes.Equal(got, msg) {
			t.Fatal("the receiver got different bytes")
		}
	}
}
