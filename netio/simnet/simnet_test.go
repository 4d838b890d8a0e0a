package simnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
)

func ap(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 9000)
}

type recv struct {
	at   time.Duration // since Epoch
	rx   time.Duration // RxTime, since Epoch
	from netip.AddrPort
	data []byte
}

// testNode is a scriptable Node: it sends what the test queued in outbox
// on its next Poll, records what it receives and when it is polled, and
// returns deadline from Poll unless onPoll overrides it.
type testNode struct {
	outbox    []netio.Datagram
	got       []recv
	polls     []time.Duration
	deadline  time.Time
	onPoll    func(now time.Time) time.Time
	onReceive func(now time.Time, d netio.Datagram)
}

func (t *testNode) Receive(now time.Time, d netio.Datagram) {
	t.got = append(t.got, recv{at: now.Sub(Epoch()), rx: time.Unix(0, d.RxTime).Sub(Epoch()), from: d.Addr, data: bytes.Clone(d.Buf)})
	if t.onReceive != nil {
		t.onReceive(now, d)
	}
}

func (t *testNode) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	t.polls = append(t.polls, now.Sub(Epoch()))
	out = append(out, t.outbox...)
	t.outbox = t.outbox[:0]
	if t.onPoll != nil {
		return out, t.onPoll(now)
	}
	return out, t.deadline
}

// send queues count datagrams of size bytes to dst, each starting with its
// index as a big-endian uint32 (when size >= 4).
func (t *testNode) send(dst netip.AddrPort, count, size int) {
	for i := range count {
		b := make([]byte, size)
		if size >= 4 {
			binary.BigEndian.PutUint32(b, uint32(i))
		}
		t.outbox = append(t.outbox, netio.Datagram{Addr: dst, Buf: b})
	}
}

func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }

var mbit100 = LinkConfig{Rate: 100e6, Latency: 5 * time.Microsecond}

// drain runs the network until no events remain.
func drain(t *testing.T, n *Network) {
	t.Helper()
	for i := 0; n.Step(); i++ {
		if i > 10_000_000 {
			t.Fatalf("network does not go quiet, seed %d", n.Seed())
		}
	}
}

func checkConservation(t *testing.T, n *Network) {
	t.Helper()
	s := n.Stats()
	if n.Pending() == 0 && s.Sent+s.Duplicated != s.Delivered+s.Dropped() {
		t.Errorf("conservation: sent %d + dup %d != delivered %d + dropped %d (%+v)",
			s.Sent, s.Duplicated, s.Delivered, s.Dropped(), s)
	}
}

func TestTimingExact(t *testing.T) {
	for _, tc := range []struct {
		name     string
		up, down LinkConfig
		want     time.Duration
	}{
		// Store and forward: 80µs serialization + 5µs on A's up link,
		// then again on B's down link.
		{"both", mbit100, mbit100, us(170)},
		{"up only", mbit100, LinkConfig{}, us(85)},
		{"down only", LinkConfig{}, mbit100, us(85)},
		// (1000+28)*8 bits / 100 Mbit/s = 82.24µs per link.
		{"overhead", LinkConfig{Rate: 100e6, Latency: us(5), Overhead: 28}, LinkConfig{Rate: 100e6, Latency: us(5), Overhead: 28}, 2 * (82240*time.Nanosecond + us(5))},
		{"latency only", LinkConfig{Latency: us(7)}, LinkConfig{Latency: us(3)}, us(10)},
		{"perfect", LinkConfig{}, LinkConfig{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := New(1)
			a, b := &testNode{}, &testNode{}
			n.Attach(ap(1), a, tc.up, tc.up)
			n.Attach(ap(2), b, tc.down, tc.down)
			a.send(ap(2), 1, 1000)
			drain(t, n)
			if len(b.got) != 1 {
				t.Fatalf("got %d datagrams, want 1", len(b.got))
			}
			if b.got[0].at != tc.want {
				t.Errorf("arrived at +%v, want +%v", b.got[0].at, tc.want)
			}
			if b.got[0].from != ap(1) {
				t.Errorf("from %v, want %v", b.got[0].from, ap(1))
			}
		})
	}
}

func TestBurstBackToBack(t *testing.T) {
	n := New(1)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, mbit100, mbit100)
	n.Attach(ap(2), b, mbit100, mbit100)
	a.send(ap(2), 100, 1000)
	drain(t, n)
	if len(b.got) != 100 {
		t.Fatalf("got %d, want 100", len(b.got))
	}
	for i, r := range b.got {
		if want := us(170 + 80*i); r.at != want {
			t.Fatalf("datagram %d arrived at +%v, want +%v", i, r.at, want)
		}
		if seq := binary.BigEndian.Uint32(r.data); seq != uint32(i) {
			t.Fatalf("datagram %d has seq %d", i, seq)
		}
	}
	checkConservation(t, n)
}

// TestIncast: four senders each send 100 datagrams at line rate to one
// receiver; the receiver's down link is the bottleneck, so the datagrams
// arrive back to back at its rate, 400 * 80µs in all.
func TestIncast(t *testing.T) {
	n := New(1)
	rx := &testNode{}
	n.Attach(ap(100), rx, mbit100, mbit100)
	for i := 1; i <= 4; i++ {
		tx := &testNode{}
		n.Attach(ap(i), tx, mbit100, mbit100)
		tx.send(ap(100), 100, 1000)
	}
	drain(t, n)
	if len(rx.got) != 400 {
		t.Fatalf("got %d, want 400", len(rx.got))
	}
	// The first datagram reaches the crossbar at 85µs; from then on the
	// down link is never idle.
	for i, r := range rx.got {
		if want := us(85 + 80*(i+1) + 5); r.at != want {
			t.Fatalf("datagram %d arrived at +%v, want +%v", i, r.at, want)
		}
	}
	if got, want := rx.got[399].at, us(32090); got != want {
		t.Errorf("last arrival +%v, want +%v", got, want)
	}
	// Fair interleaving: the crossbar receives one datagram from each
	// sender per 80µs, so each window of 4 holds all 4 senders.
	for w := 0; w < 400; w += 4 {
		seen := map[netip.AddrPort]bool{}
		for _, r := range rx.got[w : w+4] {
			seen[r.from] = true
		}
		if len(seen) != 4 {
			t.Fatalf("window %d has senders %v", w, seen)
		}
	}
	checkConservation(t, n)
}

func TestLossRate(t *testing.T) {
	const count, p = 20000, 0.1
	n := New(42)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{Loss: p}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
	a.send(ap(2), count, 16)
	drain(t, n)
	s := n.Stats()
	// Binomial(20000, 0.1): mean 2000, sd 42.4; allow 5 sd.
	if s.DroppedLoss < 1788 || s.DroppedLoss > 2212 {
		t.Errorf("lost %d of %d, want about %d (seed %d)", s.DroppedLoss, count, int(count*p), n.Seed())
	}
	if s.Delivered+s.DroppedLoss != count || uint64(len(b.got)) != s.Delivered {
		t.Errorf("delivered %d + lost %d != %d", s.Delivered, s.DroppedLoss, count)
	}
	checkConservation(t, n)
}

// scenario runs three nodes exchanging datagrams with timers over
// impaired links and returns the trace.
func scenario(seed int64) []string {
	var trace []string
	n := New(seed)
	n.Trace = func(ev TraceEvent) { trace = append(trace, ev.String()) }
	lossy := LinkConfig{Rate: 1e9, Latency: us(3), Loss: 0.05, Reorder: 0.1, Dup: 0.05, Corrupt: 0.05, QueueBytes: 20000}
	for i := 1; i <= 3; i++ {
		node := &testNode{}
		peer := ap(i%3 + 1)
		node.onReceive = func(now time.Time, d netio.Datagram) {
			if len(node.got) < 200 {
				node.outbox = append(node.outbox, netio.Datagram{Addr: peer, Buf: bytes.Clone(d.Buf)})
			}
		}
		ticks := 0
		node.onPoll = func(now time.Time) time.Time {
			if ticks < 20 {
				ticks++
				return now.Add(time.Duration(50+i) * time.Microsecond)
			}
			return time.Time{}
		}
		node.send(peer, 30, 100*i)
		n.Attach(ap(i), node, lossy, lossy)
	}
	n.RunFor(50 * time.Millisecond)
	s := n.Stats()
	if s.Sent+s.Duplicated != s.Delivered+s.Dropped() {
		trace = append(trace, "CONSERVATION VIOLATED")
	}
	return trace
}

func TestDeterminism(t *testing.T) {
	a, b, c := scenario(7), scenario(7), scenario(8)
	if len(a) < 1000 {
		t.Fatalf("trace too short to mean anything: %d events", len(a))
	}
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("same seed, traces differ at event %d:\n%s\n%s", i, a[i], b[i])
			}
		}
		t.Fatalf("same seed, trace lengths %d and %d", len(a), len(b))
	}
	if strings.Join(a, "\n") == strings.Join(c, "\n") {
		t.Fatal("different seeds gave identical traces")
	}
	for _, tr := range [][]string{a, c} {
		for _, line := range tr {
			if line == "CONSERVATION VIOLATED" {
				t.Fatal("conservation violated")
			}
		}
	}
}

func TestDup(t *testing.T) {
	n := New(3)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{Dup: 1, Rate: 1e9}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{Rate: 1e9})
	a.send(ap(2), 50, 100)
	drain(t, n)
	if len(b.got) != 100 {
		t.Fatalf("got %d, want 100", len(b.got))
	}
	for i := 0; i < 100; i += 2 {
		if !bytes.Equal(b.got[i].data, b.got[i+1].data) {
			t.Fatalf("datagram %d and its copy differ", i/2)
		}
		if binary.BigEndian.Uint32(b.got[i].data) != uint32(i/2) {
			t.Fatalf("datagram %d out of order", i/2)
		}
	}
	if s := n.Stats(); s.Duplicated != 50 || s.Delivered != 100 {
		t.Errorf("stats %+v", s)
	}
	checkConservation(t, n)

	// Partial duplication: about half.
	n = New(3)
	a, b = &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{Dup: 0.5})
	a.send(ap(2), 1000, 8)
	drain(t, n)
	if s := n.Stats(); s.Duplicated < 400 || s.Duplicated > 600 || s.Delivered != 1000+s.Duplicated {
		t.Errorf("Dup 0.5: stats %+v", s)
	}
}

func TestCorruptFlipsExactlyOneBit(t *testing.T) {
	n := New(5)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{Corrupt: 1})
	var sent [][]byte
	for i := range 200 {
		p := make([]byte, 1+i*7)
		for j := range p {
			p[j] = byte(i*31 + j*17)
		}
		sent = append(sent, p)
		a.outbox = append(a.outbox, netio.Datagram{Addr: ap(2), Buf: p})
	}
	drain(t, n)
	if len(b.got) != len(sent) {
		t.Fatalf("got %d, want %d", len(b.got), len(sent))
	}
	for i, r := range b.got {
		if len(r.data) != len(sent[i]) {
			t.Fatalf("datagram %d: length %d, want %d", i, len(r.data), len(sent[i]))
		}
		flipped := 0
		for j := range r.data {
			flipped += bits.OnesCount8(r.data[j] ^ sent[i][j])
		}
		if flipped != 1 {
			t.Fatalf("datagram %d: %d bits flipped, want 1", i, flipped)
		}
	}
	if s := n.Stats(); s.Corrupted != 200 {
		t.Errorf("Corrupted = %d, want 200", s.Corrupted)
	}
}

func TestReorder(t *testing.T) {
	n := New(9)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{Rate: 100e6, Latency: us(10), Reorder: 0.2}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
	a.send(ap(2), 300, 100)
	drain(t, n)
	if len(b.got) != 300 {
		t.Fatalf("got %d, want 300 (reordering must not lose)", len(b.got))
	}
	overtaken, seen := 0, make(map[uint32]bool)
	maxSeq := uint32(0)
	for _, r := range b.got {
		seq := binary.BigEndian.Uint32(r.data)
		if seen[seq] {
			t.Fatalf("seq %d delivered twice", seq)
		}
		seen[seq] = true
		if seq < maxSeq {
			overtaken++
		}
		maxSeq = max(maxSeq, seq)
	}
	s := n.Stats()
	if overtaken == 0 || s.Reordered == 0 || uint64(overtaken) > s.Reordered {
		t.Errorf("overtaken %d, Reordered %d", overtaken, s.Reordered)
	}
	if s.Reordered < 30 || s.Reordered > 90 {
		t.Errorf("Reordered %d of 300 at p=0.2", s.Reordered)
	}
}

func TestMTU(t *testing.T) {
	n := New(1)
	a, b := &testNode{}, &testNode{}
	var trace []TraceEvent
	n.Trace = func(ev TraceEvent) {
		if ev.Kind == TraceDropMTU {
			trace = append(trace, ev)
		}
	}
	n.Attach(ap(1), a, LinkConfig{MTU: 1500}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{MTU: 1200})
	for _, size := range []int{1200, 1201, 1500, 1501, netio.MaxDatagram + 1} {
		a.send(ap(2), 1, size)
	}
	drain(t, n)
	if len(b.got) != 1 || len(b.got[0].data) != 1200 {
		t.Fatalf("got %d datagrams, want only the 1200-byte one", len(b.got))
	}
	if s := n.Stats(); s.DroppedMTU != 4 {
		t.Errorf("DroppedMTU = %d, want 4", s.DroppedMTU)
	}
	// Sizes: 1201 and 1500 cross the up link and die on the down link;
	// 1501 and 65508 die on the up link, as soon as they are sent.
	ups, downs := 0, 0
	for _, ev := range trace {
		switch {
		case ev.Dir == Up && ev.Len > 1500:
			ups++
		case ev.Dir == Down && ev.Len > 1200 && ev.Len <= 1500:
			downs++
		}
	}
	if ups != 2 || downs != 2 {
		t.Errorf("drops: %d on up (want 2), %d on down (want 2): %v", ups, downs, trace)
	}
	checkConservation(t, n)
}

func TestQueueOverflow(t *testing.T) {
	n := New(1)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{Rate: 100e6, QueueBytes: 10000}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
	a.send(ap(2), 100, 1000)
	drain(t, n)
	s := n.Stats()
	if len(b.got) != 10 || s.DroppedQueue != 90 {
		t.Fatalf("delivered %d, queue drops %d; want 10 and 90", len(b.got), s.DroppedQueue)
	}
	// Once the queue has drained, the link accepts again.
	a.send(ap(2), 1, 1000)
	n.Wake(ap(1))
	drain(t, n)
	if len(b.got) != 11 {
		t.Fatalf("after draining: got %d, want 11", len(b.got))
	}
	// Half drained: at 400µs five datagrams have left, five fit again.
	n2 := New(1)
	a, b = &testNode{}, &testNode{}
	n2.Attach(ap(1), a, LinkConfig{Rate: 100e6, QueueBytes: 10000}, LinkConfig{})
	n2.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
	a.send(ap(2), 10, 1000)
	n2.RunFor(us(400))
	a.send(ap(2), 10, 1000)
	n2.Wake(ap(1))
	drain(t, n2)
	if s := n2.Stats(); len(b.got) != 15 || s.DroppedQueue != 5 {
		t.Fatalf("delivered %d, queue drops %d; want 15 and 5", len(b.got), s.DroppedQueue)
	}
	checkConservation(t, n2)
}

func TestDetachDropsInFlight(t *testing.T) {
	n := New(1)
	a, b := &testNode{}, &testNode{}
	slow := LinkConfig{Latency: time.Millisecond}
	n.Attach(ap(1), a, LinkConfig{}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, slow)
	b.deadline = Epoch().Add(700 * time.Microsecond)
	a.send(ap(2), 5, 100)
	n.RunFor(500 * time.Microsecond)
	pollsBefore := len(b.polls)
	n.Detach(ap(2))
	if n.Attached(ap(2)) {
		t.Fatal("still attached")
	}
	// A new node at the same address must not see the old one's traffic.
	b2 := &testNode{}
	n.Attach(ap(2), b2, LinkConfig{}, LinkConfig{})
	n.RunFor(5 * time.Millisecond)
	if len(b.got) != 0 || len(b2.got) != 0 {
		t.Fatalf("in-flight datagrams delivered: old %d, new %d", len(b.got), len(b2.got))
	}
	if len(b.polls) != pollsBefore {
		t.Errorf("detached node polled %d more times (its timer must die)", len(b.polls)-pollsBefore)
	}
	if s := n.Stats(); s.DroppedDetached != 5 {
		t.Errorf("DroppedDetached = %d, want 5", s.DroppedDetached)
	}
	// New traffic reaches the new node; traffic to an unknown address is
	// dropped as no route.
	a.send(ap(2), 1, 10)
	a.send(ap(3), 2, 10)
	n.Wake(ap(1))
	drain(t, n)
	if len(b2.got) != 1 {
		t.Errorf("new node got %d, want 1", len(b2.got))
	}
	if s := n.Stats(); s.DroppedNoRoute != 2 {
		t.Errorf("DroppedNoRoute = %d, want 2", s.DroppedNoRoute)
	}
	checkConservation(t, n)
}

// TestStall: a stalled node is neither polled nor woken by its timer;
// what reaches it meanwhile waits, in order, and is handed over when the
// stall ends, each datagram with its arrival time, before one Poll. A
// second Stall extends the first; Detach drops what is held.
func TestStall(t *testing.T) {
	n := New(1)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, mbit100)
	n.RunFor(time.Millisecond)
	b.polls = nil
	b.onPoll = func(now time.Time) time.Time { // a timer inside the stall
		if at := Epoch().Add(2 * time.Millisecond); now.Before(at) {
			return at
		}
		return time.Time{}
	}
	n.Wake(ap(2))
	n.Step() // the Poll that sets the deadline
	n.Stall(ap(2), 2*time.Millisecond)
	n.Stall(ap(2), time.Millisecond) // ends earlier: no change
	a.send(ap(2), 3, 1000)           // arrive at +1.085, +1.165, +1.245 ms
	n.Wake(ap(1))
	n.RunFor(1500 * time.Microsecond)
	n.Stall(ap(2), 2*time.Millisecond) // from +2.5 ms to +4.5 ms
	n.RunFor(10 * time.Millisecond)
	if len(b.got) != 3 {
		t.Fatalf("got %d datagrams, want 3", len(b.got))
	}
	for i, r := range b.got {
		wantRx := time.Millisecond + us(85+80*i)
		if r.at != 4500*time.Microsecond || r.rx != wantRx || binary.BigEndian.Uint32(r.data) != uint32(i) {
			t.Errorf("datagram %d (#%d) handed over at +%v, arrived +%v; want +4.5ms, +%v",
				i, binary.BigEndian.Uint32(r.data), r.at, r.rx, wantRx)
		}
	}
	if want := []time.Duration{time.Millisecond, 4500 * time.Microsecond}; !slices.Equal(b.polls, want) {
		t.Errorf("stalled node polled at %v, want %v (once on resuming, after its datagrams)", b.polls, want)
	}
	// A datagram to a node that is not stalled carries its arrival time.
	a.send(ap(2), 1, 1000)
	n.Wake(ap(1))
	drain(t, n)
	if r := b.got[3]; r.rx != r.at {
		t.Errorf("RxTime +%v, handed over +%v: want the same", r.rx, r.at)
	}
	// Detach drops what a stalled node holds.
	n.Stall(ap(2), time.Second)
	a.send(ap(2), 2, 1000)
	n.Wake(ap(1))
	n.RunFor(10 * time.Millisecond)
	n.Detach(ap(2))
	drain(t, n)
	if s := n.Stats(); len(b.got) != 4 || s.DroppedDetached != 2 {
		t.Errorf("got %d, DroppedDetached %d; want 4 and 2", len(b.got), s.DroppedDetached)
	}
	checkConservation(t, n)
	n.Stall(ap(9), time.Second) // not attached: nothing
}

func TestPartition(t *testing.T) {
	n := New(1)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
	n.SetLink(ap(2), LinkConfig{}, LinkConfig{Loss: 1})
	a.send(ap(2), 10, 10)
	drain(t, n)
	n.SetLink(ap(2), LinkConfig{}, LinkConfig{})
	a.send(ap(2), 10, 10)
	n.Wake(ap(1))
	drain(t, n)
	if s := n.Stats(); len(b.got) != 10 || s.DroppedLoss != 10 {
		t.Errorf("delivered %d, lost %d; want 10 and 10", len(b.got), s.DroppedLoss)
	}
}

func TestTimers(t *testing.T) {
	n := New(1)
	node := &testNode{}
	step := 0
	node.onPoll = func(now time.Time) time.Time {
		step++
		switch step {
		case 1: // at Attach
			return now.Add(time.Millisecond)
		case 2: // the timer, at 1ms: ask for 5ms
			return now.Add(4 * time.Millisecond)
		case 3: // woken at 2ms: replace 5ms by 3ms
			return now.Add(time.Millisecond)
		case 4: // 3ms: a deadline in the past means now
			return now.Add(-time.Second)
		default:
			return time.Time{}
		}
	}
	n.Attach(ap(1), node, LinkConfig{}, LinkConfig{})
	n.RunFor(2 * time.Millisecond)
	n.Wake(ap(1))
	n.Wake(ap(1)) // coalesced
	n.RunFor(10 * time.Millisecond)
	want := []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond}
	if len(node.polls) != len(want) {
		t.Fatalf("polls at %v, want %v", node.polls, want)
	}
	for i := range want {
		if node.polls[i] != want[i] {
			t.Fatalf("polls at %v, want %v", node.polls, want)
		}
	}
	if n.Elapsed() != 12*time.Millisecond {
		t.Errorf("clock at +%v after RunFor, want +12ms", n.Elapsed())
	}
}

// TestPollCoalescing: datagrams arriving at one instant are all received
// before the node's single Poll for that instant.
func TestPollCoalescing(t *testing.T) {
	n := New(1)
	rx := &testNode{}
	var receivedAtPoll []int
	rx.onPoll = func(time.Time) time.Time {
		receivedAtPoll = append(receivedAtPoll, len(rx.got))
		return time.Time{}
	}
	n.Attach(ap(10), rx, LinkConfig{}, LinkConfig{})
	for i := 1; i <= 3; i++ {
		tx := &testNode{}
		tx.send(ap(10), 2, 10)
		n.Attach(ap(i), tx, LinkConfig{Latency: us(1)}, LinkConfig{})
	}
	drain(t, n)
	if len(rx.got) != 6 || len(receivedAtPoll) != 2 || receivedAtPoll[1] != 6 {
		t.Errorf("received %d; polls saw %v, want [0 6]", len(rx.got), receivedAtPoll)
	}
}

func TestRunUntil(t *testing.T) {
	n := New(1234)
	ticker := &testNode{onPoll: func(now time.Time) time.Time { return now.Add(time.Millisecond) }}
	n.Attach(ap(1), ticker, LinkConfig{}, LinkConfig{})

	err := n.RunUntil(func() bool { return len(ticker.polls) == 4 }, time.Second)
	if err != nil || n.Elapsed() != 3*time.Millisecond {
		t.Fatalf("RunUntil = %v at +%v, want nil at +3ms", err, n.Elapsed())
	}

	err = n.RunUntil(func() bool { return false }, 10*time.Millisecond)
	var re *RunError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &re) {
		t.Fatalf("RunUntil = %v, want a *RunError wrapping ErrTimeout", err)
	}
	if re.Seed != 1234 || !strings.Contains(err.Error(), "seed 1234") || !strings.Contains(err.Error(), "+13ms") {
		t.Errorf("error %q must name the virtual time +13ms and seed 1234", err)
	}
	if n.Elapsed() != 13*time.Millisecond || re.Elapsed != 10*time.Millisecond {
		t.Errorf("clock at +%v (run %v), want +13ms (10ms)", n.Elapsed(), re.Elapsed)
	}

	n.Detach(ap(1))
	err = n.RunUntil(func() bool { return false }, time.Second)
	if !errors.Is(err, ErrDeadlock) {
		t.Fatalf("RunUntil with no events = %v, want ErrDeadlock", err)
	}
}

func TestLivelock(t *testing.T) {
	n := New(1)
	n.maxPerInstant = 1000
	n.Attach(ap(1), &testNode{onPoll: func(now time.Time) time.Time { return now }}, LinkConfig{}, LinkConfig{})
	err := n.RunUntil(func() bool { return false }, time.Second)
	if !errors.Is(err, ErrLivelock) {
		t.Fatalf("RunUntil = %v, want ErrLivelock", err)
	}
	defer func() {
		if r, ok := recover().(error); !ok || !errors.Is(r, ErrLivelock) {
			t.Errorf("RunFor panicked with %v, want ErrLivelock", r)
		}
	}()
	n.RunFor(time.Second)
}

func TestValidate(t *testing.T) {
	bad := []LinkConfig{
		{Rate: -1}, {Latency: -1}, {MTU: -1}, {MTU: netio.MaxDatagram + 1}, {QueueBytes: -1},
		{Loss: 1.5}, {Reorder: -0.1}, {Dup: 2}, {Corrupt: 1.01}, {ReorderDelay: -1}, {Overhead: -1},
	}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
	if err := (LinkConfig{Rate: 1e9, Loss: 1, MTU: 9000}).Validate(); err != nil {
		t.Error(err)
	}
	n := New(1)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Attach with an invalid config did not panic")
			}
		}()
		n.Attach(ap(1), &testNode{}, LinkConfig{Loss: 2}, LinkConfig{})
	}()
	n.Attach(ap(1), &testNode{}, LinkConfig{}, LinkConfig{})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("second Attach at one address did not panic")
			}
		}()
		n.Attach(ap(1), &testNode{}, LinkConfig{}, LinkConfig{})
	}()
}

// TestTraceString pins the trace format, which failing tests print.
func TestTraceString(t *testing.T) {
	n := New(1)
	var lines []string
	n.Trace = func(ev TraceEvent) { lines = append(lines, ev.String()) }
	a := &testNode{}
	a.send(ap(2), 1, 1000)
	n.Attach(ap(1), a, mbit100, mbit100)
	n.Attach(ap(2), &testNode{}, mbit100, LinkConfig{Loss: 1})
	drain(t, n)
	want := []string{
		"+0s poll 10.0.0.1:9000",
		"+0s send 10.0.0.1:9000->10.0.0.2:9000 len=1000",
		"+0s poll 10.0.0.2:9000",
		"+85µs drop-loss 10.0.0.1:9000->10.0.0.2:9000 len=1000 link=down",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("trace:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestControlFirst: on a ControlFirst link a Control datagram waits only
// for the datagram on the wire, data that enters later waits for it, and
// a flood of them is bounded by QueueBytes; on a FIFO link it waits its
// turn.
func TestControlFirst(t *testing.T) {
	for _, first := range []bool{false, true} {
		n := New(1)
		a, b := &testNode{}, &testNode{}
		n.Attach(ap(1), a, LinkConfig{Rate: 100e6, Latency: us(5), ControlFirst: first}, LinkConfig{})
		n.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
		a.send(ap(2), 10, 1000) // 80 µs each at 100 Mbit/s
		a.outbox = append(a.outbox, netio.Datagram{Addr: ap(2), Buf: []byte("ack"), Control: true})
		n.RunFor(us(100))
		a.send(ap(2), 1, 1000)
		n.Wake(ap(1))
		drain(t, n)
		if len(b.got) != 12 {
			t.Fatalf("first=%v: got %d datagrams, want 12", first, len(b.got))
		}
		ctl, want := -1, 10
		for i, r := range b.got {
			if string(r.data) == "ack" {
				ctl = i
			}
		}
		// 3 bytes take 0.24 µs; the datagram sent at 100 µs leaves
		// after all the rest either way.
		wantAt, lastAt := us(805)+240, us(885)+240
		if first {
			// After the datagram on the wire (0-80 µs) only.
			want, wantAt = 1, us(85)+240
		}
		if ctl != want || b.got[ctl].at != wantAt || b.got[11].at != lastAt {
			t.Errorf("first=%v: control datagram %dth at %v, last data at %v; want %dth at %v, last at %v",
				first, ctl, b.got[ctl].at, b.got[11].at, want, wantAt, lastAt)
		}
		checkConservation(t, n)
	}
	// A flood of control datagrams: those that would wait longer than
	// QueueBytes take to send (800 µs) are dropped.
	n := New(1)
	a, b := &testNode{}, &testNode{}
	n.Attach(ap(1), a, LinkConfig{Rate: 100e6, QueueBytes: 10000, ControlFirst: true}, LinkConfig{})
	n.Attach(ap(2), b, LinkConfig{}, LinkConfig{})
	for range 100 {
		a.outbox = append(a.outbox, netio.Datagram{Addr: ap(2), Buf: make([]byte, 1000), Control: true})
	}
	drain(t, n)
	if s := n.Stats(); len(b.got) != 11 || s.DroppedQueue != 89 {
		t.Fatalf("flood: delivered %d, queue drops %d; want 11 and 89", len(b.got), s.DroppedQueue)
	}
	checkConservation(t, n)
}

// TestTraceBuf: a send and its delivery are traced with the datagram's
// bytes, a poll without any.
func TestTraceBuf(t *testing.T) {
	n := New(1)
	var sent, delivered []byte
	polls := 0
	n.Trace = func(ev TraceEvent) {
		switch ev.Kind {
		case TraceSend:
			sent = bytes.Clone(ev.Buf)
		case TraceDeliver:
			delivered = bytes.Clone(ev.Buf)
		case TracePoll:
			polls++
			if ev.Buf != nil {
				t.Errorf("a poll traced with bytes %q", ev.Buf)
			}
		}
	}
	a, b := &testNode{}, &testNode{}
	a.outbox = append(a.outbox, netio.Datagram{Addr: ap(2), Buf: []byte("hello")})
	link := LinkConfig{Rate: 1e9, Latency: us(3)}
	n.Attach(ap(1), a, link, link)
	n.Attach(ap(2), b, link, link)
	n.RunFor(time.Millisecond)
	if string(sent) != "hello" || string(delivered) != "hello" || polls == 0 {
		t.Fatalf("traced send %q, delivery %q, %d polls", sent, delivered, polls)
	}
}
