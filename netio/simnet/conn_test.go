package simnet

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/netio"
)

// serve runs n.Serve in a goroutine of the current bubble and returns a
// function that stops it and checks how it ended.
func serve(t *testing.T, n *Network) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve = %v, want context.Canceled", err)
		}
	}
}

func readBufs(k int) []netio.Datagram {
	ds := make([]netio.Datagram, k)
	for i := range ds {
		ds[i].Buf = make([]byte, netio.MaxDatagram)
	}
	return ds
}

// TestConnTiming: goroutines using Conns see the same exact timing as
// Nodes, on synctest's fake clock.
func TestConnTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a := n.ListenConn(ap(1), mbit100, mbit100)
		b := n.ListenConn(ap(2), mbit100, mbit100)
		defer a.Close()
		defer b.Close()
		stop := serve(t, n)
		defer stop()

		if got := n.ListenConn(ap(3), LinkConfig{}, LinkConfig{}).LocalAddr(); got != ap(3) {
			t.Errorf("LocalAddr = %v", got)
		}
		start := time.Now()
		var ds []netio.Datagram
		for i := range 10 {
			p := make([]byte, 1000)
			binary.BigEndian.PutUint32(p, uint32(i))
			ds = append(ds, netio.Datagram{Addr: ap(2), Buf: p})
		}
		if err := a.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
		rb := readBufs(b.BatchSize())
		for i := 0; i < 10; {
			k, err := b.ReadBatch(rb)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range rb[:k] {
				if want := us(170 + 80*i); time.Since(start) != want || d.RxTime != start.Add(want).UnixNano() {
					t.Errorf("datagram %d read at +%v, arrived +%v; want +%v", i, time.Since(start), time.Unix(0, d.RxTime).Sub(start), want)
				}
				if len(d.Buf) != 1000 || binary.BigEndian.Uint32(d.Buf) != uint32(i) || d.Addr != ap(1) {
					t.Errorf("datagram %d: len %d from %v", i, len(d.Buf), d.Addr)
				}
				i++
			}
		}
		var s Stats
		n.Locked(func() { s = n.Stats() })
		if s.Delivered != 10 || s.Dropped() != 0 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestConnWithNode: a goroutine with a Conn talks to a sans-I/O Node
// through one network, round trip exact.
// TestConnStall: datagrams that reach a stalled conn are read when the
// stall ends, each with its arrival time on the reader's clock.
func TestConnStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a := n.ListenConn(ap(1), mbit100, mbit100)
		b := n.ListenConn(ap(2), mbit100, mbit100)
		defer a.Close()
		defer b.Close()
		stop := serve(t, n)
		defer stop()
		start := time.Now()
		n.Locked(func() { n.Stall(ap(2), time.Millisecond) })
		ds := []netio.Datagram{{Addr: ap(2), Buf: make([]byte, 1000)}, {Addr: ap(2), Buf: make([]byte, 1000)}}
		if err := a.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
		rb := readBufs(b.BatchSize())
		for i := 0; i < 2; {
			k, err := b.ReadBatch(rb)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range rb[:k] {
				if got, arr, want := time.Since(start), time.Unix(0, d.RxTime).Sub(start), us(170+80*i); got != time.Millisecond || arr != want {
					t.Errorf("datagram %d read at +%v, arrived +%v; want +1ms and +%v", i, got, arr, want)
				}
				i++
			}
		}
	})
}

func TestConnWithNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		lat := LinkConfig{Latency: 25 * time.Microsecond}
		n.Attach(ap(2), &echoNode{}, lat, lat)
		c := n.ListenConn(ap(1), lat, lat)
		defer c.Close()
		stop := serve(t, n)
		defer stop()

		rb := readBufs(1)
		for round := range 3 {
			time.Sleep(time.Millisecond) // the clock and the network move together
			start := time.Now()
			if err := c.WriteBatch([]netio.Datagram{{Addr: ap(2), Buf: []byte{byte(round)}}}); err != nil {
				t.Fatal(err)
			}
			if k, err := c.ReadBatch(rb); err != nil || k != 1 || rb[0].Buf[0] != byte(round) {
				t.Fatalf("ReadBatch = %d, %v", k, err)
			}
			if rtt := time.Since(start); rtt != 100*time.Microsecond {
				t.Errorf("round %d: RTT %v, want 100µs", round, rtt)
			}
		}
	})
}

func TestConnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		c := n.ListenConn(ap(1), LinkConfig{}, LinkConfig{})
		stop := serve(t, n)
		defer stop()
		read := make(chan error)
		go func() {
			_, err := c.ReadBatch(readBufs(1))
			read <- err
		}()
		synctest.Wait()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-read; !errors.Is(err, netio.ErrClosed) {
			t.Errorf("blocked ReadBatch = %v, want ErrClosed", err)
		}
		if err := c.WriteBatch([]netio.Datagram{{Addr: ap(1)}}); !errors.Is(err, netio.ErrClosed) {
			t.Errorf("WriteBatch after Close = %v", err)
		}
		if err := c.Close(); !errors.Is(err, netio.ErrClosed) {
			t.Errorf("second Close = %v", err)
		}
		var attached bool
		n.Locked(func() { attached = n.Attached(ap(1)) })
		if attached {
			t.Error("Close did not detach")
		}
	})
}

// TestConnBuffers: a WriteBatch larger than the send buffer blocks until
// the network drains it; a receiver that does not read drops what its
// receive buffer cannot hold.
func TestConnBuffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a := n.ListenConn(ap(1), LinkConfig{}, LinkConfig{})
		b := n.ListenConn(ap(2), LinkConfig{}, LinkConfig{})
		defer a.Close()
		defer b.Close()
		stop := serve(t, n)
		defer stop()
		ds := make([]netio.Datagram, 100)
		for i := range ds {
			ds[i] = netio.Datagram{Addr: ap(2), Buf: make([]byte, netio.MaxDatagram)}
		}
		if err := a.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		var s Stats
		var elapsed time.Duration
		n.Locked(func() { s, elapsed = n.Stats(), n.Elapsed() })
		fit := uint64(ConnRecvBuffer / netio.MaxDatagram)
		if s.Delivered != 100 || s.DroppedRecvBuffer != 100-fit {
			t.Errorf("delivered %d, recv-buffer drops %d; want 100 and %d", s.Delivered, s.DroppedRecvBuffer, 100-fit)
		}
		if elapsed != time.Second {
			t.Errorf("virtual clock at +%v, want +1s: it must follow the fake clock", elapsed)
		}
	})
}

func TestServeTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		stop := serve(t, n)
		synctest.Wait()
		if err := n.Serve(t.Context()); !errors.Is(err, ErrServing) {
			t.Errorf("second Serve = %v, want ErrServing", err)
		}
		stop()
	})
}

// TestConnTail: a datagram's Tail arrives after its Buf, as one datagram.
func TestConnTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a := n.ListenConn(ap(1), mbit100, mbit100)
		b := n.ListenConn(ap(2), mbit100, mbit100)
		defer a.Close()
		defer b.Close()
		stop := serve(t, n)
		defer stop()
		if err := a.WriteBatch([]netio.Datagram{{Addr: ap(2), Buf: []byte("head:"), Tail: []byte("tail")}}); err != nil {
			t.Fatal(err)
		}
		rb := readBufs(1)
		k, err := b.ReadBatch(rb)
		if err != nil || k != 1 || string(rb[0].Buf) != "head:tail" {
			t.Fatalf("read %d (%v): %q", k, err, rb[0].Buf)
		}
	})
}

// TestConnViews: ReadBatchView hands out the datagrams ReadBatch would
// read, in the conn's own buffers and without the caller's (Buf nil),
// each intact until the next read however many datagrams arrive
// meanwhile, and the conn gives a read's buffers back at the next: it
// holds no more than the last read's.
func TestConnViews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		a := n.ListenConn(ap(1), mbit100, mbit100)
		b := n.ListenConn(ap(2), mbit100, mbit100)
		defer a.Close()
		defer b.Close()
		stop := serve(t, n)
		defer stop()
		vr, ok := b.(netio.ViewOnlyReader)
		if !ok {
			t.Fatal("a simnet conn is not a netio.ViewOnlyReader")
		}
		const total = 300
		ds := make([]netio.Datagram, b.BatchSize())
		sent, got := 0, 0
		send := func() {
			var out []netio.Datagram
			for range 20 {
				p := make([]byte, 1000+sent)
				binary.BigEndian.PutUint32(p, uint32(sent))
				out = append(out, netio.Datagram{Addr: ap(2), Buf: p})
				sent++
			}
			if err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
		}
		check := func(i int, d netio.Datagram) {
			t.Helper()
			if len(d.Buf) != 1000+i || binary.BigEndian.Uint32(d.Buf) != uint32(i) || d.Addr != ap(1) || cap(d.Buf) != len(d.Buf) {
				t.Fatalf("datagram %d: %d bytes (cap %d) saying %d from %v", i, len(d.Buf), cap(d.Buf), binary.BigEndian.Uint32(d.Buf), d.Addr)
			}
		}
		send()
		for got < total {
			for i := range ds {
				ds[i].Buf = nil
			}
			k, err := vr.ReadBatchView(ds)
			if err != nil {
				t.Fatal(err)
			}
			first := got
			for _, d := range ds[:k] {
				check(got, d)
				got++
			}
			if sent < total {
				// More arrive while the views are held: they stay intact.
				send()
				time.Sleep(5 * time.Millisecond)
				for i, d := range ds[:k] {
					check(first+i, d)
				}
			}
			c := b.(*simConn)
			c.mu.Lock()
			held := len(c.viewed)
			c.mu.Unlock()
			if held != k {
				t.Fatalf("the conn holds %d views, want the last read's %d", held, k)
			}
		}
	})
}
