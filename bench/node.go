package bench

import (
	"fmt"
	"net/netip"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// Node is an in-process memory node on a loopback UDP socket, whose store
// holds one region that allows every operation: an endpoint serving its
// store (StartNode), or a memory node's engine lending the region to a
// switch's pool (the pool benchmark's nodes).
type Node struct {
	// EP is StartNode's endpoint; nil for a pool node.
	EP   *endpoint.Endpoint
	pool *node.Node // a pool node's engine
	Key  uint64     // the region's key
	Size int        // the region's size in bytes
	// Direct is a region of the node outside the pool, for a direct
	// READ baseline (the region a node lends to the pool is reachable
	// only through the pool); 0 if none.
	Direct uint64
}

// StartNode starts a memory node on 127.0.0.1 (an ephemeral port) with a
// zeroed region of size bytes and a random key. mtu is the transport MTU
// in bytes (zero means the transport's default). Close it when done.
func StartNode(size, mtu int) (*Node, error) {
	return StartNodeWith(size, mtu, netio.UDPConfig{})
}

// StartNodeWith is StartNode with the node's socket configured by udp.
func StartNodeWith(size, mtu int, udp netio.UDPConfig) (*Node, error) {
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return nil, err
	}
	key, err := st.Alloc(size, wire.PermAll, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: memory node region: %w", err)
	}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Store: st, Transport: transport.Config{MTU: mtu}}, endpoint.Options{UDP: udp})
	if err != nil {
		return nil, fmt.Errorf("bench: memory node: %w", err)
	}
	return &Node{EP: ep, Key: key, Size: size}, nil
}

// Addr is the node's UDP address.
func (n *Node) Addr() netip.AddrPort {
	if n.pool != nil {
		return n.pool.LocalAddr()
	}
	return n.EP.LocalAddr()
}

// Close shuts the node down.
func (n *Node) Close() error {
	if n.pool != nil {
		return n.pool.Close()
	}
	return n.EP.Close()
}
