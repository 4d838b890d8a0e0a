package simhost

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
)

// echo is a toy core: it answers each datagram with a copy, and each
// answer sent completes one op (the datagram's first byte).
type echo struct {
	out  []netio.Datagram
	done []int
	rx   []int64 // RxTime of each datagram received
}

func (e *echo) Receive(now time.Time, d netio.Datagram) {
	e.rx = append(e.rx, d.RxTime)
	e.out = append(e.out, netio.Datagram{Addr: d.Addr, Buf: append([]byte(nil), d.Buf...)})
}

func (e *echo) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, []int, time.Time) {
	for _, d := range e.out {
		out = append(out, d)
		e.done = append(e.done, int(d.Buf[0]))
	}
	e.out = e.out[:0]
	done := e.done
	e.done = nil
	return out, done, time.Time{}
}

// sink takes what arrives.
type sink struct{ got [][]byte }

func (s *sink) Receive(now time.Time, d netio.Datagram) {
	s.got = append(s.got, append([]byte(nil), d.Buf...))
}
func (s *sink) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	return out, time.Time{}
}

func TestHost(t *testing.T) {
	n := simnet.New(1)
	l := simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}
	a := netip.MustParseAddrPort("10.0.0.1:1")
	b := netip.MustParseAddrPort("10.0.0.2:1")
	e := &echo{}
	var done []int
	var tracked []int
	before := 0
	tick := Ticker{Every: time.Millisecond}
	ticks := 0
	h := &Host[int]{
		Core: e,
		Before: func(now time.Time) {
			before++
			if tick.Due(now) {
				ticks++
			}
		},
		Done:     func(_ time.Time, op int) { done = append(done, op) },
		Deadline: tick.Next,
	}
	start := n.Now()
	h.Attach(n, a, l, l)
	if h.Addr() != a {
		t.Fatalf("Addr %v, want %v", h.Addr(), a)
	}
	s := &sink{}
	n.Attach(b, s, l, l)
	h.Track(7, func(op int) { tracked = append(tracked, op) })
	n.Inject(b, a, []byte{7})
	n.Inject(b, a, []byte{8})
	n.Stall(a, time.Millisecond/2)
	n.RunFor(5*time.Millisecond + time.Microsecond)
	if len(s.got) != 2 {
		t.Fatalf("echoed %d datagrams, want 2", len(s.got))
	}
	if len(tracked) != 1 || tracked[0] != 7 || len(done) != 1 || done[0] != 8 {
		t.Fatalf("tracked %v, done %v: want [7] and [8]", tracked, done)
	}
	if ticks != 5 { // at the first poll, then every millisecond
		t.Fatalf("%d ticks in 5ms, want 5", ticks)
	}
	// Held while stalled, the datagrams keep their arrival time.
	for _, rx := range e.rx {
		if at := time.Unix(0, rx).Sub(start); at <= 0 || at >= time.Millisecond/2 {
			t.Fatalf("RxTime %v after the start, want the arrival within the stall", at)
		}
	}
	if before == 0 {
		t.Fatal("Before never ran")
	}
}

func TestRepoll(t *testing.T) {
	n := simnet.New(1)
	l := simnet.LinkConfig{Rate: 1e9, Latency: 10 * time.Microsecond}
	a := netip.MustParseAddrPort("10.0.0.1:1")
	e := &echo{}
	polls := 0
	h := &Host[int]{Core: e, Before: func(time.Time) { polls++ }, Repoll: true}
	h.Attach(n, a, l, l)
	e.done = []int{1}
	h.Wake()
	n.RunFor(time.Millisecond)
	if polls < 2 {
		t.Fatalf("%d polls: a completion did not ask for another", polls)
	}
}
