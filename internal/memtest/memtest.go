// Package memtest starts memory nodes for tests: memory-node engines
// (memnode/node) that serve a region of memory to a switch's pool, over
// loopback UDP.
package memtest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// Node starts a memory node on loopback that serves size bytes of memory
// to the pool of the switch at sw (token its fabric token); it does not
// lend them (call Lend on it, or use Lend). It returns the node, closed
// when the test ends, and the region's key.
func Node(t testing.TB, sw netip.AddrPort, token []byte, size int) (*node.Node, uint64) {
	t.Helper()
	return NodeAt(t, "127.0.0.1:0", sw, token, size)
}

// NodeAt is Node on the UDP address listen (a node started again where
// one ran before).
func NodeAt(t testing.TB, listen string, sw netip.AddrPort, token []byte, size int) (*node.Node, uint64) {
	t.Helper()
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Alloc(size, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := netio.ListenUDP(listen, netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(conn, node.Config{Store: st, Pool: &server.PoolServe{Switch: sw, Key: key, Token: token}}, node.Options{})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, key
}

// Lend starts n memory nodes (Node) and lends each one's size bytes to
// the switch's pool; they offer them until the test ends.
func Lend(t testing.TB, sw netip.AddrPort, token []byte, n, size int) []*node.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var nodes []*node.Node
	for range n {
		nd, key := Node(t, sw, token, size)
		if _, err := nd.Lend(ctx, sw, key, uint64(size), ctrlclient.Options{Token: token}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
	}
	return nodes
}
