package pool_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
)

// TestReprove: a client whose last control exchange with the switch is
// older than ReproveAfter opens its region again before a read, so that
// the switch (which forgets proven addresses after PoolClientTTL) keeps
// forwarding its reads; a fresh client makes no such exchange.
func TestReprove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	defer srv.Close()
	opts := endpoint.FabricOptions{Token: token}
	memtest.Lend(t, srv.Addr(), token, 1, 1<<20)
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	c, err := pool.New(ep, srv.Addr().String(), pool.Options{Fabric: opts})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Alloc(ctx, 64<<10, pool.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, 32<<10)
	if _, err := r.WriteAtContext(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	// The region opens the client made: the control operations its
	// endpoint (which nothing else uses) posted, less the proofs that
	// endpoint's core sends by itself when pool requests go unanswered
	// (a request resent twice, which a loaded machine can cause). The switch's
	// ControlIn counts neither alone: the memory node's heartbeats, one
	// every 250ms, move it too. (The slot KindControl&7 is shared with
	// anycasts, which a pool client never posts.)
	opens := func() uint64 {
		st := ep.Stats()
		return st.OpsByKind[endpoint.KindControl&7] - st.Pool.Proofs
	}
	back := make([]byte, len(data))
	before := opens()
	if _, err := r.ReadAtContext(ctx, back, 0); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("read: %v", err)
	}
	if n := opens() - before; n != 0 {
		t.Fatalf("a freshly proven client opened its region %d times to read", n)
	}
	pool.AgeProof(c)
	clear(back)
	if _, err := r.ReadAtContext(ctx, back, 0); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("read after the proof aged: %v", err)
	}
	if n := opens() - before; n != 1 {
		t.Fatalf("%d region opens before a read with an aged proof, want 1", n)
	}
}
