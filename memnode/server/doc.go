// Package server is the memory server: it serves a memnode.Store to
// peers over the transport, and, on a memory node of a pool, the pool
// requests, chain hops, grants and rebuild orders the switch sends it.
//
// It is a sans-I/O piece that runs inside a core, on the core's
// goroutine: the core hands it the requests its transport delivered
// (Serve, Admit) and the pool datagrams it received (ServePool), and the
// server answers through the core (Host: transport replies, raw pool
// datagrams, the pool reads of a rebuild, the control message that ends
// one). Two cores run it: the host library's endpoint.Core, which serves
// the memory an application registers, and the memory node's engine
// (memnode/node), which serves a daemon's regions and lends one to a
// switch's pool. It never does I/O, never reads the clock (every call
// takes now), and never logs.
package server
