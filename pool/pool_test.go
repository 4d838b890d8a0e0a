package pool_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/memtest"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/pool"
	"github.com/ndma/ndma/wire"
)

var token = []byte("pool-test-token")

// testPool starts a switch and n memory nodes of size bytes each on
// loopback, lends the nodes' memory and returns a client.
func testPool(t *testing.T, n, size int) (*pool.Client, []*node.Node) {
	t.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := fabric.NewServer(conn, sw, nil)
	t.Cleanup(func() { srv.Close() })
	nodes := memtest.Lend(t, srv.Addr(), token, n, size)
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	c, err := pool.New(ep, srv.Addr().String(), pool.Options{Fabric: endpoint.FabricOptions{Token: token}})
	if err != nil {
		t.Fatal(err)
	}
	return c, nodes
}

// TestReadWriteUDP writes and reads a striped region over loopback at
// unaligned offsets across stripes and nodes, with atomics and vector ops.
func TestReadWriteUDP(t *testing.T) {
	c, _ := testPool(t, 4, 4<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Alloc(ctx, 3<<20+123, pool.AllocOptions{Stripe: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if r.Spec().Columns != 4 {
		t.Fatalf("spread over %d nodes, want 4", r.Spec().Columns)
	}
	// A fresh region reads as zeroes.
	zero := make([]byte, r.Size())
	if n, err := r.ReadAt(zero, 0); err != nil || n != len(zero) || !bytes.Equal(zero, make([]byte, len(zero))) {
		t.Fatalf("fresh region: n %d err %v, or not zero", n, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20+777)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	off := int64(65536*3 - 5)
	if n, err := r.WriteAt(data, off); err != nil || n != len(data) {
		t.Fatalf("write: %d, %v", n, err)
	}
	got := make([]byte, len(data))
	if n, err := r.ReadAt(got, off); err != nil || n != len(got) || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d, %v, equal %v", n, err, bytes.Equal(got, data))
	}
	// io.ReaderAt at the end.
	tail := make([]byte, 200)
	if n, err := r.ReadAt(tail, r.Size()-100); n != 100 || err != io.EOF {
		t.Fatalf("read past the end: %d, %v", n, err)
	}
	if _, err := r.WriteAt(tail, r.Size()-100); !errors.Is(err, wire.StatusOutOfBounds) {
		t.Fatalf("write past the end: %v", err)
	}
	// Atomics and vectors at pool addresses.
	for i := range 5 {
		if old, err := r.FetchAdd(ctx, 2<<20, 3); err != nil || old != uint64(3*i) {
			t.Fatalf("fetch-add %d: old %d, %v", i, old, err)
		}
	}
	if old, err := r.CompareAndSwap(ctx, 2<<20, 15, 99); err != nil || old != 15 {
		t.Fatalf("cas: %d, %v", old, err)
	}
	if err := r.Apply(ctx, 16, wire.DtypeI64, wire.AluAdd, make([]byte, 128<<10)); err != nil {
		t.Fatalf("vector over two stripes: %v", err)
	}
	// A wrong key is refused at the switch.
	bad, err := c.Open(ctx, r.ID(), r.Key()+1)
	if !errors.Is(err, wire.StatusBadKey) || bad != nil {
		t.Fatalf("open with a wrong key: %v", err)
	}
	if err := c.Free(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(got[:10], 0); !errors.Is(err, wire.StatusBadKey) {
		t.Fatalf("read of a freed region: %v", err)
	}
	// A new region on the same memory reads as zeroes again (scrubbed).
	r2, err := c.Alloc(ctx, 3<<20, pool.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	z := make([]byte, r2.Size())
	if _, err := r2.ReadAt(z, 0); err != nil || !bytes.Equal(z, make([]byte, len(z))) {
		t.Fatalf("reused memory not scrubbed (err %v)", err)
	}
}

// TestChainUDP reduces vectors held on four memory nodes with chained
// instructions over loopback, returns a chain's result to the client, and
// accumulates client data into memory.
func TestChainUDP(t *testing.T) {
	c, _ := testPool(t, 4, 4<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 256 << 10
	// One vector per stripe: source k on node k, the result on node 0.
	r, err := c.Alloc(ctx, 5*n, pool.AllocOptions{Stripe: n})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, n/8)
	rng := rand.New(rand.NewPCG(5, 6))
	var srcs []uint64
	for k := range 4 {
		v := make([]byte, n)
		for i := range want {
			x := int64(rng.Uint64())
			binary.LittleEndian.PutUint64(v[8*i:], uint64(x))
			want[i] += x
		}
		if _, err := r.WriteAt(v, int64(k*n)); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, uint64(k*n))
	}
	if err := r.Reduce(ctx, 4*n, srcs, n, wire.DtypeI64, wire.AluAdd); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if _, err := r.ReadAt(got, 4*n); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if g := int64(binary.LittleEndian.Uint64(got[8*i:])); g != w {
			t.Fatalf("element %d: %d, want %d", i, g, w)
		}
	}
	// A chain that returns its data: max of sources 0 and 1, unaligned
	// to stripes (chunks cut at both hops' stripe boundaries).
	out := make([]byte, 100<<10)
	hops := []wire.ChainHop{{Addr: 1000 * 8, Op: wire.ChainLoad}, {Addr: n + 3000*8, Op: wire.ChainApply}}
	if err := r.Chain(ctx, hops, len(out), wire.DtypeI64, wire.AluMax, nil, out); err != nil {
		t.Fatal(err)
	}
	a, b := make([]byte, len(out)), make([]byte, len(out))
	r.ReadAt(a, 1000*8)
	r.ReadAt(b, n+3000*8)
	for i := 0; i < len(out); i += 8 {
		x, y := int64(binary.LittleEndian.Uint64(a[i:])), int64(binary.LittleEndian.Uint64(b[i:]))
		if g := int64(binary.LittleEndian.Uint64(out[i:])); g != max(x, y) {
			t.Fatalf("max element %d: %d, want %d", i/8, g, max(x, y))
		}
	}
	// Client data accumulated into memory by the chain's only hop.
	ones := make([]byte, 4096)
	for i := 0; i < len(ones); i += 8 {
		binary.LittleEndian.PutUint64(ones[i:], 1)
	}
	if err := r.Chain(ctx, []wire.ChainHop{{Addr: 4 * n, Op: wire.ChainAccumulate}}, len(ones), wire.DtypeI64, wire.AluAdd, ones, nil); err != nil {
		t.Fatal(err)
	}
	r.ReadAt(got[:8], 4*n)
	if g := int64(binary.LittleEndian.Uint64(got)); g != want[0]+1 {
		t.Fatalf("accumulate: %d, want %d", g, want[0]+1)
	}
	// Refusals: a hop out of range, a replicated region.
	if err := r.Reduce(ctx, 5*n-8, srcs, n, wire.DtypeI64, wire.AluAdd); !errors.Is(err, wire.StatusOutOfBounds) {
		t.Fatalf("reduce past the end: %v", err)
	}
	rep, err := c.Alloc(ctx, 1<<20, pool.AllocOptions{Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Reduce(ctx, 0, []uint64{4096}, 64, wire.DtypeI64, wire.AluAdd); !errors.Is(err, wire.StatusBadOperand) {
		t.Fatalf("chain on a replicated region: %v", err)
	}
}
