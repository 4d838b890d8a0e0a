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
		"fenced read":         {Kind: KindRead, Buf: make([]byte, 8), Fence: wire.Fence{ID: 1, Token: 1}},
		"fenced optim":        {Kind: KindOptim, Buf: make([]byte, 8), Stride: 64, Fence: wire.Fence{ID: 1, Token: 1}},
		"raise to token 0":    {Kind: KindFence, Fence: wire.Fence{ID: 1}},
	} {
		op.Peer, op.Pool, op.Key = sw, 1, 1
		if err := c.Post(now, op); !errors.Is(err, ErrBadOp) {
			t.Errorf("%s: %v, want ErrBadOp", name, err)
		}
	}
	for name, op := range map[string]*Op{
		"fenced write to a memory server": {Kind: KindWrite, Buf: make([]byte, 8), Fence: wire.Fence{ID: 1, Token: 1}},
		"raise at a memory server":        {Kind: KindFence, Fence: wire.Fence{ID: 1, Token: 1}},
	} {
		op.Peer, op.Key = sw, 1
		if err := c.Post(now, op); !errors.Is(err, ErrBadOp) {
			t.Errorf("%s: %v, want ErrBadOp", name, err)
		}
	}
}

// TestPoolFencedDatagrams posts a fenced write larger than a segment and
// a raise: every datagram carries the fence after its data, and still
// leaves room for the reply-to address the switch appends.
func TestPoolFencedDatagrams(t *testing.T) {
	c, err := NewCore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1, 0)
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	fc := wire.Fence{ID: 3, Token: 5<<32 | 77}
	data := make([]byte, 3*c.PoolSegment())
	for i := range data {
		data[i] = byte(i)
	}
	w := &Op{Kind: KindWrite, Peer: sw, Pool: 1, Key: 9, Buf: data, Fence: fc}
	r := &Op{Kind: KindFence, Peer: sw, Pool: 1, Key: 9, Addr: 4096, Fence: fc}
	for _, op := range []*Op{w, r} {
		if err := c.Post(now, op); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	raises := 0
	for _, d := range c.flushPool(nil) {
		pkt := append(append([]byte(nil), d.Buf...), d.Tail...)
		var h wire.Header
		payload, _, err := wire.Parse(pkt, &h)
		if err != nil {
			t.Fatal(err)
		}
		if h.Flags&wire.FlagFence == 0 || len(pkt)+wire.ReplyToLen > c.MTU() {
			t.Fatalf("%v datagram of %d bytes, flags %#x", h.Op, len(pkt), h.Flags)
		}
		body, f, err := wire.SplitFence(payload)
		if err != nil || f != fc {
			t.Fatalf("%v datagram: fence %+v, %v", h.Op, f, err)
		}
		switch h.Op {
		case wire.OpWrite:
			got = append(got, body...)
		case wire.OpFence:
			raises++
			if len(body) != 0 || h.Addr != 4096 {
				t.Fatalf("raise with %d payload bytes at %#x", len(body), h.Addr)
			}
		}
	}
	if raises != 1 || string(got) != string(data) {
		t.Fatalf("%d raises, %d of %d bytes written", raises, len(got), len(data))
	}
}
