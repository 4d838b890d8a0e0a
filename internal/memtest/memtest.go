// Package memtest starts memory nodes for tests: endpoints that serve a
// region of memory to a switch's pool, over loopback UDP.
package memtest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/wire"
)

// Node starts an endpoint on loopback that serves size bytes of memory to
// the pool of the switch at sw (token its fabric token); it does not lend
// them (call PoolLend, or use Lend). It returns the endpoint, closed when
// the test ends, and the region's key.
func Node(t testing.TB, sw netip.AddrPort, token []byte, size int) (*endpoint.Endpoint, uint64) {
	t.Helper()
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Alloc(size, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Store: st,
		PoolNode: &endpoint.PoolServe{Switch: sw, Key: key, Token: token}}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep, key
}

// Lend starts n memory nodes (Node) and lends each one's size bytes to
// the switch's pool; they offer them until the test ends.
func Lend(t testing.TB, sw netip.AddrPort, token []byte, n, size int) []*endpoint.Endpoint {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var nodes []*endpoint.Endpoint
	for range n {
		ep, key := Node(t, sw, token, size)
		if _, err := ep.PoolLend(ctx, sw.String(), key, uint64(size), endpoint.FabricOptions{Token: token}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, ep)
	}
	return nodes
}
