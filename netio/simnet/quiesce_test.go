package simnet

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/netio"
)

// TestServeQuiesce: with Quiesce, senders whose goroutines write at one
// instant, in whatever order they run, reach a receiver in the order of
// their addresses, and the receiver reads them all in one batch; and a
// reply written at the instant it arrives leaves at that instant.
func TestServeQuiesce(t *testing.T) {
	const senders = 8
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			n := New(1)
			n.Quiesce = true
			// The receiver's down link has no rate limit: what the
			// senders send at one instant arrives at one instant.
			rx := n.ListenConn(ap(100), mbit100, LinkConfig{Latency: mbit100.Latency})
			defer rx.Close()
			tx := make([]netio.Conn, senders)
			for i := range tx {
				tx[i] = n.ListenConn(ap(i+1), mbit100, mbit100)
				defer tx[i].Close()
			}
			stop := serve(t, n)
			defer stop()
			// Start the senders in a different order each round; each
			// writes at +1ms.
			var wg sync.WaitGroup
			for _, i := range rand.New(rand.NewPCG(uint64(round), 0)).Perm(senders) {
				wg.Go(func() {
					time.Sleep(time.Millisecond)
					if err := tx[i].WriteBatch([]netio.Datagram{{Addr: ap(100), Buf: []byte{byte(i)}}}); err != nil {
						t.Error(err)
					}
				})
			}
			ds := readBufs(2 * senders)
			k, err := rx.ReadBatch(ds)
			if err != nil {
				t.Fatal(err)
			}
			arrived := time.Now()
			if k != senders {
				t.Fatalf("round %d: read %d datagrams in the first batch, want all %d", round, k, senders)
			}
			for j, d := range ds[:k] {
				if d.Addr != ap(j+1) || d.Buf[0] != byte(j) {
					t.Fatalf("round %d: datagram %d from %v (%d), want from %v", round, j, d.Addr, d.Buf[0], ap(j+1))
				}
			}
			wg.Wait()
			// A reply at the instant of arrival leaves at once: it is back
			// one link latency and one serialization each way later.
			if err := rx.WriteBatch([]netio.Datagram{{Addr: ap(1), Buf: []byte{0}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := tx[0].ReadBatch(readBufs(1)); err != nil {
				t.Fatal(err)
			}
			if rtt, want := time.Since(arrived), 2*(mbit100.Latency+80*time.Nanosecond); rtt != want {
				t.Errorf("reply took %v, want %v", rtt, want)
			}
		})
	}
}

// TestServeTimerAfterWriters: with Quiesce, a Conn's timer callback due
// at an instant runs after every goroutine the clock woke at that instant
// has done its work, whichever of them was set first: a datagram a
// goroutine writes at +1ms leaves before the one the Conn's timer, due
// at +1ms too, writes.
func TestServeTimerAfterWriters(t *testing.T) {
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			n := New(1)
			n.Quiesce = true
			rx := n.ListenConn(ap(100), mbit100, LinkConfig{Latency: mbit100.Latency})
			defer rx.Close()
			tx := n.ListenConn(ap(1), mbit100, mbit100)
			defer tx.Close()
			stop := serve(t, n)
			defer stop()
			write := func(b byte) {
				if err := tx.WriteBatch([]netio.Datagram{{Addr: ap(100), Buf: []byte{b}}}); err != nil {
					t.Error(err)
				}
			}
			timer := tx.(netio.TimerConn).AfterFunc(func() { write('t') })
			var wg sync.WaitGroup
			app := func() { wg.Go(func() { time.Sleep(time.Millisecond); write('a') }) }
			// Which of the two is set first changes from round to round.
			if round%2 == 0 {
				timer.Reset(time.Millisecond)
				app()
			} else {
				app()
				timer.Reset(time.Millisecond)
			}
			var got []byte
			for len(got) < 2 {
				ds := readBufs(2)
				k, err := rx.ReadBatch(ds)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds[:k] {
					got = append(got, d.Buf[0])
				}
			}
			wg.Wait()
			if string(got) != "at" {
				t.Errorf("round %d: datagrams left in the order %q, want %q (the goroutine's, then the timer's)", round, got, "at")
			}
		})
	}
}
