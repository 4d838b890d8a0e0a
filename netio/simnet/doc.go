// Package simnet is NDMA's deterministic, discrete-event simulated network.
//
// Every protocol core in NDMA (transport, fabric, memnode) is sans-I/O: it
// takes datagrams and the current time in and hands datagrams and its next
// deadline back. simnet drives such cores as [Node]s on a virtual clock, so a
// test of loss, reordering, duplication, corruption, crashes, partitions or
// bandwidth contention runs in microseconds of real time, never sleeps, and
// replays exactly from its seed: the same seed and the same sequence of calls
// give the same events at the same virtual times, bit for bit.
//
// The topology is a star. Every attached address has a full-duplex access
// link to a central crossbar that switches in zero time: the up link carries
// datagrams from the node to the crossbar, the down link from the crossbar to
// the node. A datagram from A to B crosses A's up link, then B's down link.
// Each link direction is a store-and-forward FIFO with its own rate,
// propagation latency, MTU, tail-drop queue and random impairments
// ([LinkConfig]), so contention at a shared receiver (incast) queues on the
// receiver's down link exactly as at a switch egress port. [Network.Stall]
// freezes a node for a while, as a process its machine does not schedule:
// what reaches it waits, as in a socket buffer, until it resumes. A link with
// ControlFirst sends datagrams marked Control (acknowledgments) ahead of
// queued data, as a port with a priority queue for control traffic.
//
// A Network is not safe for concurrent use; a test drives it from one
// goroutine with [Network.Step], [Network.RunFor] or [Network.RunUntil].
// [Network.ListenConn] and [Network.Serve] bridge goroutine-based code that
// uses a [netio.Conn] onto the network inside a testing/synctest bubble;
// with [Network.Quiesce], as deterministically as Step.
package simnet
