// Package bench measures NDMA the way the OSU micro-benchmarks measure MPI
// and RDMA: latency of one operation in flight (p50 and p99 in
// microseconds) and goodput with a window of operations in flight (Gbit/s),
// against a memory node, together with baselines measured in the same run
// on the same host — a plain UDP ping-pong for latency and a kernel TCP
// stream for bandwidth — so that every NDMA number comes with its ratio to
// what the operating system's own transports achieve.
//
// Run drives an endpoint over real UDP, against a memory node it starts
// in-process on loopback (StartNode) or an external one (ndma memd).
// RunSim drives the same sans-I/O endpoint cores over netio/simnet in
// virtual time, so that goodput under configured link rate, latency and
// random loss is measured deterministically by seed. Both report Results,
// which WriteTable prints as a readable table and WriteJSON as JSON Lines.
// The ndma bench rw command is a thin flag-parsing layer over this package.
package bench
