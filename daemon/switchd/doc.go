// Package switchd is the NDMA forwarding-node daemon: it wires a
// fabric.Switch — the sans-I/O core that replicates multicast streams and
// merges their ACKs, reduces aggregation contributions in its slot pool,
// relays anycast requests, and runs the authenticated control plane (job
// rendezvous, service registration, heartbeats) — to a UDP socket through
// a fabric.Server, and exports the switch's and the socket's counters as
// Prometheus metrics. It is the library behind the `ndma switch` command;
// like memd for memory nodes, it only owns lifetimes: Start opens the
// socket and the optional metrics listener, Close (or Run, when its
// context ends) shuts them down. The protocol work is done by the cores
// underneath (fabric forwards, transport delivers).
//
// Fault injection (Config.Fault) drops, duplicates, reorders and corrupts
// what the switch sends, deterministically by seed, for testing endpoints
// against a lossy fabric on a kernel without netem.
//
// Metrics are read from the switch's counters and group table when
// Prometheus scrapes them (a custom prometheus.Collector on a private
// registry): the forwarding path carries no metric code at all.
package switchd
