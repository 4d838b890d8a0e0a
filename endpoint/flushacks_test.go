package endpoint

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// serveNet runs n in the background; stop ends it and checks that it
// ended for that reason.
func serveNet(t *testing.T, n *simnet.Network) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- n.Serve(ctx) }()
	return func() {
		cancel()
		if err := <-served; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve = %v", err)
		}
	}
}

// ackCounter counts the ACK packets written through a Conn.
type ackCounter struct {
	netio.Conn
	acks atomic.Int32
}

func (c *ackCounter) WriteBatch(ds []netio.Datagram) error {
	for _, d := range ds {
		var h wire.Header
		if _, _, err := wire.Parse(d.Buf, &h); err == nil && h.Op == wire.OpAck {
			c.acks.Add(1)
		}
	}
	return c.Conn.WriteBatch(ds)
}

// TestCloseFlushesAcks: the ACK of a lone response is held to ride on
// the next request, so a client that reads and closes at once must send
// it as it closes; otherwise the memory node would resend the response
// until it gave the client up for dead.
func TestCloseFlushesAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1)
		l := simnet.LinkConfig{Rate: 10e9, Latency: 5 * time.Microsecond}
		st, err := memnode.NewStore(memnode.Config{})
		if err != nil {
			t.Fatal(err)
		}
		key, err := st.Alloc(4096, wire.PermAll, 0)
		if err != nil {
			t.Fatal(err)
		}
		nodeAddr, cliAddr := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
		node, err := New(n.ListenConn(nodeAddr, l, l), Config{Store: st, Transport: transport.Config{Seed: 1}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		cc := &ackCounter{Conn: n.ListenConn(cliAddr, l, l)}
		cli, err := New(cc, Config{Transport: transport.Config{Seed: 2}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		stop := serveNet(t, n)
		defer func() {
			node.Close()
			stop()
		}()
		r := cli.Remote(nodeAddr)
		buf := make([]byte, 64)
		for range 3 {
			if err := r.Read(t.Context(), key, 0, buf); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		before := cc.acks.Load()
		cli.Close()
		if got := cc.acks.Load() - before; got != 1 {
			t.Fatalf("Close wrote %d ACKs, want the one held back", got)
		}
	})
}

// sentConn is a simnet conn whose Close lets the network take what was
// written first (a microsecond of virtual time, less than a round trip),
// as a kernel socket sends what was written before it closed.
type sentConn struct{ netio.Conn }

func (c sentConn) Close() error {
	time.Sleep(time.Microsecond)
	return c.Conn.Close()
}

// TestCloseLingersForStranger: data from a peer this endpoint never sent
// to is acknowledged in full only once the peer echoes a challenge (its
// address is not validated before). A receiver that closes as soon as
// the message is in (a Gather's root) lingers until it has sent that
// ACK, so the sender's message completes instead of failing after
// DeadTimeout.
func TestCloseLingersForStranger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1)
		l := simnet.LinkConfig{Rate: 10e9, Latency: 50 * time.Microsecond}
		rootAddr, rankAddr := netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2")
		root, err := New(sentConn{n.ListenConn(rootAddr, l, l)}, Config{Transport: transport.Config{Seed: 1}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		rank, err := New(n.ListenConn(rankAddr, l, l), Config{Transport: transport.Config{Seed: 2}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		stop := serveNet(t, n)
		defer func() {
			rank.Close()
			stop()
		}()
		send, err := rank.StartSendMsg(rootAddr, 1, 7, []byte("my part of the gather"), nil)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := root.RecvMsg(t.Context(), rankAddr, 1, 7, buf); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		root.Close()
		if d := time.Since(start); d > CloseLinger {
			t.Fatalf("Close took %v, more than CloseLinger", d)
		}
		select {
		case <-send.Done():
			if send.Err != nil {
				t.Fatalf("the rank's send failed: %v", send.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the rank's send did not complete")
		}
	})
}
