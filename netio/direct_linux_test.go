//go:build linux

package netio

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestDirectReader: a DirectReader finds nothing on an empty socket
// without blocking, sleeps in Wait until a datagram comes (or Wake, or
// its timeout), reads what arrived with the sender's address, counts it,
// and answers ErrClosed once it or its conn is closed.
func TestDirectReader(t *testing.T) {
	for _, gro := range []bool{false, true} {
		cfg := UDPConfig{DisableGRO: !gro}
		a, err := ListenUDP("127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ListenUDP("127.0.0.1:0", UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.NewDirectReader()
		if err != nil {
			t.Fatal(err)
		}
		ds := make([]Datagram, 4)
		for i := range ds {
			ds[i].Buf = make([]byte, MaxDatagram)
		}
		if n, err := r.TryReadBatch(ds); n != 0 || err != nil {
			t.Fatalf("empty socket: %d, %v", n, err)
		}
		// Waiting on an empty socket ends at the timeout (or earlier, at
		// a signal) with nothing to read.
		if err := r.Wait(20 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if n, err := r.TryReadBatch(ds); n != 0 || err != nil {
			t.Fatalf("empty socket after Wait: %d, %v", n, err)
		}
		r.Wake()
		start := time.Now()
		if err := r.Wait(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Wait after Wake took %v", d)
		}

		msgs := [][]byte{[]byte("one"), bytes.Repeat([]byte{7}, 1400), bytes.Repeat([]byte{9}, 1400)}
		out := make([]Datagram, len(msgs))
		for i, m := range msgs {
			out[i] = Datagram{Buf: m, Addr: a.LocalAddr()}
		}
		if err := b.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for deadline := time.Now().Add(5 * time.Second); len(got) < len(msgs) && time.Now().Before(deadline); {
			if err := r.Wait(time.Second); err != nil {
				t.Fatal(err)
			}
			n, err := r.TryReadBatch(ds)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if ds[i].Addr != b.LocalAddr() {
					t.Errorf("datagram from %v, want %v", ds[i].Addr, b.LocalAddr())
				}
				got = append(got, append([]byte(nil), ds[i].Buf...))
				ds[i].Buf = ds[i].Buf[:cap(ds[i].Buf)]
			}
		}
		if len(got) != len(msgs) {
			t.Fatalf("gro %v: read %d datagrams, want %d", gro, len(got), len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(got[i], msgs[i]) {
				t.Errorf("gro %v: datagram %d differs", gro, i)
			}
		}
		if s := a.Stats(); s.DirectReceives != uint64(len(msgs)) || s.DatagramsReceived != uint64(len(msgs)) || s.DirectWaits == 0 {
			t.Errorf("stats: %d direct of %d received, %d waits", s.DirectReceives, s.DatagramsReceived, s.DirectWaits)
		}

		a.Close()
		if _, err := r.TryReadBatch(ds); !errors.Is(err, ErrClosed) {
			t.Errorf("read after the conn's Close: %v", err)
		}
		if err := r.Wait(time.Second); !errors.Is(err, ErrClosed) {
			t.Errorf("wait after the conn's Close: %v", err)
		}
		if _, err := a.NewDirectReader(); !errors.Is(err, ErrClosed) {
			t.Errorf("new reader of a closed conn: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		r.Wake() // after Close: nothing written
		if err := r.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		b.Close()
	}
}

// TestDirectReaderBesideReader: datagrams sent while the conn's own
// reader and a DirectReader both read reach exactly one of them, each
// once.
func TestDirectReaderBesideReader(t *testing.T) {
	a, err := ListenUDP("127.0.0.1:0", UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ListenUDP("127.0.0.1:0", UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := a.NewDirectReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const total = 2000
	seen := make(chan byte, total)
	go func() {
		ds := make([]Datagram, 8)
		for i := range ds {
			ds[i].Buf = make([]byte, MaxDatagram)
		}
		for {
			n, err := a.ReadBatch(ds)
			if err != nil {
				return
			}
			for i := range n {
				seen <- ds[i].Buf[0]
				ds[i].Buf = ds[i].Buf[:cap(ds[i].Buf)]
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ds := make([]Datagram, 8)
		for i := range ds {
			ds[i].Buf = make([]byte, MaxDatagram)
		}
		for {
			if err := r.Wait(10 * time.Millisecond); err != nil {
				return
			}
			n, err := r.TryReadBatch(ds)
			if err != nil {
				return
			}
			for i := range n {
				seen <- ds[i].Buf[0]
				ds[i].Buf = ds[i].Buf[:cap(ds[i].Buf)]
			}
		}
	}()
	for i := range total {
		if err := b.WriteBatch([]Datagram{{Buf: []byte{byte(i)}, Addr: a.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // stay within the socket buffer
		}
	}
	count := make([]int, 256)
	timeout := time.After(10 * time.Second)
	for range total {
		select {
		case v := <-seen:
			count[v]++
		case <-timeout:
			t.Fatalf("datagrams lost: %d direct of %d received", a.Stats().DirectReceives, a.Stats().DatagramsReceived)
		}
	}
	for v, n := range count {
		if n != total/256+btoi(v < total%256) {
			t.Fatalf("value %d seen %d times", v, n)
		}
	}
	if s := a.Stats(); s.DatagramsReceived != total {
		t.Errorf("%d datagrams received, want %d", s.DatagramsReceived, total)
	}
	t.Logf("%d of %d read by the direct reader", a.Stats().DirectReceives, total)
	a.Close()
	<-done
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
