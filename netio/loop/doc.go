// Package loop runs sans-I/O protocol cores over sockets. A core is a
// [Machine]: it takes received datagrams (Receive) and hands back what to
// send and when to be called next (Poll), never doing I/O or reading the
// clock. The same Machine runs on the simulated network (netio/simnet,
// whose Node is this interface) and, through one [Driver], on real
// sockets: the endpoint, the switch's server and the benchmarks all use
// it, as etcd raft's node drives any RawNode. Wrappers compose around a
// Machine (secure.Wrap seals and opens every datagram).
//
// A Driver owns the I/O: a reader goroutine per socket reads batches
// (netio.Conn.ReadBatch, or netio.ReadViews where the machine copies what
// it keeps) and, holding the owner's lock, hands each datagram to
// Receive and then pumps; a timer pumps at the machine's deadline. To
// pump is to Poll, write what Poll gave (one WriteBatch: GSO and the TOS
// mark of control datagrams are the socket's business), and Poll again
// at once while the machine asks for it, at most MaxPolls times, then arm
// the timer for the deadline. The owner's lock makes whoever holds it the
// machine's owner: the owner calls the machine (and PumpLocked) between
// the driver's calls, under the same lock, and hands completions to its
// callers from inside Poll.
package loop
