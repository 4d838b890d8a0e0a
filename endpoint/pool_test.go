package endpoint

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/internal/poolclient"
	"github.com/ndma/ndma/wire"
)

// TestPoolCancelReleases posts pool ops to many regions and cancels them:
// nothing stays in flight, and the table of congestion lanes stays
// bounded.
func TestPoolCancelReleases(t *testing.T) {
	c, err := NewCore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	for i := range 2 * poolclient.MaxLanes {
		op := &Op{Kind: KindFetchAdd, Peer: sw, Pool: uint32(i + 1), Key: 1, Add: 1}
		if err := c.Post(now, op); err != nil {
			t.Fatal(err)
		}
		c.Cancel(op)
		if !errors.Is(op.Err, ErrCanceled) {
			t.Fatalf("op %d: %v", i, op.Err)
		}
	}
	if n := c.pool.cl.Lanes(); n > poolclient.MaxLanes {
		t.Fatalf("%d lanes, want at most %d", n, poolclient.MaxLanes)
	}
	if c.Outstanding() != 0 || c.pool.cl.Requests() != 0 {
		t.Fatalf("outstanding %d, requests %d after cancelling every op", c.Outstanding(), c.pool.cl.Requests())
	}
}

// TestPoolPostErrors checks the ops a pool access refuses before sending.
func TestPoolPostErrors(t *testing.T) {
	c, err := NewCore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	for name, op := range map[string]*Op{
		"empty read":          {Kind: KindRead},
		"odd vector":          {Kind: KindVector, Dtype: wire.DtypeI64, Buf: make([]byte, 12)},
		"nop":                 {Kind: KindNop},
		"chain without hops":  {Kind: KindChain, ChainLen: 8},
		"chain too long":      {Kind: KindChain, ChainLen: 1 << 20, Chain: []wire.ChainHop{{Op: wire.ChainLoad}}},
		"chain load later":    {Kind: KindChain, ChainLen: 8, Buf: make([]byte, 8), Chain: []wire.ChainHop{{Op: wire.ChainApply}, {Op: wire.ChainLoad}}},
		"chain load and data": {Kind: KindChain, ChainLen: 8, Buf: make([]byte, 8), Chain: []wire.ChainHop{{Op: wire.ChainLoad}}},
		"optim no stride":     {Kind: KindOptim, Buf: make([]byte, 8)},
		"gf coefficient zero": {Kind: KindChain, ChainLen: 8, Buf: make([]byte, 8), Chain: []wire.ChainHop{{Op: wire.ChainDelta}, {Op: wire.ChainGFAccumulate}}},
		"store coefficient":   {Kind: KindChain, ChainLen: 8, Buf: make([]byte, 8), Chain: []wire.ChainHop{{Op: wire.ChainStore, Coef: 3}}},
	} {
		op.Peer, op.Pool, op.Key = sw, 1, 1
		if err := c.Post(now, op); !errors.Is(err, ErrBadOp) {
			t.Errorf("%s: %v, want ErrBadOp", name, err)
		}
	}
}
