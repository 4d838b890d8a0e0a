// Package node is the memory node's engine: the sans-I/O Core that a
// memory node (the daemon ndma memd) runs, and Node, which drives it on
// a UDP socket.
//
// The Core holds a transport engine, the memory server (memnode/server)
// that executes peers' one-sided requests against the node's Store and,
// when the node lends a region to a switch's pool, the pool requests,
// chain hops and grants the switch sends it, the pool client lanes
// (internal/poolclient) over which a rebuild reads the copies the node
// lost, and the control requests the node sends its switch (its offer
// and heartbeat, the report of its grants, the end of a rebuild). It is
// a loop.Machine: Receive(now, datagram), Poll(now) → datagrams,
// deadline; it never does I/O or reads the clock.
//
// Node runs the Core on a loop.Driver (a reader goroutine, a timer),
// wrapped in a secure.Layer when the node has a credential, and speaks
// the control protocol through internal/ctrlclient: Lend offers a region
// to a switch's pool and keeps offering it as the node's heartbeat,
// Leave withdraws it. The node imports nothing of the host library
// (endpoint): the pieces both use live below both.
package node
