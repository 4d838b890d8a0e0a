// Package testbed builds a multi-host network on one Linux machine out of
// network namespaces, so that NDMA's real processes — one rank per host,
// the forwarding node, memory nodes — talk over real sockets and real links
// with a bandwidth limit, instead of over loopback or the simulated network.
//
// Up creates a switch namespace ("<prefix>-sw") and one namespace per host
// ("<prefix>-h0", "<prefix>-h1", …) and per memory node ("<prefix>-m0", …).
// Each host and memory node is joined to the switch namespace by a veth
// pair whose switch-side end is a port of a Linux bridge there, so ordinary
// IP traffic between hosts crosses the switch namespace too: host-based
// algorithms and in-network ones cross the same links. Both directions of
// every link are shaped by a tbf qdisc to Config.Rate (frames leaving back
// to back at most at Config.PeakRate, twice the rate by default), and
// every interface has Config.MTU. Each link's queue is one FIFO, or with
// Config.PriorityQueues three strict-priority bands that send the
// datagrams NDMA marks as control (its ACKs) ahead of queued data. The bridge itself carries the switch namespace's address,
// where `ndma switch` listens; `ndma memd` runs in each memory-node
// namespace, lending its region to the switch's memory pool. Addresses come from a private subnet that exists only inside
// these namespaces; nothing is created in the machine's own namespace.
//
// With Config.Leaves the fabric is a leaf-spine tree: the switch
// namespace is the spine, each leaf a namespace ("<prefix>-l0", …) with
// a bridge of its own, an address where its leaf switch listens, and an
// uplink to the spine's bridge shaped to Config.UplinkRate; the hosts'
// links are ports of their leaf's bridge.
//
// Run starts a command once per host namespace with the bootstrap
// environment coll.FromEnv reads (NDMA_RANK, NDMA_SIZE, NDMA_SWITCH and,
// with Config.Switches above 1, NDMA_SWITCHES,
// NDMA_JOB, NDMA_TOKEN, NDMA_MTU) and streams each rank's output prefixed
// by its rank.
// Down removes everything whose name carries the prefix — found through the
// state file and, so that it also works after a crash or without the state
// file, by scanning `ip netns list` and `ip netns pids` — and is idempotent.
//
// The package needs Linux, root and iproute2 (ip, tc); Check reports
// precisely which is missing. It is the lower half of `ndma testbed`.
package testbed
