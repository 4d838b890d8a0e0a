//go:build linux

package netio

import (
	"runtime"
	"testing"
	"time"
)

// pollOnce starts a ReadBatch on dst, sends one datagram from src after
// delay, and returns the change in dst's ReadSleeps and BusyPollHits.
func pollOnce(t *testing.T, src, dst *UDPConn, delay time.Duration) (sleeps, hits uint64) {
	t.Helper()
	before := dst.Stats()
	read := make(chan error, 1)
	go func() {
		ds := []Datagram{{Buf: make([]byte, MaxDatagram)}}
		n, err := dst.ReadBatch(ds)
		if err == nil && n != 1 {
			t.Errorf("ReadBatch: %d datagrams, want 1", n)
		}
		read <- err
	}()
	time.Sleep(delay)
	if err := src.WriteBatch([]Datagram{{Addr: dst.LocalAddr(), Buf: []byte("ping")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	after := dst.Stats()
	return after.ReadSleeps - before.ReadSleeps, after.BusyPollHits - before.BusyPollHits
}

// withMachine makes the busy poll see the machine as oversubscribed, or
// not, for the test's duration.
func withMachine(t *testing.T, over bool) {
	old := oversubscribed
	oversubscribed = func() bool { return over }
	t.Cleanup(func() { oversubscribed = old })
}

// TestBusyPoll: with BusyPoll a receive that finds the socket empty
// polls it and gets the datagram without waiting in the poller; without
// it, or on an oversubscribed machine, it waits.
func TestBusyPoll(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps: the sender runs while the reader polls")
	}
	src := listen(t, "127.0.0.1:0", UDPConfig{})
	t.Run("polling", func(t *testing.T) {
		withMachine(t, false)
		dst := listen(t, "127.0.0.1:0", UDPConfig{BusyPoll: MaxBusyPoll})
		// The datagram comes 1 ms into a 10 ms poll: a hit, unless this
		// machine's scheduler held the reader for the whole poll, so
		// allow a few tries before calling it a failure.
		for try := 0; ; try++ {
			sleeps, hits := pollOnce(t, src, dst, time.Millisecond)
			if hits == 1 && sleeps == 0 {
				break
			}
			if hits > 1 || try == 20 {
				t.Fatalf("%d sleeps and %d poll hits, want 0 and 1", sleeps, hits)
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		withMachine(t, false)
		dst := listen(t, "127.0.0.1:0", UDPConfig{})
		var sleeps uint64
		for range 5 {
			s, hits := pollOnce(t, src, dst, time.Millisecond)
			if hits != 0 {
				t.Fatalf("%d poll hits without BusyPoll", hits)
			}
			sleeps += s
		}
		if sleeps == 0 {
			t.Errorf("no receive of 5 waited in the poller")
		}
	})
	t.Run("oversubscribed", func(t *testing.T) {
		withMachine(t, true)
		dst := listen(t, "127.0.0.1:0", UDPConfig{BusyPoll: MaxBusyPoll})
		for range 5 {
			if _, hits := pollOnce(t, src, dst, time.Millisecond); hits != 0 {
				t.Fatalf("%d poll hits on an oversubscribed machine", hits)
			}
		}
	})
}

// TestRunnable reads the machine's runnable threads: this test's own
// thread is one.
func TestRunnable(t *testing.T) {
	if n := runnable(); n < 1 || n > 1<<20 {
		t.Fatalf("runnable() = %d", n)
	}
}
