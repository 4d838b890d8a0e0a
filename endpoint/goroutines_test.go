package endpoint

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/internal/bubble"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// TestEndpointGoroutinesBounded: a flood of anycast requests runs at
// most MaxIncoming handler goroutines (the rest are refused with
// StatusBusy), and completions whose notify channel is full are handed
// over by one goroutine, not one each. Goroutines are counted inside a
// synctest bubble, where synctest.Wait makes the counts exact (the
// bubble's own, not the process's: other tests' goroutines and the
// runtime's finalizer goroutine are not counted).
func TestEndpointGoroutinesBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1)
		l := simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}
		epAddr := netip.MustParseAddrPort("10.0.0.1:1")
		ep, err := New(n.ListenConn(epAddr, l, l), Config{MaxIncoming: 4, Transport: transport.Config{Seed: 1}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sw := n.ListenConn(swAddr, l, l)
		stop := serveNet(t, n)
		defer func() {
			ep.Close()
			sw.Close()
			stop()
		}()

		release := make(chan struct{})
		var entered atomic.Int32
		ep.mu.Lock()
		ep.core.EnableGroups()
		ep.core.SetMember(7, 1)
		ep.services[7] = &Service{ep: ep, id: 7, handler: func(uint64, Caller, []byte) ([]byte, error) {
			entered.Add(1)
			<-release
			return []byte("ok"), nil
		}}
		ep.mu.Unlock()
		synctest.Wait()
		base := bubble.Goroutines()

		f := newForger()
		var ds []netio.Datagram
		for i := range 40 {
			h := wire.Header{Op: wire.OpData, Mode: wire.ModeAnycast, Group: 7, Src: wire.MemberAll, Dst: 1, MsgID: uint64(i + 1), MsgLen: 8}
			ds = append(ds, netio.Datagram{Addr: epAddr, Buf: f.packet(h, fill(8, byte(i)))})
		}
		if err := sw.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // virtual: the datagrams cross the link
		synctest.Wait()
		if got, extra := entered.Load(), bubble.Goroutines()-base; got != 4 || extra > 4 {
			t.Fatalf("40 requests: %d handlers entered, %d goroutines more; want 4 and at most 4", got, extra)
		}
		if st := ep.Stats(); st.RequestsRefused != 36 {
			t.Fatalf("%d requests refused, want 36", st.RequestsRefused)
		}
		close(release)
		time.Sleep(time.Millisecond)
		synctest.Wait()

		// 50 completions for an unbuffered channel nobody reads yet.
		base = bubble.Goroutines()
		notify := make(chan *Op)
		ops := make([]*Op, 50)
		for i := range ops {
			op, err := ep.StartRecvMsg(swAddr, 1, uint64(i), make([]byte, 8), notify)
			if err != nil {
				t.Fatal(err)
			}
			ops[i] = op
			ep.Cancel(op)
		}
		synctest.Wait()
		if extra := bubble.Goroutines() - base; extra > 1 {
			t.Fatalf("50 pending completions: %d goroutines more, want at most 1", extra)
		}
		for i := range ops {
			if op := <-notify; op != ops[i] || !errors.Is(op.Err, ErrCanceled) {
				t.Fatalf("completion %d: %v", i, op.Err)
			}
		}
		synctest.Wait()
		if extra := bubble.Goroutines() - base; extra != 0 {
			t.Fatalf("%d goroutines left after the completions were taken", extra)
		}
	})
}
