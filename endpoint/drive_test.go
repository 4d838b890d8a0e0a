package endpoint

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// TestUDPDriving: callers that drive the endpoint themselves (Driving),
// one of them on a locked thread as a C caller is, side by side with a
// caller that does not and with the endpoint's reader: every operation
// completes with the right data, the driven datagrams were read by the
// callers, and a driver stops at its context's end and at Close.
func TestUDPDriving(t *testing.T) {
	srv := listen(t)
	mem := make([]byte, 1<<16)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New(conn, Config{}, Options{})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const callers, rounds = 4, 100
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx := ctx
			if c > 0 {
				cctx = Driving(ctx)
			}
			if c == 1 {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			r := cli.Remote(srv.LocalAddr())
			data := make([]byte, 3000)
			got := make([]byte, len(data))
			base := uint64(1024 + c*len(data))
			for i := range rounds {
				for j := range data {
					data[j] = byte(c*31 + i + j)
				}
				if err := r.Write(cctx, key, base, data); err != nil {
					errs <- err
					return
				}
				if err := r.Read(cctx, key, base, got); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, data) {
					errs <- errors.New("read back differs from what was written")
					return
				}
				if _, err := r.FetchAdd(cctx, key, 0, 1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	srv.Locked(func() {
		if n := binary.LittleEndian.Uint64(mem); n != callers*rounds {
			t.Errorf("fetch-add sum %d, want %d", n, callers*rounds)
		}
	})
	s := conn.Stats()
	if s.DirectReceives == 0 {
		t.Errorf("no datagram read by a driving caller (%d received)", s.DatagramsReceived)
	}
	t.Logf("%d of %d datagrams read by driving callers, %d direct waits", s.DirectReceives, s.DatagramsReceived, s.DirectWaits)

	// A driver waiting for a peer that never answers stops at its
	// context's deadline...
	dead, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	r := cli.Remote(dead.LocalAddr())
	buf := make([]byte, 8)
	short, cancelShort := context.WithTimeout(Driving(ctx), 100*time.Millisecond)
	start := time.Now()
	err = r.Read(short, 1, 0, buf)
	cancelShort()
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("read from a silent peer: %v after %v", err, time.Since(start))
	}
	// ...and at Close.
	res := make(chan error, 1)
	go func() { res <- r.Read(Driving(ctx), 1, 0, buf) }()
	time.Sleep(50 * time.Millisecond)
	cli.Close()
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("driving read at Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a driving read outlived Close")
	}
}

// TestUDPDrivingLetsOthersRun: with one scheduler slot (GOMAXPROCS=1), a
// driver waiting for a reply that does not come leaves the process's
// other goroutines room to run: another goroutine's reads, from a memory
// node in the same process, complete at their usual pace (the driver
// hands over the thread when it completes their ops, and gives its
// slot back while it waits long).
func TestUDPDrivingLetsOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	srv := listen(t)
	mem := make([]byte, 4096)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New(conn, Config{}, Options{})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	defer cli.Close()
	dead, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()

	// The driver: a read from a silent peer, until the reads are done.
	stop, cancelDriver := context.WithCancel(context.Background())
	drove := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		drove <- cli.Remote(dead.LocalAddr()).Read(Driving(stop), 1, 0, make([]byte, 8))
	}()
	for cli.drv.yields.Load() == 0 && !driverActive(cli) {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := cli.Remote(srv.LocalAddr())
	buf := make([]byte, 64)
	const reads = 200
	start := time.Now()
	for i := range reads {
		if err := r.Read(ctx, key, 0, buf); err != nil {
			t.Fatalf("read %d beside a driver: %v", i, err)
		}
	}
	cancelDriver()
	if err := <-drove; !errors.Is(err, context.Canceled) {
		t.Errorf("driver: %v, want its context's end", err)
	}
	// Starved, each read would wait for the runtime's 10 ms preemption
	// of the driver (its network poller runs only then).
	per := time.Since(start) / reads
	t.Logf("%d reads beside a driver, %v each; it yielded its thread %d times", reads, per, cli.drv.yields.Load())
	if per > 5*time.Millisecond {
		t.Errorf("reads beside a driver took %v each: the driver starves the process", per)
	}
}

// driverActive reports whether a goroutine drives ep.
func driverActive(ep *Endpoint) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.drv.active
}
