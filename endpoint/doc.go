// Package endpoint is the host side of NDMA: the library an application
// links to drive one-sided operations (READ, WRITE, compare-and-swap,
// fetch-and-add, vector ALU ops) against memory nodes and other endpoints,
// and to expose its own registered memory to theirs; group operations
// through a forwarding node; and pool accesses (Op.Pool: datagrams through
// the switch's MMU, answered by the memory nodes). Package pool is the
// friendly client on top. A memory node of a pool is not an endpoint: it
// runs memnode/node, which shares the memory server (memnode/server), the
// pool client's lanes and the control client with this package.
//
// Core is sans-I/O: it owns a transport.Engine, the table of outstanding
// operations and a memnode.Store it serves to peers, and is driven with
// Receive/Poll and an explicit time, so the same code runs over real UDP and
// on netio/simnet in virtual time. Endpoint drives a Core over a
// netio.Conn with one reader goroutine, a timer and a mutex, and offers the
// blocking (context.Context) and asynchronous (Start/Done) APIs.
package endpoint
