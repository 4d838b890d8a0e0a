package loop

import (
	"bytes"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a reader goroutine outlives its
// driver.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait in these tests; loopback delivers in
// microseconds.
const waitTimeout = 10 * time.Second

// echo sends back every datagram it receives, marking the odd ones
// Control, and asks for a Poll at wake, once.
type echo struct {
	got   int
	out   []netio.Datagram
	bufs  [][]byte
	wake  time.Time
	polls []time.Time // Poll's now, each call
	woke  chan struct{}
}

func (e *echo) Receive(now time.Time, d netio.Datagram) {
	e.got++
	if len(e.bufs) <= len(e.out) {
		e.bufs = append(e.bufs, nil)
	}
	b := append(e.bufs[len(e.out)][:0], d.Buf...) // d.Buf is valid only now
	e.bufs[len(e.out)] = b
	e.out = append(e.out, netio.Datagram{Addr: d.Addr, Buf: b, Control: e.got%2 == 1})
}

func (e *echo) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	e.polls = append(e.polls, now)
	out = append(out, e.out...)
	e.out = e.out[:0]
	if !e.wake.IsZero() && !now.Before(e.wake) {
		e.wake = time.Time{}
		close(e.woke)
	}
	return out, e.wake
}

func listen(t *testing.T) *netio.UDPConn {
	t.Helper()
	c, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip writes n datagrams to addr from peer and reads n back, from
// the address from.
func roundTrip(t *testing.T, peer *netio.UDPConn, addr, from netip.AddrPort, n int) {
	t.Helper()
	var ds []netio.Datagram
	for i := range n {
		ds = append(ds, netio.Datagram{Addr: addr, Buf: fmt.Appendf(nil, "datagram %d", i)})
	}
	if err := peer.WriteBatch(ds); err != nil {
		t.Fatal(err)
	}
	in := make([]netio.Datagram, peer.BatchSize())
	got := map[string]bool{}
	for len(got) < n {
		for i := range in {
			in[i].Buf = make([]byte, netio.MaxDatagram)
		}
		k, err := peer.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range in[:k] {
			if d.Addr != from {
				t.Fatalf("a datagram from %v, not the driver's %v", d.Addr, from)
			}
			got[string(d.Buf)] = true
		}
	}
	for _, d := range ds {
		if !got[string(d.Buf)] {
			t.Fatalf("%q did not come back", d.Buf)
		}
	}
}

// TestDriverEcho: datagrams read from the socket reach the machine and
// what it sends goes out, over one socket or two (reading the second,
// writing the first), with copying reads or views, with writes under the
// lock or overlapping; Close stops the readers (TestMain checks) and is
// idempotent.
func TestDriverEcho(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		conns int
	}{
		{"copy", Config{}, 1},
		{"views-overlap", Config{Views: true, Overlap: true}, 1},
		{"two-sockets", Config{Views: true, Overlap: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := listen(t)
			defer peer.Close()
			conns := []netio.Conn{listen(t)}
			if tc.conns == 2 {
				conns = append(conns, listen(t))
			}
			var mu sync.Mutex
			d := New(&echo{}, &mu, conns, tc.cfg)
			d.Start()
			// Through the last socket: the echo goes out through the first.
			roundTrip(t, peer, conns[len(conns)-1].LocalAddr(), conns[0].LocalAddr(), 100)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if err := d.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := d.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDriverTimer: the machine is polled again at the deadline its Poll
// gave, not before.
func TestDriverTimer(t *testing.T) {
	var mu sync.Mutex
	m := &echo{woke: make(chan struct{})}
	d := New(m, &mu, []netio.Conn{listen(t)}, Config{})
	defer d.Close()
	d.Start()
	mu.Lock()
	start := time.Now()
	m.wake = start.Add(20 * time.Millisecond)
	d.PumpLocked(start)
	if at := d.TimerLocked(); !at.Equal(m.wake) {
		t.Errorf("timer armed for %v, want %v", at, m.wake)
	}
	want := m.wake
	d.ServeTimerLocked() // not due yet: no Poll
	polls := len(m.polls)
	mu.Unlock()
	if polls != 1 {
		t.Fatalf("%d Polls before the deadline, want 1", polls)
	}
	select {
	case <-m.woke:
	case <-time.After(waitTimeout):
		t.Fatal("the timer did not poll the machine")
	}
	mu.Lock()
	defer mu.Unlock()
	if last := m.polls[len(m.polls)-1]; last.Before(want) {
		t.Fatalf("polled at %v, before the deadline %v", last, want)
	}
	if !d.TimerLocked().IsZero() {
		t.Fatalf("timer still armed for %v", d.TimerLocked())
	}
}

// spinner asks to be polled at once while spin is set.
type spinner struct {
	spin  bool
	polls int
	idle  chan struct{} // closed at the first Poll after spin is cleared
}

func (s *spinner) Receive(time.Time, netio.Datagram) {}

func (s *spinner) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	s.polls++
	if s.spin {
		return out, now
	}
	if s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	return out, time.Time{}
}

// TestDriverMaxPolls: a pump polls a machine that keeps asking for it
// MaxPolls times, then leaves the rest to the timer.
func TestDriverMaxPolls(t *testing.T) {
	var mu sync.Mutex
	m := &spinner{spin: true, idle: make(chan struct{})}
	d := New(m, &mu, []netio.Conn{listen(t)}, Config{})
	defer d.Close()
	mu.Lock()
	d.PumpLocked(time.Now())
	if m.polls != MaxPolls {
		t.Errorf("one pump polled %d times, want %d", m.polls, MaxPolls)
	}
	if d.TimerLocked().IsZero() {
		t.Error("the timer is not armed for the Poll the machine asked for")
	}
	idle := m.idle
	m.spin = false
	mu.Unlock()
	select {
	case <-idle:
	case <-time.After(waitTimeout):
		t.Fatal("the timer did not poll the machine again")
	}
}

// TestDriverReceiveLocked: ReceiveLocked steps a batch the owner read itself and pumps; each Buf
// comes back at its full capacity.
func TestDriverReceiveLocked(t *testing.T) {
	peer := listen(t)
	defer peer.Close()
	var mu sync.Mutex
	m := &echo{}
	d := New(m, &mu, []netio.Conn{listen(t)}, Config{})
	defer d.Close()
	ds := []netio.Datagram{{Addr: peer.LocalAddr(), Buf: make([]byte, 5, 64)}}
	copy(ds[0].Buf, "hello")
	mu.Lock()
	d.ReceiveLocked(ds)
	mu.Unlock()
	if m.got != 1 || len(ds[0].Buf) != 64 {
		t.Fatalf("machine got %d datagrams; Buf back at length %d, want 64", m.got, len(ds[0].Buf))
	}
	in := []netio.Datagram{{Buf: make([]byte, netio.MaxDatagram)}}
	if _, err := peer.ReadBatch(in); err != nil || !bytes.Equal(in[0].Buf, []byte("hello")) {
		t.Fatalf("peer read %q, %v", in[0].Buf, err)
	}
}

// streamer writes two parts per Poll.
type streamer struct {
	echo
	parts int
}

func (s *streamer) PollWrite(now time.Time, scratch []netio.Datagram, write func([]netio.Datagram)) ([]netio.Datagram, time.Time) {
	out, next := s.Poll(now, scratch[:0])
	if h := len(out) / 2; h > 0 {
		s.parts++
		write(out[:h])
		out = out[h:]
	}
	if len(out) > 0 {
		s.parts++
		write(out)
	}
	return out[:0], next
}

// TestDriverStreamer: a Streamer's PollWrite is called instead of Poll,
// and every part it writes goes out.
func TestDriverStreamer(t *testing.T) {
	peer := listen(t)
	defer peer.Close()
	var mu sync.Mutex
	m := &streamer{}
	conn := listen(t)
	d := New(m, &mu, []netio.Conn{conn}, Config{})
	d.Start()
	roundTrip(t, peer, conn.LocalAddr(), conn.LocalAddr(), 10)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if m.parts == 0 {
		t.Fatal("PollWrite never wrote")
	}
}
