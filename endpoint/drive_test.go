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

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
)

// TestUDPDriving: callers that drive the endpoint themselves (Driving),
// one of them on a locked thread as a C caller is, side by side with a
// caller that does not and with the endpoint's reader: every operation
// completes with the right data, the driven datagrams were read by the
// callers, and a driver stops at its context's end and at Close.
func TestUDPDriving(t *testing.T) {
	srv := listen(t)
	mem := make([]byte, 1<<16)
	key, err := srv.Register(mem, memnode.PermAll, 0)
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
