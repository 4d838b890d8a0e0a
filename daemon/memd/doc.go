// Package memd is the NDMA memory-node daemon: it wires a memnode.Store
// holding the node's regions to a memory node engine (memnode/node) on a
// UDP socket, so that peers' one-sided READ, WRITE, compare-and-swap,
// fetch-and-add and vector ALU requests are executed against the store,
// lends its first region to a switch's pool when Config.Switch is set,
// and exports the node's and the socket's counters as Prometheus
// metrics. It is the library behind the `ndma memd` command; the
// protocol work itself is done by the sans-I/O cores underneath (memnode
// executes, transport delivers, memnode/server serves, memnode/node
// runs them), and memd only owns their lifetime: Start opens the socket
// and the optional metrics listener, Close (or Run, when its context
// ends) shuts them down. It imports nothing of the host library
// (endpoint).
//
// Regions come either from a key file (memnode.LoadKeyFile), with the keys
// the operator chose, or, without one, as a single region of Config.Size
// bytes under a random key drawn from crypto/rand. Region memory is
// allocated with make, so a large region costs address space, not resident
// memory, until peers touch it.
//
// Metrics are read from the node's counters when Prometheus scrapes them
// (a custom prometheus.Collector on a private registry): the request path
// carries no metric code at all.
package memd
